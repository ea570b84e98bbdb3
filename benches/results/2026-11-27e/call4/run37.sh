#!/bin/bash
# Session 21, call 4: the tall tensor-core tile at K 16 (and taken for K <= 128 products over
# 64 columns), branch exp-k16, against 59d25a4 in the same call: the coop kernel tests and
# convoy check on it, then model speeds alternating the two binaries.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy convoy_exp kernels_exp && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 100 .gpu/kernels_exp coop 2>&1 | grep -E "test result|FAILED|panicked|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 100 .gpu/convoy_exp check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify.txt
for spec in "resnet18 224 256 mixed 1000" "resnet50 224 128 mixed 1000" "mobilenet_v2 224 128 mixed 1000"; do
  set -- $spec
  for b in convoy convoy_exp convoy convoy_exp; do
    timeout 60 .gpu/$b bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/${b}_${1}_$4.json
    python3 -c "import json; j=json.load(open('$O/${b}_${1}_$4.json')); print('$b $1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
  done
done
timeout 40 .gpu/convoy_exp bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_exp_resnet50_mixed.txt 2>&1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
