#!/bin/bash
# Session 24, call 6: resnet20, resnet18_cifar and MobileNetV2 mixed, base (618f621) against new
# (call 5's binary), alternating twice.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz convoy_base.xz; do unxz -f $f; done && chmod +x convoy convoy_base && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for r in 1 2; do for b in base new; do
  C=.gpu/convoy; [ $b = base ] && C=.gpu/convoy_base
  for m in resnet20 resnet18_cifar; do
    timeout 60 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/${m}_${b}_$r.json
    python3 -c "import json; j=json.load(open('$O/${m}_${b}_$r.json')); print('$m $b $r', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
  done
  timeout 60 $C bench --model mobilenet_v2 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/mobilenet_v2_${b}_$r.json
  python3 -c "import json; j=json.load(open('$O/mobilenet_v2_${b}_$r.json')); print('mobilenet_v2 $b $r', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
done; done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
