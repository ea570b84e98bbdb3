#!/bin/bash
# Session 49, call 38: coopmat2 on ResNet-50's 1x1 products at batch 128 (forward: A rows of
# pixels, B the weights; data gradient: B read transposed; weight gradient: A read transposed,
# K split), a step ahead or not, beside the engine's own kernels on the same products.
source benches/device.sh
p() { timeout 30 .gpu/coop2_probe --reps 20 "$@" 2>&1 | grep "tile\|coop2_probe:" | tee -a $O/verify.txt; }
p --size 4096 --invocations 256 --tile 128x256x64 --prefetch
p --size 4096 --invocations 128 --tile 128x128x64 --prefetch
p --size 8192 --invocations 256 --tile 128x256x64
for pf in "" --prefetch; do
for mnk in 401408x256x64 401408x64x256 100352x512x128 100352x128x512 25088x1024x256 25088x256x1024 6272x2048x512 6272x512x2048; do
  n=$(echo $mnk | cut -dx -f2)
  if [ $n -ge 256 ]; then p --mnk $mnk --invocations 256 --tile 128x256x64 $pf; fi
  p --mnk $mnk --invocations 128 --tile 128x128x64 $pf
  p --mnk $mnk --invocations 128 --tile 128x64x64 $pf
done
done
for mnk in 401408x64x256 401408x256x64 100352x128x512 25088x256x1024; do
  p --mnk $mnk --invocations 128 --tile 128x128x64 --b-col
  p --mnk $mnk --invocations 256 --tile 128x256x64 --b-col
done
p --mnk 64x256x401408 --invocations 128 --tile 64x128x64 --a-col --split 64
p --mnk 256x64x401408 --invocations 128 --tile 128x64x64 --a-col --split 64
p --mnk 128x512x100352 --invocations 128 --tile 128x128x64 --a-col --split 28
p --mnk 256x1024x25088 --invocations 128 --tile 128x128x64 --a-col --split 7
echo "probe done $(elapsed) s" | tee -a $O/verify.txt
timeout 150 .gpu/gemm "1x1" --batch 128 --store f16 --precision mixed --coop auto --splits auto --reps 20 > $O/gemm.txt 2>&1; echo "gemm rc=$? $(elapsed) s" | tee -a $O/verify.txt
grep mixed $O/gemm.txt | cut -c1-120 | tee -a $O/verify.txt
finish
