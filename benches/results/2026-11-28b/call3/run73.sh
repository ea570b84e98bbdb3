#!/bin/bash
# Session 26, call 3: validate 128 x 64 for small phase batches: GPU kernel tests, convoy
# check mixed; the stride-2 input gradients at side 56 on several tiles; resnet18_cifar /
# resnet18 / resnet50 mixed alternating base (8a29f60), mid (f8dc2a8, batched phases) and
# new; a resnet18_cifar profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base convoy_mid kernels gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 170 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
T=auto,128x64/32x32/1/16,128x128/64x32/1/16,256x64/32x64/1/16,256x128/64x64/1/32
for r in 1 2; do timeout 100 .gpu/gemm "3x3/2" --side 56 --store f16 --coop $T --reps 30 > $O/gemm56_$r.txt 2>&1; echo "gemm56 $r rc=$?" | tee -a $O/verify.txt; done
grep "mixed.*input grad\|input grad.*mixed" $O/gemm56_2.txt | cut -c1-100 | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base mid new; do
    c=.gpu/convoy; [ $b != new ] && c=.gpu/convoy_$b
    bench $c resnet18_cifar 32 256 10 30 r18c_${b}_$r
    bench $c resnet18 224 256 1000 12 r18_${b}_$r
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
  done
done
timeout 40 .gpu/convoy bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 20 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_cifar.txt 2>&1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
