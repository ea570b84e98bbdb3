#!/bin/bash
# Session 47, call 1 (call22): the same-call PyTorch figures for HEAD (f0575f4), and two experiment
# hooks in one binary (convoy_x, /tmp/s47/hooks.patch, not committed), alternating with HEAD on
# resnet50: CONVOY_COOP_IM2COL64=1 (Im2col gathers into 64 columns, stem excluded, on 128 x 64 at
# 64 x 32), =2 (stem included), and CONVOY_REDUCE_ROWS_PER_LANE=32/64/128 (16 is HEAD's).
source benches/device.sh
for r in 1 2 3; do
  bench convoy resnet50 224 128 1000 12 r50_$r
  CONVOY_COOP_IM2COL64=1 bench convoy_x resnet50 224 128 1000 12 r50_t64_$r
  CONVOY_COOP_IM2COL64=2 bench convoy_x resnet50 224 128 1000 12 r50_t64s_$r
  for n in 32 64 128; do CONVOY_REDUCE_ROWS_PER_LANE=$n bench convoy_x resnet50 224 128 1000 12 r50_rpl${n}_$r; done
done
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -8 $O/torch_imagenet.txt | tee -a $O/verify.txt
for r in 1 2; do
  bench convoy resnet18 224 256 1000 12 r18_$r
  CONVOY_COOP_IM2COL64=1 bench convoy_x resnet18 224 256 1000 12 r18_t64_$r
  CONVOY_REDUCE_ROWS_PER_LANE=64 bench convoy_x resnet18 224 256 1000 12 r18_rpl64_$r
done
bench convoy resnet50 224 128 1000 12 r50_4
CONVOY_REDUCE_ROWS_PER_LANE=64 timeout 60 .gpu/convoy_x bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50_rpl64.txt 2>&1; echo "profile rc=$? $(elapsed) s" | tee -a $O/verify.txt
finish
