#!/bin/bash
# Session 18, call 5: where ResNet-50's and ResNet-18's mixed steps go, dispatch by dispatch
# (the committed tree), for the next session's choices.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/profiles.txt
timeout 90 $C bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 5 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
timeout 90 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 5 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
grep -E "images/s|^conv2d_coop|^batchnorm" $O/profile_resnet*_mixed.txt | tee -a $O/profiles.txt
