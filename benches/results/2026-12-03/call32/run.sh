#!/bin/bash
# Session 48, call 4 (call32): call 31's two-steps-ahead loop with each register set named by a
# literal at every call (depth2.patch; call 31's private index put the slots in memory: every
# variant 16-50% slower): single products, then resnet18 @224 / resnet50 alternating HEAD,
# unset (one set, the restructured loop), small, all.
source benches/device.sh
for d in unset small all; do
  for f in "3x3 64 weight grad" "3x3 64 forward"; do
    env $( [ $d != unset ] && echo CONVOY_COOP_DEPTH=$d ) timeout 40 .gpu/gemm_d "$f" --batch 256 --side 56 --store f16 --precision mixed --coop auto --reps 30 --warm 100 >> $O/gemm_$d.txt 2>&1
  done; echo "gemm $d $(elapsed) s" | tee -a $O/verify.txt; grep mixed $O/gemm_$d.txt | cut -c1-120 | tee -a $O/verify.txt
done
for r in 1 2; do
  bench convoy resnet18 224 256 1000 12 r18_$r; bench convoy_d resnet18 224 256 1000 12 r18_unset_$r
  CONVOY_COOP_DEPTH=small bench convoy_d resnet18 224 256 1000 12 r18_small_$r; CONVOY_COOP_DEPTH=all bench convoy_d resnet18 224 256 1000 12 r18_all_$r
done
bench convoy resnet50 224 128 1000 12 r50_1; bench convoy_d resnet50 224 128 1000 12 r50_unset_1
CONVOY_COOP_DEPTH=small bench convoy_d resnet50 224 128 1000 12 r50_small_1; CONVOY_COOP_DEPTH=all bench convoy_d resnet50 224 128 1000 12 r50_all_1
finish
