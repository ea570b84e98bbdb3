#!/bin/bash
# Session 42, call 4: what kernels cost inside a ResNet-50 step, measured by leaving them out (CONVOY_DROP, an
# experiment's hook, not committed: the step computes garbage, its time is what counts): the kernel flips, the max
# pool, BatchNorm's merged first passes, the optimizer. Alternating, three rounds.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
bench() { timeout 40 env CONVOY_DROP=$8 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  for v in none:x flip:flip_kernel pool:max_pool_forward4c,max_pool_backward4c stats:stats_merged4 sums:backward_merged4 opt:sgd_momentum dx:backward_dx4 norm:normalize_train4,normalize_train_joined4; do
    IFS=: read tag drop <<< "$v"
    bench convoy resnet50 224 128 1000 12 r50_${tag}_$r $drop
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_DROP=x timeout 30 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
