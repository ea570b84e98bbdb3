#!/bin/bash
# Session 14, call 3: the wide tensor-core tile verified (kernel tests, convoy check in both
# precisions) and measured beside PyTorch; the NVIDIA GL message.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/verify.txt
$C --backend gl devices 2>&1 | tee -a $O/verify.txt
$C --backend gl bench --model mlp --steps 2 --no-scaling 2>&1 | tail -1 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked" | tee -a $O/verify.txt
timeout 200 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -12 | tee -a $O/verify.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -12 | tee -a $O/verify.txt
