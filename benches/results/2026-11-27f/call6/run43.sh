#!/bin/bash
# Session 22, call 6 (binaries of a72c39d: the session's tiles and tensor-core
# narrow products): GPU kernel tests, convoy check (both precisions, two replicas), the
# accuracy criterion (built-in task, image folder 3 seeds both precisions).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 120 $C check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 120 $C check --devices 0 --model all --batch-size 24 > $O/check_float32.txt 2>&1; tail -1 $O/check_float32.txt | tee -a $O/verify.txt
timeout 120 $C check --devices 0,0 --model resnet18 --batch-size 24 --precision mixed > $O/check_two_replicas.txt 2>&1; tail -1 $O/check_two_replicas.txt | tee -a $O/verify.txt
for p in float32 mixed; do
  timeout 60 $C train --model resnet20 --precision $p --devices 0 --epochs 2 --json 2>/dev/null | tail -1 > $O/builtin_$p.json
  python3 -c "import json; j=json.load(open('$O/builtin_$p.json')); print('builtin $p', j['val_accuracy'], j.get('loss_scale'), j.get('skipped_steps'))" | tee -a $O/verify.txt
done
OUT=$O SEEDS="1 2 3" timeout 220 bash benches/mixed_accuracy.sh 2>&1 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
