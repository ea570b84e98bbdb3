#!/bin/bash
# Session 47, call 6 (call27): the tensor-core epilogue's barriers. gemm_exp3 / convoy_exp3
# (exp3.patch, not committed; call 26's bits plus 8: no subgroup barriers in the epilogue's
# rounds, wrong results, timing only; 16: workgroup barriers there instead). Single products
# with EXP 0 / 1 / 8 / 9 / 16, then resnet50 alternating 42270d3 (convoy) with convoy_exp3 at
# EXP 0 and 16 (the patch's workgroupUniformLoad is in both).
source benches/device.sh
for f in "1x1 64>256" "1x1 256>64" "1x1 512>128"; do
  for e in 0 1 8 9 16 0; do
    left=$(( 150 - $(elapsed) )); [ $left -gt 15 ] || break 2
    echo "EXP=$e" >> $O/gemm_exp.txt
    CONVOY_EXP=$e timeout $left .gpu/gemm_exp3 "$f" --batch 128 --store f16 --precision mixed --reps 30 --warm 200 >> $O/gemm_exp.txt 2>&1; echo "exp '$f' $e rc=$? $(elapsed) s" >> $O/verify.txt
  done
done
for r in 1 2; do
  bench convoy resnet50 224 128 1000 12 r50_$r
  CONVOY_EXP=0 bench convoy_exp3 resnet50 224 128 1000 12 r50_e0_$r
  CONVOY_EXP=16 bench convoy_exp3 resnet50 224 128 1000 12 r50_e16_$r
done
finish
