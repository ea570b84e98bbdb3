#!/bin/bash
# Session 18, call 4: two accumulators a subgroup staged per round of the tensor-core
# epilogue (STAGE 2) where workgroup memory allows. Kernel tests (the coop pipelines logged
# for the translate fixture), convoy check in both precisions, single products against the
# same tiles at STAGE 1, model speeds beside PyTorch.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy kernels gemm && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify4.txt
CONVOY_PIPELINE_LOG=/tmp/plog CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst" | tee -a $O/verify4.txt
cat /tmp/plog/*.jsonl | grep conv2d_coop | sort -u > $O/coop_plog.jsonl
timeout 120 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify4.txt
timeout 120 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify4.txt
timeout 150 .gpu/gemm --coop auto,128x256/64x64/1/32/1,256x128/64x64/1/32/1,256x64/32x64/1/32/1,64x64/32x32/2/32/1,128x64/32x32/2/32/1 --reps 20 > $O/gemm_stage.txt 2>&1
for spec in "resnet18 224 256 mixed" "resnet50 224 128 mixed" "resnet18 224 256 float32"; do
  set -- $spec
  timeout 60 $C bench --model $1 --image-size $2 --batch-size $3 --classes 1000 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/convoy_${1}_${2}_$4.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_${2}_$4.json')); print('$1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify4.txt
done
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
