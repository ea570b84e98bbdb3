#!/bin/bash
# Session 31, call 8: tensor-core tiles swept on ResNet's strided input gradients (1x1/2 downsample, 3x3/2) and
# the stem's forward and weight gradient, batch 256 at 224 px (gemm bench of ab4760f: the tiles are unchanged since).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp CONVOY_BENCH_DEVICES=0
cd .gpu && for f in gemm; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
T=auto,128x64/32x32/1/16,256x64/32x64/1/16,128x128/64x32/1/16,256x128/64x64/1/32,128x256/64x64/1/32,128x256/64x64/1/16,64x64/32x32/1/16
g() { timeout 90 .gpu/gemm "$1" --store f16 --reps 20 --coop $T > $O/gemm_$2.txt 2>&1; grep " mixed \|rror" $O/gemm_$2.txt | cut -c1-200 | tee -a $O/verify.txt; }
g "1x1/2 256>512 input" down_input
g "3x3/2 128>256 input" s2_128_input
g "3x3/2 256>512 input" s2_256_input
g "stem 7x7/2 padded" stem
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
