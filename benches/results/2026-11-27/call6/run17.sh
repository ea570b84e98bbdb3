#!/bin/bash
# Session 17, call 6: the review mend (Winograd plans from flipped_geometry): GPU kernel
# tests and convoy check in both precisions.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify6.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked" | tee -a $O/verify6.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify6.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -1 | tee -a $O/verify6.txt
