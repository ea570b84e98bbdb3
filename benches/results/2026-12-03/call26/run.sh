#!/bin/bash
# Session 47, call 5 (call26): call 25's split again with the epilogue's rounds themselves left
# out. gemm_exp2 (exp2.patch, not committed): CONVOY_EXP bits 1 no stores to C, 2 no K step past
# the first, 4 no epilogue rounds (behind a branch never taken, after a workgroupUniformLoad that
# every variant of this binary takes). The engine's own tiles, 200 ms of warm-up a variant.
source benches/device.sh
for f in "1x1 64>256" "1x1 256>64" "1x1 512>128" "3x3 64"; do
  for e in 0 1 3 4 7 0; do
    left=$(( 300 - $(elapsed) )); [ $left -gt 15 ] || break 2
    echo "EXP=$e" >> $O/gemm_exp.txt
    CONVOY_EXP=$e timeout $left .gpu/gemm_exp2 "$f" --batch 128 --store f16 --precision mixed --reps 30 --warm 200 >> $O/gemm_exp.txt 2>&1; echo "exp '$f' $e rc=$? $(elapsed) s" >> $O/verify.txt
  done
done
grep -c mixed $O/gemm_exp.txt | tee -a $O/verify.txt
finish
