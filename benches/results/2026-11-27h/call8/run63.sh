#!/bin/bash
# Session 24, call 8: weight gradients into fewer than 64 columns keep A staged as two words
# (CONV2D_COOP_WORDS): GPU kernel tests, convoy check mixed, MobileNetV2 and resnet50 mixed.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz kernels.xz; do unxz -f $f; done && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 120 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 60 $C check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for spec in "mobilenet_v2 224 128 mixed 1000" "resnet50 224 128 mixed 1000" "resnet18 224 256 mixed 1000"; do
  set -- $spec
  timeout 40 $C bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/convoy_${1}_$4.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_$4.json')); print('$1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
