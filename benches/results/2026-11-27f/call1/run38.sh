#!/bin/bash
# Session 22, call 1 (binaries of 38a2ee9, the tree at the end of session 21; see
# `git log`): the masked gradient sum's first GPU run. GPU kernel tests, convoy check both
# precisions, model speeds against fec3514 (convoy_old) in the same call, PyTorch ImageNet
# and CIFAR references (resnet20 in the same call as ours, session 16's command).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy convoy_old kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 120 $C check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -2 | tee -a $O/verify.txt
timeout 120 $C check --devices 0 --model all --batch-size 24 2>&1 | tail -2 | tee -a $O/verify.txt
for spec in "resnet18 224 256 mixed 1000" "resnet50 224 128 mixed 1000" "mobilenet_v2 224 128 mixed 1000"; do
  set -- $spec
  for b in convoy_old convoy convoy_old convoy; do
    timeout 60 .gpu/$b bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/${b}_${1}_$4.json
    python3 -c "import json; j=json.load(open('$O/${b}_${1}_$4.json')); print('$b $1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
  done
done
for m in resnet20 resnet18_cifar; do
  timeout 100 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${m}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${m}_mixed.json')); print('$m mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
timeout 60 $C bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
timeout 150 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
