#!/bin/bash
# Session 24, call 7: per-dispatch profiles of MobileNetV2 mixed, base (618f621) and new (call 5's binary).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz convoy_base.xz; do unxz -f $f; done && chmod +x convoy convoy_base && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for b in base new; do
  C=.gpu/convoy; [ $b = base ] && C=.gpu/convoy_base
  timeout 60 $C bench --model mobilenet_v2 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_mobilenet_v2_$b.txt 2>&1
  head -8 $O/profile_mobilenet_v2_$b.txt | tee -a $O/verify.txt
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
