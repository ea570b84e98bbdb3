#!/bin/bash
# Session 23, call 3: weight gradients on more tensor-core tiles and K splits (gemm bench with
# the 30 ms warm-up, --store f16).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
T=auto,64x64/32x32/1/32,64x64/32x32/2/16,128x64/64x32/1/16,128x64/32x32/1/16,64x64/32x64/1/16,64x64/64x32/1/16,128x64/64x64/1/16,128x128/64x32/1/16
timeout 250 .gpu/gemm "weight grad" --store f16 --reps 30 --coop $T > $O/gemm_wgrad_tiles.txt 2>&1
grep " mixed " $O/gemm_wgrad_tiles.txt | cut -c1-80 | tee -a $O/verify.txt
for c in "3x3 64 weight" "stem 7x7/2 padded weight" "3x3 128 weight"; do
  timeout 120 .gpu/gemm "$c" --store f16 --reps 30 --splits auto,32,64,228,456 --coop auto,64x64/32x32/1/16,128x64/64x32/1/16,128x128/64x32/1/16 >> $O/gemm_wgrad_splits.txt 2>&1
done
grep " mixed " $O/gemm_wgrad_splits.txt | cut -c1-80 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
