#!/bin/bash
# Session 49, call 37: coopmat2 tiles swept one process each (a tile too large loses the device),
# 4096^3 f16 products with f32 accumulation, against WGSL's 216-223 TFLOP/s.
source benches/device.sh
p() { timeout 30 .gpu/coop2_probe --size 4096 --reps 10 "$@" 2>&1 | grep "^tile\|coop2_probe:" | tee -a $O/verify.txt; }
for t in 128x128x64 128x128x128 64x128x64 128x64x64 128x64x128 64x64x64 128x256x64 256x128x64 64x256x64 256x64x64; do p --invocations 128 --tile $t; done
for t in 128x128x64 128x128x128 128x256x64 256x128x64 128x256x128 256x128x128 256x256x64 64x256x64; do p --invocations 256 --tile $t; done
for t in 64x64x64 64x128x64 128x64x64 128x128x64; do p --invocations 64 --tile $t; done
echo "$(elapsed) s" | tee -a $O/verify.txt
finish
