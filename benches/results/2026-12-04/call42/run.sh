#!/bin/bash
# Session 49, call 42: the closing figures for issue 13 from HEAD, every done-when model beside
# PyTorch in one call: resnet18 (CIFAR form) and resnet20 at batch 256 against torch_reference.py
# (median of 3), ResNet-50 at 224 px batch 128 against torch_imagenet.py.
source benches/device.sh
for r in 1 2; do
  bench convoy resnet18_cifar 32 256 10 40 cifar_$r
  bench convoy resnet20 32 256 10 60 r20_$r
  bench convoy resnet50 224 128 1000 12 r50_$r
done
timeout 220 python3 .gpu/torch_median.py .gpu/torch_reference.py --runs 3 --json $O/torch_reference.json > $O/torch_reference.txt 2>&1; echo "torch_reference rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -12 $O/torch_reference.txt | tee -a $O/verify.txt
timeout 170 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch_imagenet rc=$? $(elapsed) s" | tee -a $O/verify.txt; tail -6 $O/torch_imagenet.txt | tee -a $O/verify.txt
bench convoy resnet18_cifar 32 256 10 40 cifar_3
bench convoy resnet20 32 256 10 60 r20_3
bench convoy resnet50 224 128 1000 12 r50_3
finish
