#!/bin/bash
# The Im2colT advance without a loop: kernel tests, weight-gradient tiles, resnet18_cifar A/B.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base kernels gemm; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
T=auto,64x64/32x32/1/16,64x64/32x32/1/32,64x64/32x32/2/16,64x64/32x32/1/32/2,128x64/32x32/1/16,128x128/64x32/1/16
for c in "3x3 64 weight grad" "3x3 256 weight grad" "3x3 512 weight grad"; do timeout 60 .gpu/gemm "$c" --side 32 --store f16 --coop $T --reps 40 >> $O/gemm_wgrad.txt 2>&1; echo "gemm rc=$?" | tee -a $O/verify.txt; done
bench() { timeout 40 $1 bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 40 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$2.json; python3 -c "import json; j=json.load(open('$O/$2.json')); print('$2', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do bench .gpu/convoy_base base_$r; bench .gpu/convoy new_$r; done
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
