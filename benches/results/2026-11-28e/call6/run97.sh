#!/bin/bash
# Session 29, call 6 (H200): the 128 x 128 K-16 tile's staging padded to 24 KB of workgroup memory (CONVOY_STAGE_PAD=1024 floats) against none, same binary, alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy_pad; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
bench() { timeout 40 .gpu/convoy_pad bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for pad in none 1024; do
    if [ $pad = none ]; then unset CONVOY_STAGE_PAD; else export CONVOY_STAGE_PAD=$pad; fi
    bench resnet18_cifar 32 256 10 40 r18c_${pad}_$r
    bench resnet50 224 128 1000 12 r50_${pad}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
