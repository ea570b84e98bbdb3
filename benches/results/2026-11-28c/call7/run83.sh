#!/bin/bash
# Why the 128 x 128 weight gradients slowed: v0 (the loop advance, on a6f18a4), HEAD a6f18a4, v2 (packed step); and tiles for them.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm gemm_v0 gemm_v2; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for v in gemm_v0 gemm gemm_v2 gemm_v0 gemm; do for c in "3x3 128 weight grad" "3x3/2 64>128 weight grad" "3x3 64 weight grad"; do timeout 30 .gpu/$v "$c" --side 32 --store f16 --reps 40 2>&1 | grep mixed | sed "s|^|$v |" | cut -c1-90 | tee -a $O/variants.txt; done; done
T=auto,64x64/32x32/1/16,128x256/64x64/1/16,256x128/64x64/1/16,128x64/32x32/1/16,128x128/64x32/1/32
for c in "3x3 128 weight grad" "3x3/2 64>128 weight grad"; do timeout 40 .gpu/gemm "$c" --side 32 --store f16 --coop $T --reps 40 2>&1 | grep mixed | cut -c1-90 | tee -a $O/tiles.txt; done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
