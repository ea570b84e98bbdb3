#!/bin/bash
# Session 25, call 6: the session's tree (128 x 128 for small grids, words for 3x3 weight
# gradients on 128 x 128, the tiled flip) beside PyTorch in one call: GPU kernel tests,
# convoy check mixed, resnet18 / resnet50 @224 mixed alternating with base (d81140f),
# resnet20 and resnet18_cifar mixed, torch_imagenet.py and torch_reference.py, a resnet18
# @224 profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for spec in "resnet18 224 256 1000 base" "resnet18 224 256 1000 new" "resnet50 224 128 1000 base" "resnet50 224 128 1000 new" "resnet18_cifar 32 256 10 base" "resnet18_cifar 32 256 10 new" "resnet20 32 256 10 new"; do
  set -- $spec
  B=$C; [ $5 = base ] && B=.gpu/convoy_base
  timeout 60 $B bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${1}_mixed_$5.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_mixed_$5.json')); print('$1 $2 mixed $5', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
timeout 150 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12 | tee -a $O/verify.txt
timeout 40 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
