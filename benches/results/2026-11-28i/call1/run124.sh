#!/bin/bash
# Session 34, call 1: the inside patch (A_INSIDE/B_INSIDE) against 54895f2's code on single products and the models, alternating; inw lifts
# B_INSIDE's restriction to forward-type products (weight grads with row-major B too); the GPU kernel suite on the patch.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm_f3 matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
for g in gemm_f3 gemm_in gemm_inw; do
  timeout 60 .gpu/$g matmul --reps 50 --coop auto,128x128/64x64/1/32 > $O/${g}_matmul.txt 2>&1
  grep " mixed " $O/${g}_matmul.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
  timeout 100 .gpu/$g "1x1" --store f16 --reps 50 --coop auto,128x128/64x64/1/32 > $O/${g}_1x1.txt 2>&1
  grep " mixed " $O/${g}_1x1.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
done
for g in gemm_f3 gemm_in; do
  timeout 100 .gpu/$g "3x3" --store f16 --reps 30 > $O/${g}_3x3.txt 2>&1
  grep " mixed " $O/${g}_3x3.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in final in inw; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
