#!/bin/bash
# Session 16, call 8: the widest and tall tensor-core tiles beside PyTorch, same command.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz 2>/dev/null; chmod +x convoy; cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gpu.txt
for spec in "resnet50 224 128" "resnet18 224 256"; do
  set -- $spec
  for prec in mixed float32; do
    timeout 120 $C bench --model $1 --image-size $2 --batch-size $3 --classes 1000 --devices 0 --steps 20 --no-scaling --precision $prec --json 2>/dev/null | tail -1 > $O/convoy_${1}_${2}_$prec.json
    python3 -c "import json; j=json.load(open('$O/convoy_${1}_${2}_$prec.json')); print('$1 $2 $prec', round(j['images_per_sec']), round(j['step_ms'],2))"
  done
done
for m in resnet20 resnet18_cifar; do
  timeout 100 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/convoy_${m}_mixed.json
  python3 -c "import json; j=json.load(open('$O/convoy_${m}_mixed.json')); print('$m mixed', round(j['images_per_sec']), round(j['step_ms'],2))"
done
timeout 200 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8
timeout 150 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12
