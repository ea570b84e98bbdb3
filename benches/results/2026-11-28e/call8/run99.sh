#!/bin/bash
# Session 29, call 8 (H200): the 64 x 64-region tiles (widest, wide_tall; one workgroup a unit by registers) with unused workgroup memory added (CONVOY_PAD_SG64 floats), alternating; the 128 x 128 K-16 tile at 24 KB in all.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
bench() { timeout 40 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for pad in 0 2048 2560; do
    export CONVOY_PAD_SG64=$pad
    bench resnet18_cifar 32 256 10 40 r18c_${pad}_$r
    bench resnet50 224 128 1000 12 r50_${pad}_$r
    bench resnet18 224 256 1000 12 r18_${pad}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
