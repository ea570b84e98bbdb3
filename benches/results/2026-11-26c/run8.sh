#!/bin/bash
# Session 16, call 2: the widest tensor-core tile (128 x 256, 4 x 4 accumulators a subgroup):
# single products, kernel tests, convoy check in both precisions, model speeds, profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz gemm.xz && chmod +x convoy kernels gemm && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/verify1.txt
timeout 100 .gpu/gemm 2>&1 > $O/gemm2.txt
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst" | tee -a $O/verify1.txt
timeout 200 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify1.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify1.txt
for spec in "resnet18 224 256 mixed" "resnet18 224 256 float32" "resnet20 32 256 mixed" "resnet50 224 128 mixed"; do
  set -- $spec
  timeout 120 $C bench --model $1 --image-size $2 --batch-size $3 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify1.txt
done
timeout 120 $C bench --model resnet18 --image-size 224 --batch-size 256 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
