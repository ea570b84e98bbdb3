#!/bin/bash
# Session 48, call 5 (call33): tiles for the 3x3 64 weight gradient (resnet18's largest gap
# to cuDNN: 0.62 ms against ~0.12) on HEAD, where 128 x 64 at 64 x 32 on 128 invocations (session
# 47's gather tile) postdates the last sweep of it; the 3x3 128 one beside it. One run a tile
# (a tile the product cannot take ends its run with an error).
source benches/device.sh
for f in "3x3 64 weight grad" "3x3 128 weight grad"; do
  for t in auto 64x64/32x32/1/16 128x64/64x32/1/16 64x128/32x64/1/16 128x64/32x32/1/16 64x64/32x64/1/16 128x128/64x32/1/16 64x64/32x32/2/16 64x64/32x32/1/32 128x64/64x32/2/16 128x64/64x32/1/32; do
    timeout 20 .gpu/gemm "$f" --batch 256 --side 56 --store f16 --precision mixed --coop $t --reps 30 --warm 100 >> $O/gemm_sweep.txt 2>&1 || echo "$f $t: rc=$?" >> $O/gemm_sweep.txt
  done; echo "sweep '$f' $(elapsed) s" | tee -a $O/verify.txt
done
grep -i "mixed\|error\|rc=" $O/gemm_sweep.txt | sed 's/grid=1d tile=M128N64 //' | cut -c1-220 | tee -a $O/verify.txt
finish
