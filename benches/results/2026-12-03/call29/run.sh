#!/bin/bash
# Session 48, call 1 (call29): the staged accumulator rows' stride (unmeasured_c_stride.patch,
# *_cs binaries; CONVOY_C_STRIDE 20 / 24, 16 unset = HEAD's mapping): coop:: tests at each
# stride (they check the mapping), resnet50 / resnet18 @224 alternating, the 1x1 64>256
# product; then HEAD (94f030e) verified: the full kernel suite and convoy check in both policies.
source benches/device.sh
for s in 20 24; do CONVOY_C_STRIDE=$s CONVOY_PIPELINE_LOG=$O/plog_$s CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels_cs coop:: > $O/coop_$s.txt 2>&1; echo "coop stride $s rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep "test result\|panicked" $O/coop_$s.txt | cut -c1-300 | head -6 | tee -a $O/verify.txt; done
for r in 1 2; do
  for s in 16 20 24; do CONVOY_C_STRIDE=$s bench convoy_cs resnet50 224 128 1000 12 r50_${s}_$r; done
done
for s in 16 20 24; do CONVOY_C_STRIDE=$s bench convoy_cs resnet18 224 256 1000 12 r18_${s}; done
for s in 16 20 24; do CONVOY_C_STRIDE=$s timeout 40 .gpu/gemm_cs "1x1 64>256" --batch 128 --store f16 --precision mixed --coop auto --reps 30 --warm 200 >> $O/gemm_$s.txt 2>&1; echo "gemm stride $s rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep mixed $O/gemm_$s.txt | cut -c1-200 | head -4 | tee -a $O/verify.txt; done
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep "test result\|panicked\|FAILED" $O/kernels.txt | cut -c1-300 | head -12 | tee -a $O/verify.txt
for p in mixed float32; do timeout 110 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision $p > $O/check_$p.txt 2>&1; echo "check $p rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -1 $O/check_$p.txt | tee -a $O/verify.txt; done
finish
