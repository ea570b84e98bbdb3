#!/bin/bash
# Session 47, call 3 (call24): 42270d3 (the 3x3 gathers into 64 columns on 128 x 64 at 64 x 32):
# its tensor-core tests (coop::, pipeline log), resnet50 / resnet18 @224 alternating with f0575f4
# (convoy_old); then the short-K 1x1 products (K 64 and 128, stage 1-2) on deeper K steps, by a
# gemm bench that also takes K 64 a step (gemm_x: bk64.patch, not committed), each tile its own
# run (a tile the kernel refuses fails alone), 200 ms of warm-up a variant.
source benches/device.sh
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop:: > $O/kernels_coop.txt 2>&1; echo "kernels coop rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep "^test \|test result\|panicked" $O/kernels_coop.txt | cut -c1-300 | head -12 | tee -a $O/verify.txt
for r in 1 2; do
  bench convoy_old resnet50 224 128 1000 12 r50_old_$r; bench convoy resnet50 224 128 1000 12 r50_$r
  bench convoy_old resnet18 224 256 1000 12 r18_old_$r; bench convoy resnet18 224 256 1000 12 r18_$r
done
for f in "1x1 64>256" "1x1 256>64" "1x1 128>512" "1x1 512>128"; do
  for t in auto 128x128/64x32/1/32 128x128/64x32/1/64 128x128/64x32/2/16 128x128/64x32/2/32 256x64/32x64/1/32 128x64/32x32/1/64 128x64/64x32/1/16; do
    left=$(( 520 - $(elapsed) )); [ $left -gt 15 ] || break 2
    timeout $left .gpu/gemm_x "$f" --batch 128 --store f16 --precision mixed --coop $t --reps 30 --warm 200 >> $O/gemm_sweep.txt 2>&1; echo "sweep '$f' $t rc=$? $(elapsed) s" >> $O/verify.txt
  done
done
grep -c mixed $O/gemm_sweep.txt | tee -a $O/verify.txt
finish
