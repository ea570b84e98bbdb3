#!/bin/bash
# Session 29, call 5 (H200): workgroup memory as an occupancy step: finer STAGE_PAD sweep on the K-16 tiles (engine's own choice, --coop auto).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm_pad; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
g() { CONVOY_STAGE_PAD=$4 timeout 60 .gpu/gemm_pad "$1" --side $3 --store f16 --reps 40 --coop auto > $O/gemm_$2_$4.txt 2>&1; grep " mixed " $O/gemm_$2_$4.txt | cut -c1-200 | sed "s/$/ pad $4/" | tee -a $O/verify.txt; }
for pad in 0 256 512 768 1024 1536; do
  g "3x3 128 weight grad" w128 32 $pad
  g "3x3 64 forward" f64 32 $pad
  g "3x3 128 forward" f128 32 $pad
  g "3x3 256 weight grad" w256 32 $pad
  g "1x1 64>256 weight grad" w1x1 56 $pad
done
for pad in 0 256 512; do
  g "3x3 64 weight grad" w64 56 $pad
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
