#!/bin/bash
# Session 28, call 7: the tensor-core epilogue alternates two staging halves, one barrier a round (base 653c901); validation and A/B.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base kernels; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 120 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
bench() { timeout 30 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base new; do
    c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 10 r50_${b}_$r
    [ $r = 1 ] && bench $c resnet18 224 256 1000 10 r18_${b}_$r
    [ $r = 1 ] && bench $c resnet18_cifar 32 256 10 30 r18c_${b}_$r
  done
done
timeout 100 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
