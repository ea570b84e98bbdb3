#!/bin/bash
# Session 44, call 13: the persist test with its device fix (each sweep variant's own device), and resnet50
# convoy_m (2cfe732) against convoy (the walk) in ABBA order, four of each.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
CONVOY_TEST_DEVICE=0 timeout 90 .gpu/kernels persistent --nocapture > $O/kernels_persist.txt 2>&1; echo "kernels persistent rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked\|walked\|tensor cores" $O/kernels_persist.txt | cut -c1-300 | head -4 | tee -a $O/verify.txt
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
i=0
for v in convoy_m convoy convoy convoy_m convoy_m convoy convoy convoy_m; do i=$((i+1)); bench $v resnet50 224 128 1000 12 r50_${v}_$i; done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
