#!/bin/bash
# Session 33, call 1: the probe against the engine on a plain 4096^3 product (times and the driver's registers),
# ResNet-50's 1x1 products on the H200, and the reductions' split at 512 (HEAD) / 384 / 768 and depthwise's 1024 / 512, alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_384 convoy_768 convoy_dw512 gemm pipeline_stats; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O; L=/tmp/plog; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
export CONVOY_PIPELINE_LOG=$L
timeout 60 .gpu/gemm --probe --reps 30 > $O/probe.txt 2>&1; cat $O/probe.txt | tee -a $O/verify.txt
timeout 90 .gpu/gemm matmul --reps 30 --coop auto,128x128/64x64/1/32,128x128/64x64/2/32,128x256/64x64/1/32,128x256/64x64/1/16,256x128/64x64/1/32 > $O/gemm_matmul.txt 2>&1
grep " mixed " $O/gemm_matmul.txt | cut -c1-100 | tee -a $O/verify.txt
timeout 120 .gpu/gemm 1x1 --store f16 --reps 20 > $O/gemm_1x1.txt 2>&1
grep " mixed " $O/gemm_1x1.txt | cut -c1-110 | tee -a $O/verify.txt
unset CONVOY_PIPELINE_LOG
timeout 120 .gpu/pipeline_stats $L > $O/stats.txt 2>&1; echo "stats rc=$?" | tee -a $O/verify.txt
grep -E "staged|BN=256|BN=128" $O/stats.txt | cut -c1-330 | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in 512 384 768; do
    c=.gpu/convoy_$v; [ $v = 512 ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${v}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
  for v in dw1024 dw512; do
    c=.gpu/convoy_$v; [ $v = dw1024 ] && c=.gpu/convoy
    bench $c mobilenet_v2 224 128 1000 12 mnv2_${v}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
