#!/bin/bash
# Session 49, call 41: the staged 3x3 convolutions on coopmat2 with two shared tiles (the next
# step's gather in flight during the product) against one, ResNet's shapes at batch 128.
source benches/device.sh
p() { timeout 30 .gpu/coop2_probe --reps 20 --stage "$@" 2>&1 | grep "tile\|coop2_probe:" | tee -a $O/verify.txt; }
for d in "" --double; do
p --conv 128,56,56,64,64 --invocations 128 --tile 128x64x32 $d
p --conv 128,56,56,64,64 --invocations 128 --tile 128x64x64 $d
p --conv 128,56,56,64,64 --invocations 256 --tile 128x64x32 $d
p --conv 128,56,56,64,64 --invocations 256 --tile 256x64x32 $d
p --conv 128,28,28,128,128 --invocations 256 --tile 128x128x32 $d
p --conv 128,28,28,128,128 --invocations 128 --tile 128x128x32 $d
p --conv 128,28,28,128,128 --invocations 256 --tile 256x128x32 $d
p --conv 128,14,14,256,256 --invocations 256 --tile 128x256x32 $d
p --conv 128,14,14,256,256 --invocations 128 --tile 128x128x32 $d
p --conv 128,7,7,512,512 --invocations 128 --tile 64x128x32 $d
p --conv 128,7,7,512,512 --invocations 256 --tile 128x256x32 $d
done
echo "probe done $(elapsed) s" | tee -a $O/verify.txt
finish
