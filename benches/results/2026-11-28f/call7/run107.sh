#!/bin/bash
# Session 31, call 7: experiment — the GEMM kernels read their product's parameters from the uniform array
# (products[pz].field) instead of a private copy `p` (convoy_pz) against b198b13 (convoy), alternating; then pz's profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_pz; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
bench() { timeout 45 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base pz; do
    c=.gpu/convoy_$b; [ $b = base ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${b}_$r
    bench $c resnet18 224 256 1000 12 r18_${b}_$r
  done
done
timeout 45 .gpu/convoy_pz bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50.txt 2>&1
head -8 $O/profile_resnet50.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
