#!/bin/bash
# Session 31, call 9: the 1x1/2 256>512 input gradient's auto/forced difference of call 8 with the order reversed,
# twice, and with more repetitions.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp CONVOY_BENCH_DEVICES=0
cd .gpu && for f in gemm; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
g() { timeout 90 .gpu/gemm "1x1/2 256>512 input" --store f16 --reps $1 --coop $2 > $O/gemm_$3.txt 2>&1; grep " mixed \|rror" $O/gemm_$3.txt | cut -c1-75 | tee -a $O/verify.txt; }
g 20 256x128/64x64/1/32,auto,128x64/32x32/1/16 rev1
g 20 auto,256x128/64x64/1/32,128x64/32x32/1/16 fwd1
g 100 128x64/32x32/1/16,256x128/64x64/1/32,auto rev2
timeout 90 .gpu/gemm "3x3 64 forward" --store f16 --reps 20 --coop auto,256x64/32x64/1/16,auto > $O/gemm_f64.txt 2>&1; grep " mixed " $O/gemm_f64.txt | cut -c1-75 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
