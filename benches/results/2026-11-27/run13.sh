#!/bin/bash
# Session 17, call 2: f16 rounding without branches (gemm, kernels, convoy) against the
# branching one (gemm_a), both with NaN kept: narrow weight gradients and the other
# round_f16 products; GPU kernel tests and convoy check mixed on the branchless one.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz gemm.xz gemm_a.xz && chmod +x convoy kernels gemm gemm_a && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify2.txt
for i in 1 2; do
  timeout 60 .gpu/gemm_a "weight grad" --reps 30 > $O/gemm_branchy_$i.txt 2>&1
  timeout 60 .gpu/gemm "weight grad" --reps 30 > $O/gemm_branchless_$i.txt 2>&1
done
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst" | tee -a $O/verify2.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify2.txt
for spec in "resnet18 224 256" "resnet50 224 128"; do
  set -- $spec
  timeout 60 $C bench --model $1 --image-size $2 --batch-size $3 --classes 1000 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${1}_${2}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_${2}_mixed.json')); print('$1 $2 mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify2.txt
done
