#!/bin/bash
# Session 23, call 1 (binaries of c0596f3 + the gemm bench's padded stem): the stem at 3 and at
# 4 channels (f16) on the engine's and forced tiles; forward and input-gradient products on
# forced tensor-core tiles (--store f16); per-kernel profiles of resnet18 and resnet50.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz gemm.xz && chmod +x convoy gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 120 .gpu/gemm stem --store f16 --reps 20 --coop auto,256x64/32x64/1/16,256x64/32x64/1/32,128x64/32x32/2/32,64x64/32x32/1/16,128x128/64x32/1/16 > $O/gemm_stem.txt 2>&1
grep " mixed " $O/gemm_stem.txt | cut -c1-100 | tee -a $O/verify.txt
timeout 200 .gpu/gemm 3x3 --store f16 --reps 20 --coop auto,128x256/64x64/1/32,256x128/64x64/1/32,128x128/64x32/1/16,256x64/32x64/1/16,128x128/64x64/1/32 > $O/gemm_3x3.txt 2>&1
timeout 150 .gpu/gemm 1x1 --store f16 --reps 20 --coop auto,128x256/64x64/1/32,256x128/64x64/1/32,128x128/64x32/1/16,256x64/32x64/1/16,128x128/64x64/1/32 > $O/gemm_1x1.txt 2>&1
grep " mixed " $O/gemm_3x3.txt $O/gemm_1x1.txt | grep -v "weight grad" | cut -c1-110 | tee -a $O/verify.txt
timeout 60 .gpu/convoy bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
timeout 60 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
head -20 $O/profile_resnet18_mixed.txt $O/profile_resnet50_mixed.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
