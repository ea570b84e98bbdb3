#!/bin/bash
# Session 17, call 1: the flipped-kernel input gradient and f32 narrow weight gradients in
# mixed precision. Kernel tests (pipeline log for the translate fixture), convoy check
# mixed, single products with the flip forced on and off, model speeds beside PyTorch.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz gemm.xz && chmod +x convoy kernels gemm && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst" | tee -a $O/verify.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify.txt
timeout 100 .gpu/gemm --flip on,off --reps 30 > $O/gemm_flip.txt 2>&1
for spec in "resnet18 224 256" "resnet50 224 128"; do
  set -- $spec
  timeout 60 $C bench --model $1 --image-size $2 --batch-size $3 --classes 1000 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${1}_${2}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_${2}_mixed.json')); print('$1 $2 mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
