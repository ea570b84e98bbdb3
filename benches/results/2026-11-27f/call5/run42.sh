#!/bin/bash
# Session 22, call 5 (binaries of 9835703: tensor cores for every mixed product over 8
# columns): GPU kernel tests, convoy check both precisions; convoy_exp (exp_split.patch:
# CONVOY_EXP_TILES as call 3, CONVOY_EXP_TW / _BW / _BK: the split rule's target workgroups,
# balance waves, K per balanced split) on resnet18 and resnet50, alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy* kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 > $O/check_float32.txt 2>&1; tail -1 $O/check_float32.txt | tee -a $O/verify.txt
r() { # tag model image batch
  local t=$1 m=$2
  timeout 60 .gpu/convoy_exp bench --model $m --devices 0 --no-scaling --precision mixed --json --image-size $3 --batch-size $4 --classes 1000 --steps 20 2>/dev/null | tail -1 > $O/exp_${m}_$t.json
  python3 -c "import json; j=json.load(open('$O/exp_${m}_$t.json')); print('$m $t', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
}
for spec in "resnet18 224 256" "resnet50 224 128"; do
  set -- $spec
  for rep in 1 2; do
    r base_$rep $1 $2 $3
    CONVOY_EXP_TILES=0=16x2,5=16x2 r tall2buf_$rep $1 $2 $3
    CONVOY_EXP_TILES=4=16x1 r wgrad1buf_$rep $1 $2 $3
    CONVOY_EXP_TW=512 r tw512_$rep $1 $2 $3
    CONVOY_EXP_BW=2 r bw2_$rep $1 $2 $3
    CONVOY_EXP_BW=8 r bw8_$rep $1 $2 $3
    CONVOY_EXP_BK=4096 r bk4096_$rep $1 $2 $3
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
