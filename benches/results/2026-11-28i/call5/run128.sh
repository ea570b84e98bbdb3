#!/bin/bash
# Session 34, call 5: a 1x1 downsample's phase products into 65-256 columns on 128 x 128 at K 16 (p) against 5144fcd (h2): the strided
# products at batch 128 and 256, the models alternating, the GPU kernel suite on p.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm_p matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
for b in 128 256; do
  timeout 60 .gpu/gemm_p "1x1/2" --batch $b --store f16 --reps 30 > $O/gemm_1x1s2_b$b.txt 2>&1
  grep " mixed " $O/gemm_1x1s2_b$b.txt | grep "input grad" | cut -c1-100 | sed "s/^/b$b /" | tee -a $O/verify.txt
  timeout 60 .gpu/gemm_p "1x1/2" --batch $b --store f16 --reps 30 --side 32 > $O/gemm_1x1s2_side32_b$b.txt 2>&1
  grep " mixed " $O/gemm_1x1s2_side32_b$b.txt | grep "input grad" | cut -c1-100 | sed "s/^/side32 b$b /" | tee -a $O/verify.txt
done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in h2 p; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
  done
done
CONVOY_TEST_DEVICE=0 timeout 220 .gpu/kernels_p > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
