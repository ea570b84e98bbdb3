#!/bin/bash
# Which change slowed resnet18 @224: base fee8493, v1 c4ca005 (Im2colT advance), v3 v1 + K groups for 1x1 weight grads, new v3 + tap advance.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base convoy_v1 convoy_v3; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm,power.limit --format=csv,noheader | tee $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench .gpu/convoy resnet18 224 256 1000 8 warm
for r in 1 2; do for b in base v1 v3 new; do c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy; bench $c resnet18 224 256 1000 12 r18_${b}_$r; done; done
for b in base v1 v3 new; do c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy; bench $c resnet50 224 128 1000 12 r50_${b}_1; bench $c resnet18_cifar 32 256 10 40 r18c_${b}_1; done
for b in base new; do c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy; timeout 60 $c bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 8 --no-scaling --precision mixed --profile --dispatches > $O/profile_r18_$b.txt 2>&1; done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
