#!/bin/bash
# Session 47, call 7 (call28): the tensor-core epilogue's rounds spelt out (unroll.patch, not
# committed: each accumulator stored by name in its own round, where a loop chose it by a
# switch), alternating with 42270d3 on resnet50 and resnet18 @224; then convoy check of the
# resnet models on it in mixed precision (its products' values).
source benches/device.sh
for r in 1 2 3; do
  bench convoy resnet50 224 128 1000 12 r50_$r
  bench convoy_unroll resnet50 224 128 1000 12 r50_u_$r
done
bench convoy resnet18 224 256 1000 12 r18_1; bench convoy_unroll resnet18 224 256 1000 12 r18_u_1
timeout 80 .gpu/convoy_unroll check --devices 0 --model resnet20 --batch-size 24 --precision mixed > $O/check_u.txt 2>&1; echo "check rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -2 $O/check_u.txt | cut -c1-300 | tee -a $O/verify.txt
finish
