#!/bin/bash
# Session 34, call 4 (5144fcd): coop tile sweeps of the strided convolutions' products at ResNet-50's bench batch (the input gradients are
# phase products); the reductions' column tile at 128 columns (t7) against 64, on the models alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm_b matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
T=auto,128x64/32x32/1/16,256x128/64x64/1/32,128x128/64x32/1/16,128x128/64x64/1/32,128x256/64x64/1/32,128x256/64x64/1/16
timeout 240 .gpu/gemm_b "/2 " --batch 128 --store f16 --reps 30 --coop $T > $O/gemm_s2_b128.txt 2>&1
grep " mixed " $O/gemm_s2_b128.txt | grep "input grad" | cut -c1-100 | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in h2 t7; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
