#!/bin/bash
# Session 45, call 2 (call15): A = e9ff4d4 (convoy), B = A + the walk's accumulators declared in its loop (convoy_b,
# its BatchNorm hook unset), C = B + the next tile's fetch and the loop's closing barrier only under PERSIST
# (convoy_c, kernels_c: also the persist test's matmul at 18,000 rows, so that its transposed product walks).
# resnet50 and resnet18_cifar alternating; the full GPU kernel suite on C; convoy check on C in both policies.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee -a $O/verify.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 1000 > $O/smi_log.csv 2>&1 &
SMI=$!
S=$(date +%s)
timeout 30 .gpu/gemm "3x3 64 forward" --batch 128 --store f16 2>&1 | grep mixed | sed -E 's/ +/ /g' | cut -c1-120 | sed "s/^/probe: /" | tee -a $O/verify.txt
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  for v in convoy convoy_b convoy_c; do
    bench $v resnet50 224 128 1000 12 r50_${v}_$r
    [ $r -lt 3 ] && bench $v resnet18_cifar 32 256 10 40 cifar_${v}_$r
  done
done
bench convoy_c resnet18 224 256 1000 12 r18_convoy_c
bench convoy resnet18 224 256 1000 12 r18_convoy
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 300 .gpu/kernels_c > $O/kernels_c.txt 2>&1; echo "kernels_c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_c.txt | head -8 | tee -a $O/verify.txt
timeout 120 .gpu/convoy_c check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
if [ $(( $(date +%s) - S )) -lt 440 ]; then timeout 120 .gpu/convoy_c check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt; fi
timeout 30 .gpu/convoy_c bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50_c.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
kill $SMI
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
