#!/bin/bash
# Session 29, call 2 (H200): registers and timings of two operand buffers (BUFS 2) on the K-16 tiles; convoy (subgroup-synced epilogue) on all four models beside PyTorch (median of three).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy gemm pstats; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/pstats .gpu/bufs2.jsonl .gpu/r18c_plog.jsonl --filter gemm_coop > $O/stats_bufs2.txt 2>&1; echo "stats rc=$?" | tee -a $O/verify.txt
grep -o "gemm_coop [^|]*| Register Count=[0-9]*" $O/stats_bufs2.txt | sed 's/A_QUADS=[0-9],//;s/TM=8,WM=16,WN=[0-9]*//' | tee -a $O/verify.txt
g() { timeout 60 .gpu/gemm "$1" --side 32 --store f16 --reps 30 --coop $2 > $O/gemm_$3.txt 2>&1; grep " mixed " $O/gemm_$3.txt | cut -c1-110 | tee -a $O/verify.txt; }
g "3x3 64 forward" 256x64/32x64/1/16,256x64/32x64/2/16,auto f64
g "3x3 128 forward" 128x128/64x32/1/16,128x128/64x32/2/16,auto f128
g "3x3 128 weight grad" 128x128/64x32/1/16,128x128/64x32/2/16,auto w128
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench .gpu/convoy resnet18_cifar 32 256 10 40 r18c_1
bench .gpu/convoy resnet20 32 256 10 30 r20_1
bench .gpu/convoy resnet18 224 256 1000 12 r18_1
bench .gpu/convoy resnet50 224 128 1000 12 r50_1
timeout 300 python3 .gpu/torch_median.py .gpu/torch_reference.py --runs 3 --json $O/torch_median.json > $O/torch_median.txt 2>&1; echo "torch_median rc=$?" | tee -a $O/verify.txt; grep -v Warn $O/torch_median.txt | tail -14 | tee -a $O/verify.txt
timeout 150 python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json 2>&1 | grep -v Warn | tail -8 | tee $O/torch_imagenet.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
