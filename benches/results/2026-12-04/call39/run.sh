#!/bin/bash
# Session 49, call 39: coopmat2 with tensor addressing: plain products with A through a tensor
# layout, then 3x3 convolutions gathered through clamped 4-D layouts (ResNet's shapes, batch
# 128 and ResNet-18's 256), beside the engine's own 3x3 kernels on the same shapes.
source benches/device.sh
p() { timeout 30 .gpu/coop2_probe --reps 20 "$@" 2>&1 | grep "tile\|coop2_probe:" | tee -a $O/verify.txt; }
p --size 4096 --invocations 256 --tile 128x256x64 --tensor
p --size 4096 --invocations 128 --tile 128x128x64 --tensor
p --mnk 25088x1024x256 --invocations 128 --tile 128x128x64 --tensor
p --mnk 100352x128x512 --invocations 128 --tile 128x128x64 --tensor
for c in 128,56,56,64,64 256,56,56,64,64; do
  p --conv $c --invocations 128 --tile 128x64x64 --patch 8x16
  p --conv $c --invocations 128 --tile 128x64x32 --patch 8x16
  p --conv $c --invocations 256 --tile 224x64x64 --patch 8x28
  p --conv $c --invocations 256 --tile 256x64x64 --patch 16x16
done
p --conv 128,28,28,128,128 --invocations 128 --tile 128x128x64 --patch 8x16
p --conv 128,28,28,128,128 --invocations 256 --tile 224x128x64 --patch 8x28
p --conv 128,28,28,128,128 --invocations 256 --tile 128x128x64 --patch 4x32
p --conv 128,14,14,256,256 --invocations 128 --tile 128x128x64 --patch 8x16
p --conv 128,14,14,256,256 --invocations 256 --tile 224x128x64 --patch 16x14
p --conv 128,14,14,256,256 --invocations 256 --tile 128x256x64 --patch 8x16
p --conv 128,7,7,512,512 --invocations 128 --tile 64x128x64 --patch 8x8
p --conv 128,7,7,512,512 --invocations 256 --tile 64x256x64 --patch 8x8
echo "probe done $(elapsed) s" | tee -a $O/verify.txt
timeout 150 .gpu/gemm "3x3 " --batch 128 --store f16 --precision mixed --coop auto --splits auto --reps 20 > $O/gemm.txt 2>&1; echo "gemm rc=$? $(elapsed) s" | tee -a $O/verify.txt
grep mixed $O/gemm.txt | grep forward | cut -c1-120 | tee -a $O/verify.txt
timeout 60 .gpu/gemm "3x3 64" --batch 256 --store f16 --precision mixed --coop auto --splits auto --reps 20 > $O/gemm256.txt 2>&1; grep mixed $O/gemm256.txt | grep forward | cut -c1-120 | tee -a $O/verify.txt
finish
