#!/bin/bash
# Session 47, call 2 (call23): HEAD (f0575f4) verified: the full kernel suite (the persist test
# covers 9102b38), and convoy check on all models in both policies.
source benches/device.sh
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 230 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep "test result\|panicked\|FAILED" $O/kernels.txt | cut -c1-300 | head -12 | tee -a $O/verify.txt
for p in mixed float32; do timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision $p > $O/check_$p.txt 2>&1; echo "check $p rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -3 $O/check_$p.txt | tee -a $O/verify.txt; done
finish
