#!/bin/bash
# Session 46, call 3 (call20): call 19's sweep again on ResNet-50's products alone, each variant run 200 ms
# before it is timed (`--warm 200`; call 19's later variants ran in stretches up to 3x slower: the clocks
# drop while pipelines compile), 30 repetitions, the SM clock logged every 200 ms. First, alternating:
# HEAD (convoy) against the 3x3 weight gradients into 256 columns or more at K 32 a step (convoy_w),
# then the tensor-core tests on that change (kernels_w, with a weight gradient of 256 columns added).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version --format=csv,noheader | tee -a $O/verify.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $O/smi_log.csv 2>&1 &
S=$(date +%s)
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do bench convoy resnet50 224 128 1000 12 r50_$r; bench convoy_w resnet50 224 128 1000 12 r50_w_$r; done
for r in 1; do bench convoy resnet18 224 256 1000 12 r18_$r; bench convoy_w resnet18 224 256 1000 12 r18_w_$r; done
timeout 60 .gpu/convoy_w bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50_w.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels_w coop:: > $O/kernels_coop_w.txt 2>&1; echo "kernels_w coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "^test \|test result\|panicked" $O/kernels_coop_w.txt | cut -c1-300 | head -12 | tee -a $O/verify.txt
T=auto,128x128/64x32/1/16,128x128/64x64/1/32,256x64/32x64/1/16,128x256/64x64/1/16,128x256/64x64/1/32,256x128/64x64/1/16,256x128/64x64/1/32,128x64/64x32/1/16
for f in "1x1" "3x3 " "3x3/2 128>128" "3x3/2 256>256" "3x3/2 512>512"; do
  left=$(( 480 - ($(date +%s) - S) )); [ $left -gt 20 ] || break
  timeout $left .gpu/gemm "$f" --batch 128 --store f16 --precision mixed --coop $T --reps 30 --warm 200 >> $O/gemm_sweep.txt 2>&1; echo "sweep '$f' rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
grep -c mixed $O/gemm_sweep.txt | tee -a $O/verify.txt
kill %1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
