#!/bin/bash
# Session 29, call 3 (H200): two operand buffers with the stores before the products (one barrier a step): registers, kernel tests, single products BUFS 1 vs 2; ResNet-50's profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy gemm pstats kernels; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/pstats .gpu/bufs2.jsonl .gpu/r18c_plog.jsonl --filter gemm_coop > $O/stats_bufs2.txt 2>&1; echo "stats rc=$?" | tee -a $O/verify.txt
grep -o "gemm_coop [^|]*| Register Count=[0-9]*" $O/stats_bufs2.txt | sed 's/A_QUADS=[0-9],//;s/TM=8,WM=16,WN=[0-9]*//' | tee -a $O/verify.txt
g() { timeout 60 .gpu/gemm "$1" --side $4 --store f16 --reps 30 --coop $2 > $O/gemm_$3.txt 2>&1; grep " mixed " $O/gemm_$3.txt | cut -c1-110 | tee -a $O/verify.txt; }
g "3x3 64 forward" 256x64/32x64/1/16,256x64/32x64/2/16 f64 32
g "3x3 128 forward" 128x128/64x32/1/16,128x128/64x32/2/16 f128 32
g "3x3 128 weight grad" 128x128/64x32/1/16,128x128/64x32/2/16 w128 32
g "3x3 64 input grad" 256x64/32x64/1/16,256x64/32x64/2/16 d64 32
g "1x1 256>64 forward" 256x64/32x64/1/16,256x64/32x64/2/16 p256 56
g "1x1 64>256 forward" 256x64/32x64/1/16,256x64/32x64/2/16,128x128/64x32/1/16,128x128/64x32/2/16 p64 56
g "3x3 64 weight grad" 64x64/32x32/1/16,64x64/32x32/2/16 w64 56
CONVOY_TEST_DEVICE=0 timeout 170 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 40 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50.txt 2>&1
head -22 $O/profile_resnet50.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
