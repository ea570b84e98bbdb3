#!/bin/bash
# Session 48, call 6 (call34): HEAD (94f030e) beside PyTorch's ImageNet-form script in one call
# (the standing same-call figures for issue 13).
source benches/device.sh
bench convoy resnet50 224 128 1000 12 r50_1; bench convoy resnet18 224 256 1000 12 r18_1
timeout 170 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -6 $O/torch_imagenet.txt | tee -a $O/verify.txt
bench convoy resnet50 224 128 1000 12 r50_2; bench convoy resnet18 224 256 1000 12 r18_2
finish
