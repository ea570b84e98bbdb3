#!/bin/bash
# Session 28, call 2: the driver's statistics (registers, spills) of every tensor-core pipeline a ResNet-50 step and the tile sweeps build; weight-grad and forward sweeps of the 64 x 64-region tiles.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy gemm pipeline_stats; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O; L=/tmp/plog; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/pipeline_stats tests/fixtures/coop_pipelines.jsonl --filter "BM=128,BN=128" 2>&1 | head -3 | cut -c1-400 | tee -a $O/verify.txt
export CONVOY_PIPELINE_LOG=$L
timeout 40 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 3 --no-scaling --precision mixed > $O/r50.txt 2>&1
timeout 40 .gpu/convoy bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 3 --no-scaling --precision mixed > $O/r18c.txt 2>&1
T=auto,128x128/64x64/1/32,128x128/64x64/1/16,128x64/64x64/1/16,128x256/64x64/1/16
timeout 120 .gpu/gemm "weight grad" --side 32 --store f16 --reps 20 --coop $T > $O/gemm_wgrad32.txt 2>&1
grep " mixed " $O/gemm_wgrad32.txt | cut -c1-100 | tee -a $O/verify.txt
T=auto,128x128/64x64/1/32,128x128/64x32/1/16,128x256/64x64/1/32
timeout 150 .gpu/gemm forward --store f16 --reps 10 --coop $T > $O/gemm_fwd56.txt 2>&1
grep " mixed " $O/gemm_fwd56.txt | cut -c1-100 | tee -a $O/verify.txt
unset CONVOY_PIPELINE_LOG
cp -r $L $O/plog
timeout 240 .gpu/pipeline_stats $L tests/fixtures/coop_pipelines.jsonl --filter gemm_coop --ir $O/ir > $O/stats.txt 2>&1; echo "stats rc=$?" | tee -a $O/verify.txt
head -4 $O/stats.txt | cut -c1-600 | tee -a $O/verify.txt; du -sh $O/ir | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
