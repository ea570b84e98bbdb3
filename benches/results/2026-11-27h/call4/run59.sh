#!/bin/bash
# Session 24, call 4: weight gradients on tensor-core tiles with A and B staged as f16 (5429315),
# and per-kernel profiles of resnet18 and resnet50 mixed.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz gemm.xz; do unxz -f $f; done && chmod +x convoy gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
T=auto,128x128/64x32/1/16,128x128/64x32/2/16,128x128/64x32/1/32,64x64/32x32/1/16,64x64/32x32/2/32,128x64/32x32/2/32,128x128/32x64/1/16,256x128/64x64/1/16,128x256/64x64/1/16,128x128/64x64/1/16,128x128/64x64/2/32
timeout 200 .gpu/gemm "weight grad" --store f16 --reps 20 --coop $T > $O/gemm_wgrad_tiles.txt 2>&1; echo "gemm rc=$?" | tee -a $O/verify.txt
grep " mixed " $O/gemm_wgrad_tiles.txt | cut -c1-100 >> $O/verify.txt
C=.gpu/convoy
timeout 60 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
timeout 60 $C bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
head -12 $O/profile_resnet18_mixed.txt $O/profile_resnet50_mixed.txt >> $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
