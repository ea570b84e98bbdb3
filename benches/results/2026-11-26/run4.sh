#!/bin/bash
# Session 14, call 4: mixed precision with the wide tensor-core tile beside PyTorch, same command.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz kernels.xz 2>/dev/null; chmod +x convoy kernels; cd ..
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
timeout 120 $C bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 5 --no-scaling --precision mixed --profile 2>&1 | grep -E "^kernel|^conv|^batch|^elem|^max|step" | head -12 | tee $O/profile_resnet18_mixed.txt
for m in resnet18_cifar resnet20 convnet7; do
  timeout 100 $C bench --model $m --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$m mixed', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/cifar.txt
done
timeout 200 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8
timeout 200 python3 .gpu/torch_reference.py --json $O/torch.json 2>&1 | grep -v Warn | grep ":" | tail -12
