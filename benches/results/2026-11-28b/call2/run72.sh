#!/bin/bash
# Session 26, call 2: the batched phase products of resnet18_cifar's stride-2 input
# gradients on several tensor-core tiles, against forced K splits (one dispatch a phase).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base kernels gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
T=auto,128x128/64x32/1/16,128x128/64x32/1/32,128x128/64x32/2/32,128x256/64x64/1/32,256x128/64x64/1/32,64x64/32x32/1/16,256x64/32x64/1/16,128x64/32x32/1/16
timeout 100 .gpu/gemm "3x3/2" --side 32 --store f16 --coop auto --splits auto,2,4 --reps 50 > $O/gemm_warm.txt 2>&1
for r in 1 2; do
timeout 120 .gpu/gemm "3x3/2" --side 32 --store f16 --coop $T --reps 50 > $O/gemm_tiles_$r.txt 2>&1; echo "tiles $r rc=$?" | tee -a $O/verify.txt
timeout 60 .gpu/gemm "3x3/2" --side 32 --store f16 --coop auto --splits auto,2,4 --reps 50 > $O/gemm_splits_$r.txt 2>&1; echo "splits $r rc=$?" | tee -a $O/verify.txt
done
grep "input grad" $O/gemm_tiles_2.txt $O/gemm_splits_2.txt | cut -c1-120 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
