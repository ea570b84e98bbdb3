#!/bin/bash
# Session 45, call 1: the machine (bus id, gemm probe), the corrected persist test and the coop:: group on
# HEAD (convoy, kernels) and on B (HEAD + the walk's accumulators declared in its loop + the BatchNorm
# per-element passes' one-row hook CONVOY_BN_ROWS1_BELOW, unset = HEAD's BatchNorm); resnet50 A / B / B with
# the hook at 8M, 16M, 32M elements, alternating; PyTorch's torch_imagenet.py in the same call; a profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi > $O/smi_start.txt 2>&1
nvidia-smi --query-gpu=name,pci.bus_id,serial,uuid,driver_version,clocks.max.sm,power.limit,pstate,ecc.mode.current --format=csv,noheader | tee -a $O/verify.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $O/smi_log.csv 2>&1 &
SMI=$!
S=$(date +%s)
for r in 1 2; do timeout 30 .gpu/gemm "3x3 64 forward" --batch 128 --store f16 2>&1 | grep mixed | sed -E 's/ +/ /g' | cut -c1-120 | sed "s/^/probe $r: /" | tee -a $O/verify.txt; done
CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels persistent > $O/kernels_persist.txt 2>&1; echo "kernels persistent rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked" $O/kernels_persist.txt | cut -c1-300 | head -4 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 120 .gpu/kernels coop:: > $O/kernels_coop.txt 2>&1; echo "kernels coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_coop.txt | head -6 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 120 .gpu/kernels_b coop:: > $O/kernels_b_coop.txt 2>&1; echo "kernels_b coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_b_coop.txt | head -6 | tee -a $O/verify.txt
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  bench convoy resnet50 224 128 1000 12 r50_a_$r
  bench convoy_b resnet50 224 128 1000 12 r50_b_$r
  for T in 8000000 16000000 32000000; do CONVOY_BN_ROWS1_BELOW=$T bench convoy_b resnet50 224 128 1000 12 r50_b${T:0:2}_$r; done
  [ $r -lt 3 ] && bench convoy resnet18_cifar 32 256 10 40 cifar_a_$r && bench convoy_b resnet18_cifar 32 256 10 40 cifar_b_$r && CONVOY_BN_ROWS1_BELOW=16000000 bench convoy_b resnet18_cifar 32 256 10 40 cifar_b16_$r
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -6 $O/torch_imagenet.txt | tee -a $O/verify.txt
bench convoy resnet50 224 128 1000 12 r50_a_after_torch
CONVOY_BN_ROWS1_BELOW=32000000 timeout 30 .gpu/convoy_b bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50_b32.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
kill $SMI
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
