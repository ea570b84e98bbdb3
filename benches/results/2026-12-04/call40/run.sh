#!/bin/bash
# Session 49, call 40: 3x3 convolutions on coopmat2 with A gathered into shared memory by the
# workgroup (one stage, barriers around it), B and C through pointers; ResNet's shapes.
source benches/device.sh
p() { timeout 30 .gpu/coop2_probe --reps 20 --stage "$@" 2>&1 | grep "tile\|coop2_probe:" | tee -a $O/verify.txt; }
for c in 128,56,56,64,64 256,56,56,64,64; do
  p --conv $c --invocations 128 --tile 128x64x64
  p --conv $c --invocations 128 --tile 128x64x32
  p --conv $c --invocations 256 --tile 256x64x64
  p --conv $c --invocations 256 --tile 128x64x64
done
p --conv 128,28,28,128,128 --invocations 128 --tile 128x128x64
p --conv 128,28,28,128,128 --invocations 256 --tile 128x128x64
p --conv 128,28,28,128,128 --invocations 256 --tile 256x128x64
p --conv 128,28,28,128,128 --invocations 256 --tile 128x128x32
p --conv 128,14,14,256,256 --invocations 256 --tile 128x256x64
p --conv 128,14,14,256,256 --invocations 128 --tile 128x128x64
p --conv 128,14,14,256,256 --invocations 256 --tile 128x128x64
p --conv 128,7,7,512,512 --invocations 256 --tile 128x256x64
p --conv 128,7,7,512,512 --invocations 128 --tile 64x128x64
p --conv 128,7,7,512,512 --invocations 128 --tile 128x128x64
echo "probe done $(elapsed) s" | tee -a $O/verify.txt
finish
