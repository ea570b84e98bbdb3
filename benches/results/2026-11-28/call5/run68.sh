#!/bin/bash
# Session 25, call 5: where 128 x 128 should replace the wide tiles: 3x3 256 at resnet50's
# batch-128 layer-3 size (gemm --side 20: 10x10, M 25,600, a 200-workgroup wide grid), and
# resnet50 / resnet18_cifar mixed on new (wide grid <= 256) against g128 (<= 128).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_g128 gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm "matmul" --reps 200 > /dev/null 2>&1
for s in 20 28; do timeout 60 .gpu/gemm "3x3 256" --side $s --store f16 --coop auto,128x128/64x32/1/16 --reps 50 > $O/gemm_256_side$s.txt 2>&1; grep " mixed " $O/gemm_256_side$s.txt | grep -v weight | cut -c1-80 | sed "s/^/side $s /" | tee -a $O/verify.txt; done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  for b in new g128; do
    c=.gpu/convoy; [ $b = g128 ] && c=.gpu/convoy_g128
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
    bench $c resnet18_cifar 32 256 10 30 r18c_${b}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
