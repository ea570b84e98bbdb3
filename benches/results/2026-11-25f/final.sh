#!/bin/bash
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C=.gpu/convoy
(cd .gpu && CONVOY_TEST_DEVICE=0 timeout 240 ./kernels 2>&1 | grep -E "^test result|FAILED|panicked" | head)
timeout 200 $C check --devices 0 --model all --batch-size 24 --json > $OUT/check_all.json 2>$OUT/check_all.err; echo "check all rc=$?"; tail -1 $OUT/check_all.err
timeout 100 $C check --devices 0,0 --model resnet18_cifar --batch-size 34 2>&1 | tail -1
mkdir -p $OUT/b; OUT=$OUT/b bash benches/imagenet_bench.sh 2>&1 | grep -v "^$" | tail -8
OUT=$OUT/b bash benches/gpu_bench.sh 2>&1 | grep -E "images/s|one GPU|fp32|tf32|bf16|resnet|convnet" | head -30
