#!/bin/bash
# Session 44, call 12: the persistent tile walk as shipped (PERSIST_WORKGROUPS 528, working tree on 2cfe732).
# convoy (walk) against convoy_m (2cfe732 + the env patches, unset = 2cfe732) alternating; PyTorch's
# torch_imagenet.py in the same call (this machine ran ~20% below call 7's); nvidia-smi sampled throughout;
# the full GPU kernel suite with the pipeline log (new PERSIST variants for the translate fixture); the
# persist test on kernels_broken (the next tile's first K step not fetched: must fail); convoy check both.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi > $O/smi_start.txt 2>&1; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,pstate --format=csv,noheader | tee -a $O/verify.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $O/smi_log.csv 2>&1 &
SMI=$!
S=$(date +%s)
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  for v in convoy_m convoy; do
    bench $v resnet50 224 128 1000 12 r50_${v}_$r
    [ $r -lt 3 ] && bench $v resnet18_cifar 32 256 10 40 cifar_${v}_$r
  done
  [ $r -lt 3 ] && bench convoy resnet18 224 256 1000 12 r18_convoy_$r
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; cat $O/torch_imagenet.txt | tail -6 | tee -a $O/verify.txt
bench convoy resnet50 224 128 1000 12 r50_convoy_after_torch
timeout 30 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels_broken persistent > $O/kernels_broken.txt 2>&1; echo "kernels_broken persistent rc=$? (must fail) $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|panicked\|walked" $O/kernels_broken.txt | cut -c1-300 | head -4 | tee -a $O/verify.txt
mkdir -p $O/plog
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 170 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
if [ $(( $(date +%s) - S )) -lt 390 ]; then timeout 100 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt; fi
if [ $(( $(date +%s) - S )) -lt 480 ]; then timeout 100 .gpu/convoy check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt; fi
kill $SMI
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
