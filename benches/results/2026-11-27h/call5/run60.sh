#!/bin/bash
# Session 24, call 5 (the tree of 5429315 + the widest tile staging K 16 for 3x3 weight gradients
# into 256+ columns): GPU kernel tests, convoy check in both precisions, the models beside
# PyTorch in one call (resnet18 and resnet50 beside base, 618f621), per-kernel profiles.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz convoy_base.xz kernels.xz; do unxz -f $f; done && chmod +x convoy convoy_base kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
for p in mixed float32; do
  timeout 150 $C check --devices 0 --model all --batch-size 24 --precision $p > $O/check_$p.txt 2>&1; echo "check $p rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_$p.txt | tee -a $O/verify.txt
done
for spec in "resnet18 224 256 mixed 1000 base" "resnet18 224 256 mixed 1000 new" "resnet50 224 128 mixed 1000 base" "resnet50 224 128 mixed 1000 new" "mobilenet_v2 224 128 mixed 1000 new" "resnet18 224 256 float32 1000 new"; do
  set -- $spec
  B=$C; [ $6 = base ] && B=.gpu/convoy_base
  timeout 60 $B bench --model $1 --image-size $2 --batch-size $3 --classes $5 --devices 0 --steps 20 --no-scaling --precision $4 --json 2>/dev/null | tail -1 > $O/convoy_${1}_$4_$6.json
  python3 -c "import json; j=json.load(open('$O/convoy_${1}_$4_$6.json')); print('$1 $2 $4 $6', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
for m in resnet20 resnet18_cifar; do
  timeout 100 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${m}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${m}_mixed.json')); print('$m mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done
timeout 60 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
timeout 60 $C bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt
timeout 150 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
