#!/bin/bash
# Session 45, call 4 (call17): the walk opt-in (GemmOptions::persist; no product of a model walks): the persist
# test (it asks for the walk), resnet50 / resnet18_cifar, then the coop:: group while time is left.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels persistent > $O/kernels_persist.txt 2>&1; echo "kernels persistent rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked" $O/kernels_persist.txt | cut -c1-300 | head -4 | tee -a $O/verify.txt
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do bench convoy resnet50 224 128 1000 12 r50_$r; bench convoy resnet18_cifar 32 256 10 40 cifar_$r; done
CONVOY_TEST_DEVICE=0 timeout 130 .gpu/kernels coop:: > $O/kernels_coop.txt 2>&1; echo "kernels coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "^test \|test result" $O/kernels_coop.txt | head -12 | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
