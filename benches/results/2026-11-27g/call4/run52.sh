#!/bin/bash
# Session 23, call 4: the epilogue staging 1, 2 or 4 accumulator blocks a subgroup a round
# (CONVOY_EXP_STAGE caps it; default 4 where workgroup memory allows): GPU kernel tests and
# convoy check at the default, products and models at each cap alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz gemm.xz && chmod +x convoy kernels gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for s in 1 4; do
  CONVOY_EXP_STAGE=$s timeout 100 .gpu/gemm forward --store f16 --reps 30 > $O/gemm_forward_stage$s.txt 2>&1
done
paste <(grep " mixed " $O/gemm_forward_stage1.txt | cut -c1-70) <(grep " mixed " $O/gemm_forward_stage4.txt | cut -c48-70) | tee -a $O/verify.txt
r() { # stage model image batch classes
  CONVOY_EXP_STAGE=$1 timeout 50 .gpu/convoy bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/stage$1_${2}.json
  python3 -c "import json; j=json.load(open('$O/stage$1_${2}.json')); print('stage $1 $2', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
}
for spec in "resnet18 224 256 1000" "resnet50 224 128 1000"; do
  for s in 1 2 4 1 2 4; do r $s $spec; done
done
for s in 1 4; do r $s mobilenet_v2 224 128 1000; r $s resnet20 32 256 10; done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
