#!/bin/bash
# Session 48, call 3 (call31): the K loop two steps ahead (depth.patch, *_d binaries, not
# committed: CONVOY_COOP_DEPTH=small on tiles of <= 128 invocations, =all on every tile; unset
# = HEAD's loop, the same shader with one set): the tensor-core tests at =all (every forced
# tile), single products (3x3 64 weight gradient at 56 px, batch 256: resnet18's worst), then
# resnet18 @224 / resnet50 alternating HEAD, unset, small, all.
source benches/device.sh
CONVOY_COOP_DEPTH=all CONVOY_PIPELINE_LOG=$O/plog_all CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels_d coop:: > $O/coop_all.txt 2>&1; echo "coop depth all rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep "test result\|panicked" $O/coop_all.txt | cut -c1-300 | head -6 | tee -a $O/verify.txt
for d in unset small all; do
  for f in "3x3 64 weight grad" "3x3 64 forward" "3x3 256 weight grad" "1x1 64>256"; do
    env $( [ $d != unset ] && echo CONVOY_COOP_DEPTH=$d ) timeout 40 .gpu/gemm_d "$f" --batch 256 --side 56 --store f16 --precision mixed --coop auto --reps 30 --warm 100 >> $O/gemm_$d.txt 2>&1
  done; echo "gemm $d $(elapsed) s" | tee -a $O/verify.txt; grep mixed $O/gemm_$d.txt | cut -c1-120 | tee -a $O/verify.txt
done
for r in 1 2; do
  bench convoy resnet18 224 256 1000 12 r18_$r; bench convoy_d resnet18 224 256 1000 12 r18_unset_$r
  CONVOY_COOP_DEPTH=small bench convoy_d resnet18 224 256 1000 12 r18_small_$r; CONVOY_COOP_DEPTH=all bench convoy_d resnet18 224 256 1000 12 r18_all_$r
done
for r in 1 2; do
  bench convoy resnet50 224 128 1000 12 r50_$r; bench convoy_d resnet50 224 128 1000 12 r50_unset_$r
  CONVOY_COOP_DEPTH=small bench convoy_d resnet50 224 128 1000 12 r50_small_$r; CONVOY_COOP_DEPTH=all bench convoy_d resnet50 224 128 1000 12 r50_all_$r
done
finish
