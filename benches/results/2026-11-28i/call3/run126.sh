#!/bin/bash
# Session 34, call 3: the packed max-pool kernels taking up to four quads of a pixel an invocation, and the 1x1 whole-column tiles, against
# f1e9dc3 (base1): the GPU kernel suite, models alternating, ResNet-50's 1x1 products at batch 128 on the new choices, a resnet18 profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm_new matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 220 .gpu/kernels_new > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
timeout 60 .gpu/gemm_new "1x1 " --batch 128 --store f16 --reps 50 > $O/gemm_1x1_b128.txt 2>&1
grep " mixed " $O/gemm_1x1_b128.txt | cut -c1-100 | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in base1 new; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
  done
done
timeout 60 .gpu/convoy_new bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 8 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18.txt 2>&1
grep "pool" $O/profile_resnet18.txt | head -4 | cut -c1-110 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
