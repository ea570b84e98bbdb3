#!/bin/bash
# Session 18, call 1: forced tensor-core tiles (GemmOptions::coop_tile): their GPU kernel
# tests, then every product of the gemm bench on each candidate tile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy kernels gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify1.txt
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop 2>&1 | grep -E "test |test result|FAILED|panicked|element" | head -30 | tee -a $O/verify1.txt
T=auto,128x64/64x32/2/32,128x64/64x64/2/16,256x64/64x64/1/16,256x64/64x64/2/16,256x64/64x32/1/32,64x64/32x32/2/32,64x64/64x64/2/16,128x128/64x64/2/32,256x128/64x64/1/32,128x256/64x64/1/32
timeout 300 .gpu/gemm --coop $T --reps 20 > $O/gemm_tiles.txt 2>&1
tail -3 $O/gemm_tiles.txt
