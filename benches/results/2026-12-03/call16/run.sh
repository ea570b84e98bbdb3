#!/bin/bash
# Session 45, call 3 (call16): 955cc6c (convoy_c) and the same with an experiment's hook on the walk's grid
# (convoy_d, CONVOY_PERSIST_WORKGROUPS; unset = 528 as shipped, 1000000000 = no product walks), alternating;
# then the models against PyTorch in the same call: torch_imagenet.py and torch_reference.py (median of 3).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  bench convoy_c resnet50 224 128 1000 12 r50_c_$r
  for W in 1000000000 264 1056; do CONVOY_PERSIST_WORKGROUPS=$W bench convoy_d resnet50 224 128 1000 12 r50_w${W:0:4}_$r; done
  if [ $r -lt 3 ]; then
    bench convoy_c resnet18_cifar 32 256 10 40 cifar_c_$r
    CONVOY_PERSIST_WORKGROUPS=1000000000 bench convoy_d resnet18_cifar 32 256 10 40 cifar_w1000_$r
  fi
done
for r in 1 2; do
  bench convoy_c resnet20 32 256 10 60 r20_c_$r
  bench convoy_c resnet18 224 256 1000 12 r18_c_$r
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch_imagenet rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -6 $O/torch_imagenet.txt | tee -a $O/verify.txt
bench convoy_c resnet50 224 128 1000 12 r50_c_after_torch
timeout 200 python3 .gpu/torch_median.py .gpu/torch_reference.py --runs 3 --json $O/torch_reference.json > $O/torch_reference.txt 2>&1; echo "torch_reference rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -12 $O/torch_reference.txt | tee -a $O/verify.txt
bench convoy_c resnet18_cifar 32 256 10 40 cifar_c_after_torch
bench convoy_c resnet20 32 256 10 60 r20_c_after_torch
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
