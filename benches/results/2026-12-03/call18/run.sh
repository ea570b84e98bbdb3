#!/bin/bash
# Session 46, call 1 (call18): which machine (the gemm bench's `3x3 64 forward`); the persist test on HEAD
# and on a build whose engine walks unasked (it must fail there); the probe kernel as is and with its
# accumulators zeroed by explicit stores (`unmeasured_probe_zero_stores.patch`); resnet50 and resnet18 @224
# (no product walking) and resnet50's profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version,clocks.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
for r in 1 2; do timeout 30 .gpu/gemm "3x3 64 forward" --batch 128 --store f16 2>&1 | grep mixed | cut -c1-140 | tee -a $O/verify.txt; done
CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels persistent > $O/kernels_persist.txt 2>&1; echo "kernels persistent (HEAD) rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked" $O/kernels_persist.txt | cut -c1-300 | head -4 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels_walks persistent > $O/kernels_persist_walks.txt 2>&1; echo "kernels persistent (walks unasked: must fail) rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked\|walk" $O/kernels_persist_walks.txt | cut -c1-300 | head -6 | tee -a $O/verify.txt
for r in 1 2; do
  timeout 60 .gpu/gemm matmul --probe > $O/probe_head_$r.txt 2>&1; echo "probe HEAD $r rc=$?" | tee -a $O/verify.txt; grep -i "matmul\|tflop" $O/probe_head_$r.txt | cut -c1-160 | head -8 | tee -a $O/verify.txt
  timeout 60 .gpu/gemm_zero matmul --probe > $O/probe_zero_$r.txt 2>&1; echo "probe zeroed $r rc=$?" | tee -a $O/verify.txt; grep -i "matmul\|tflop" $O/probe_zero_$r.txt | cut -c1-160 | head -8 | tee -a $O/verify.txt
done
echo "probes $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
bench() { timeout 40 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>$O/$6.err | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do bench resnet50 224 128 1000 12 r50_$r; bench resnet18 224 256 1000 12 r18_$r; done
timeout 60 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; head -8 $O/profile_r50.txt | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
