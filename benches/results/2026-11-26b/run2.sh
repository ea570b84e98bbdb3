#!/bin/bash
# Session 15, call 2: the review mend (Winograd's QuadTile, BatchNorm's Plan helpers) on the GPU.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked" | tee $O/verify2.txt
timeout 200 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify2.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify2.txt
