#!/bin/bash
# Session 22, call 11: the weight gradients (gemm bench, --store f16) on forced tensor-core
# tiles beside the engine's own choice.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 250 .gpu/gemm "weight grad" --store f16 --reps 30 --coop auto,128x128/64x32/1/16,128x128/64x64/1/32,64x64/32x32/1/16,256x64/32x64/1/16,128x256/64x64/1/32,256x128/64x64/1/32 > $O/gemm_wgrad_tiles.txt 2>&1
grep " mixed " $O/gemm_wgrad_tiles.txt | cut -c1-90
