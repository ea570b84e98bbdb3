#!/bin/bash
# Session 29, call 7 (H200): the 128 x 128 K-16 tile padded to 24 KB (STAGE_PAD, built in) validated; the 64 x 64 tile's operand buffers sized to their layout (CONVOY_EXACT=1, 10 -> 8.5 KB) against the larger of both layouts.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy kernels gemm; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_EXACT=1 CONVOY_TEST_DEVICE=0 timeout 170 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels (exact) rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 170 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
g() { timeout 60 .gpu/gemm "$1" --side 56 --store f16 --reps 30 --coop auto > $O/gemm_$2_$3.txt 2>&1; grep " mixed " $O/gemm_$2_$3.txt | cut -c1-90 | sed "s/$/ $3/" | tee -a $O/verify.txt; }
for r in 1 2; do
  unset CONVOY_EXACT; g "3x3 64 weight grad" w64 max; g "1x1 64>256 weight grad" w1 max; g "1x1 256>64 weight grad" w2 max
  export CONVOY_EXACT=1; g "3x3 64 weight grad" w64 exact; g "1x1 64>256 weight grad" w1 exact; g "1x1 256>64 weight grad" w2 exact
done
bench() { timeout 40 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  unset CONVOY_EXACT; bench resnet50 224 128 1000 12 r50_max_$r; bench resnet18 224 256 1000 12 r18_max_$r
  export CONVOY_EXACT=1; bench resnet50 224 128 1000 12 r50_exact_$r; bench resnet18 224 256 1000 12 r18_exact_$r
done
unset CONVOY_EXACT; bench resnet18_cifar 32 256 10 40 r18c_pad
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
