#!/bin/bash
# Session 14, call 6: the merged tree (the CPU GEMM kernel's refactor of the engine, the wide
# tensor-core tile, portable limits) verified and timed on the H100.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked" | tee $O/verify6.txt
timeout 200 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify6.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify6.txt
timeout 100 $C check --devices 0,0 --model resnet20 --batch-size 34 --optimizer adamw 2>&1 | tail -1 | tee -a $O/verify6.txt
for spec in "resnet50 224 128 mixed" "resnet18 224 256 mixed" "resnet18 224 256 float32" "mlp 32 256 float32" "resnet20 32 256 float32"; do
  set -- $spec
  timeout 120 $C bench --model $1 --image-size $2 --batch-size $3 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify6.txt
done
