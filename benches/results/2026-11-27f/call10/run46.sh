#!/bin/bash
# Session 22, call 10 (the gemm bench with --store f16: gradients stored f16 as a mixed model
# stores them): every product of the bench on the engine's own choices, as the models run them.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 200 .gpu/gemm --bench --store f16 --reps 30 > $O/gemm_f16.txt 2>&1
grep mixed $O/gemm_f16.txt | awk '{printf "%-30s %8s %8s\n", $1" "$2" "$3" "$4, $(NF-0>0?7:7), $8}' | head -0
grep " mixed " $O/gemm_f16.txt | cut -c1-80
