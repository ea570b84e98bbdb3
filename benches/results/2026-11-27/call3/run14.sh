#!/bin/bash
# Session 17, call 3: the f32 kernel's f16 rounding as a flag bit at run time (its mixed
# products share the f32 pipelines): GPU kernel tests, convoy check in both precisions,
# resnet18 in both precisions (float32 must not move: session 16 had 3,575-3,600 images/s).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify3.txt
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked" | tee -a $O/verify3.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify3.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify3.txt
for prec in float32 mixed; do
  timeout 60 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 20 --no-scaling --precision $prec --json 2>/dev/null | tail -1 > $O/convoy_resnet18_224_$prec.json
  python3 -c "import json; j=json.load(open('$O/convoy_resnet18_224_$prec.json')); print('resnet18 224 $prec', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify3.txt
done
