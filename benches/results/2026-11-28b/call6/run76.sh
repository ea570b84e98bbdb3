#!/bin/bash
# Session 26, call 6: 128 x 64 in place of 128 x 128 for small-grid forwards and input
# gradients (speculative): convoy check mixed; the side-32 forwards and input gradients on
# the new choice and on 128 x 128; resnet18_cifar / resnet18 / resnet50 mixed alternating
# mid (639ca58) and new.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base convoy_mid gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 100 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
bench() { timeout 30 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench .gpu/convoy_mid resnet18_cifar 32 256 10 30 r18c_warm
for r in 1 2; do
  for b in mid new; do
    c=.gpu/convoy; [ $b = mid ] && c=.gpu/convoy_mid
    bench $c resnet18_cifar 32 256 10 30 r18c_${b}_$r
  done
done
for b in mid new; do
  c=.gpu/convoy; [ $b = mid ] && c=.gpu/convoy_mid
  bench $c resnet18 224 256 1000 12 r18_${b}_1
  bench $c resnet50 224 128 1000 12 r50_${b}_1
done
timeout 60 .gpu/gemm "forward" --side 32 --store f16 --coop auto,128x128/64x32/1/16 --reps 30 > $O/gemm_forward.txt 2>&1; echo "gemm forward rc=$?" | tee -a $O/verify.txt
timeout 50 .gpu/gemm "input grad" --side 32 --store f16 --coop auto,128x128/64x32/1/16 --reps 30 > $O/gemm_input.txt 2>&1; echo "gemm input rc=$?" | tee -a $O/verify.txt
grep mixed $O/gemm_forward.txt $O/gemm_input.txt | cut -c1-110 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
