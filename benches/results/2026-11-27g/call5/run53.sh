#!/bin/bash
# Session 23, call 5 (binary of 3b5a11c, the padded stem and the 1x1 tiles): convoy check,
# the models beside PyTorch in one call, per-kernel profiles.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz && chmod +x convoy && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 150 $C check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for spec in "resnet18 224 256 mixed 1000" "resnet50 224 128 mixed 1000" "mobilenet_v2 224 128 mixed 1000" "resnet18 224 256 float32 1000"; do
  set -- $spec
  timeout 60 $C bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/convoy_${1}_$4.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_$4.json')); print('$1 $2 $4', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
for m in resnet20 resnet18_cifar; do
  timeout 100 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${m}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${m}_mixed.json')); print('$m mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
timeout 60 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
timeout 60 $C bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
timeout 60 $C bench --model resnet20 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet20_mixed.txt 2>&1
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
timeout 150 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
