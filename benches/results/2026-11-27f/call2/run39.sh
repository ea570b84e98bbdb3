#!/bin/bash
# Session 22, call 2 (optional): the weight gradients' 64 x 64 tensor-core tile staging K 16
# instead of 32 (convoy_exp = 38a2ee9 + .gpu/exp_wgrad16.patch) against 38a2ee9 (convoy),
# alternating in one call; convoy check on it first. Apply the patch only if it wins.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz convoy_exp.xz && chmod +x convoy convoy_exp && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 120 .gpu/convoy_exp check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify.txt
for spec in "resnet18 224 256 mixed 1000" "resnet50 224 128 mixed 1000"; do
  set -- $spec
  for b in convoy convoy_exp convoy convoy_exp; do
    timeout 60 .gpu/$b bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/${b}_${1}_$4.json
    python3 -c "import json; j=json.load(open('$O/${b}_${1}_$4.json')); print('$b $1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
