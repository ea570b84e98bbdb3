#!/bin/bash
# Session 48, call 2 (call30): HEAD (94f030e) against the stride build at 16 (convoy_cs, the same
# mapping) on resnet50, since call 29 saw 3,490 where session 47 saw 3,720; the profile of HEAD's
# resnet18 @224 dispatch by dispatch; PyTorch's bf16 + channels_last step under its profiler
# (benches/torch_profile.py: kernels by kind, convolutions by input shape).
source benches/device.sh
for r in 1 2; do bench convoy resnet50 224 128 1000 12 r50_$r; bench convoy_cs resnet50 224 128 1000 12 r50_cs_$r; done
bench convoy resnet18 224 256 1000 12 r18_1
timeout 60 .gpu/convoy bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r18.txt 2>&1; echo "profile rc=$? $(elapsed) s" | tee -a $O/verify.txt
timeout 150 python3 .gpu/torch_profile.py --json $O/torch_profile.json > $O/torch_profile.txt 2>&1; echo "torch profile rc=$? $(elapsed) s" | tee -a $O/verify.txt; grep -A7 "kernels .* ms a step" $O/torch_profile.txt | tee -a $O/verify.txt
bench convoy resnet50 224 128 1000 12 r50_3
finish
