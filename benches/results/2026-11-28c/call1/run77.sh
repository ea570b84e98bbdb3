#!/bin/bash
# Experiment: what removing dispatches would save (CONVOY_EXP drops them; numerics wrong, timing valid).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy_exp.xz && chmod +x convoy_exp && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
bench() { CONVOY_EXP=$1 timeout 40 .gpu/convoy_exp bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$2.json; python3 -c "import json; j=json.load(open('$O/$2.json')); print('$2', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench none warm
for r in 1 2 3; do
  for v in none nomerge noflip noreduce nomerge,noflip,noreduce; do bench $v ${v//,/_}_$r; done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
