#!/bin/bash
# Session 18, call 6: every product of the gemm bench with the engine's K split and unsplit
# (the forward and input-gradient products of 7 px split K in two, with a reduce after).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gemm_splits.txt
timeout 150 .gpu/gemm --splits auto,1 --reps 30 >> $O/gemm_splits.txt 2>&1
grep -E "512|2048|1024" $O/gemm_splits.txt | grep mixed | cut -c1-120
