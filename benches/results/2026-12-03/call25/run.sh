#!/bin/bash
# Session 47, call 4 (call25): where the tensor-core kernel's time goes on ResNet-50's products.
# gemm_exp (exp.patch, not committed) takes CONVOY_EXP: 1 the epilogue stores nothing to C
# (its rounds through workgroup memory stay), 2 no K step past the first (fetched and staged
# before the loop), 3 both; 0 is the kernel as committed. The engine's own tiles, 200 ms of
# warm-up a variant. Then the profile of 42270d3's resnet50.
source benches/device.sh
for f in "1x1 64>256" "1x1 256>64" "3x3 64" "1x1 512>128" "1x1 128>512" "1x1 512>2048" "stem 7x7/2 padded" "3x3 256"; do
  for e in 0 1 2 3; do
    left=$(( 400 - $(elapsed) )); [ $left -gt 15 ] || break 2
    echo "EXP=$e" >> $O/gemm_exp.txt
    CONVOY_EXP=$e timeout $left .gpu/gemm_exp "$f" --batch 128 --store f16 --precision mixed --reps 30 --warm 200 >> $O/gemm_exp.txt 2>&1; echo "exp '$f' $e rc=$? $(elapsed) s" >> $O/verify.txt
  done
done
grep -c mixed $O/gemm_exp.txt | tee -a $O/verify.txt
timeout 60 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(elapsed) s" | tee -a $O/verify.txt
finish
