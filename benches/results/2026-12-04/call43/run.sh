#!/bin/bash
# Session 49, call 43: why the gemm bench times ResNet-50's 3x3 128/256/512 forwards at
# 0.38-1.02 ms (call 39) where the same kernels take 0.15-0.19 ms inside a step: the case
# alone, longer warm-ups, more repetitions, filled operands, then the model's own profile.
source benches/device.sh
g() { timeout 60 .gpu/gemm "$1" --batch 128 --store f16 --precision mixed --coop auto --splits auto "${@:2}" 2>&1 | grep mixed | cut -c1-75 | sed "s/^/[${*:2}] /" | tee -a $O/verify.txt; }
g "3x3 128 forward"
g "3x3 128 forward" --warm 2000
g "3x3 128 forward" --reps 200
g "3x3 128 forward" --fill
g "3x3 512 forward"
g "3x3 512 forward" --warm 2000 --reps 200
g "1x1/2 512>1024 forward" --warm 2000
g "3x3 64 forward"
g "3x3 " --warm 300
timeout 40 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 8 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(elapsed) s" | tee -a $O/verify.txt
head -3 $O/profile_r50.txt | tee -a $O/verify.txt
finish
