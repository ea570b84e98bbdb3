#!/bin/bash
# Session 35, call 3: 7edda7f (the kernel tests ran on its code in calls 1 and 2) — convoy check (mixed and f32), then the four models beside PyTorch
# (its CIFAR script's median of three runs, its ImageNet script).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
timeout 30 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 30 --no-scaling --precision mixed > /dev/null 2>&1
cat .gpu/HEAD_BUILT >> $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
timeout 130 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 130 .gpu/convoy check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench .gpu/convoy resnet18_cifar 32 256 10 40 r18c_1
bench .gpu/convoy resnet20 32 256 10 30 r20_1
bench .gpu/convoy resnet18 224 256 1000 12 r18_1
bench .gpu/convoy resnet50 224 128 1000 12 r50_1
timeout 200 python3 .gpu/torch_median.py .gpu/torch_reference.py --runs 3 --json $O/torch_median.json > $O/torch_median.txt 2>&1; echo "torch_median rc=$?" | tee -a $O/verify.txt; grep -v Warn $O/torch_median.txt | tail -14 | tee -a $O/verify.txt
bench .gpu/convoy resnet18_cifar 32 256 10 40 r18c_2
timeout 100 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
