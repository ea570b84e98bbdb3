#!/bin/bash
# Session 44, call 11: the persistent tile walk (unmeasured_persist.patch, env CONVOY_PERSIST=W) and the
# reduction split's constants (unmeasured_reduce_split.patch, env CONVOY_REDUCE_TARGET), both applied to
# 2cfe732 and off when unset. Gemm bench short-K cases per W; resnet50 / resnet18_cifar alternating; the full
# GPU kernel suite with both unset (= HEAD, the pool change's first full run); coop:: tests with PERSIST=5
# (every product of more than five tiles walks); convoy check mixed and f32 on HEAD while time is left.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
for W in 0 264 528 1056; do
  for c in "1x1 64>256 forward" "1x1 256>64 forward" "1x1 256>64 input grad" "1x1 256>64 joined" "1x1 128>512 forward" "1x1 256>1024 forward" "3x3 64 forward" "3x3 128 forward"; do
    CONVOY_PERSIST=$W timeout 30 .gpu/gemm "$c" --batch 128 --store f16 2>&1 | grep mixed | sed "s/^/$W /" >> $O/gemm_persist.txt
  done
done
sed -E 's/ +/ /g' $O/gemm_persist.txt | cut -c1-150 | tee -a $O/verify.txt
sums() { awk -v w=$1 '$1==w { if (match($0, /auto +[0-9.]+/)) { split(substr($0, RSTART, RLENGTH), a, " "); s += a[2] } } END { print s }' $O/gemm_persist.txt; }
BEST=264; BS=999
for W in 0 264 528 1056; do s=$(sums $W); echo "W=$W sum=$s ms" | tee -a $O/verify.txt; if [ $W -ne 0 ] && python3 -c "import sys; sys.exit(0 if $s < $BS else 1)"; then BEST=$W; BS=$s; fi; done
echo "best W $BEST; gemm $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
bench() { timeout 40 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>$O/$6.err | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for V in base p264 p528 r256 r1024; do
    unset CONVOY_PERSIST CONVOY_REDUCE_TARGET
    case $V in p264) export CONVOY_PERSIST=264;; p528) export CONVOY_PERSIST=528;; r256) export CONVOY_REDUCE_TARGET=256;; r1024) export CONVOY_REDUCE_TARGET=1024;; esac
    bench resnet50 224 128 1000 12 r50_${V}_$r
    case $V in base|r256|r1024) bench resnet18_cifar 32 256 10 40 cifar_${V}_$r;; esac
    [ $V = p264 ] && CONVOY_PERSIST=$BEST bench resnet18_cifar 32 256 10 40 cifar_pbest_$r
  done
done
unset CONVOY_PERSIST CONVOY_REDUCE_TARGET
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_PERSIST=5 CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop:: > $O/kernels_coop_p5.txt 2>&1; echo "kernels coop (PERSIST=5) rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_coop_p5.txt | head -8 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 170 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
if [ $(( $(date +%s) - S )) -lt 450 ]; then timeout 110 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt; fi
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
