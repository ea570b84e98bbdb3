#!/bin/bash
# Session 16, call 1: single-product throughput (benches/gemm.rs) with K splits swept.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $O/gemm1.txt
timeout 60 .gpu/gemm --probe 2>&1 | tee -a $O/probe1.txt
