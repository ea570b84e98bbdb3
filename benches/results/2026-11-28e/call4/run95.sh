#!/bin/bash
# Session 29, call 4 (H200): is two buffers' loss workgroup memory? The same tile with unused workgroup memory added (STAGE_PAD floats), one and two buffers.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm_pad; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
g() { CONVOY_STAGE_PAD=$5 timeout 60 .gpu/gemm_pad "$1" --side $4 --store f16 --reps 30 --coop $2 > $O/gemm_$3_$5.txt 2>&1; grep " mixed " $O/gemm_$3_$5.txt | cut -c1-90 | sed "s/$/ pad $5/" | tee -a $O/verify.txt; }
for pad in 0 1024 2048 3072 4096 5120 7000; do
  g "3x3 128 forward" 128x128/64x32/1/16 f128 32 $pad
  g "3x3 128 weight grad" 128x128/64x32/1/16 w128 32 $pad
done
for pad in 0 1024 2048; do
  g "3x3 128 weight grad" 128x128/64x32/2/16 w128b2 32 $pad
  g "3x3 64 weight grad" 64x64/32x32/1/16 w64 56 $pad
done
g "3x3 64 weight grad" 64x64/32x32/2/16 w64b2 56 0
g "3x3 256 forward" 128x256/64x64/1/32 f256 32 0
g "3x3 256 forward" 128x256/64x64/1/32 f256 32 2048
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
