#!/bin/bash
# Session 34, call 2 (f1e9dc3): coop tile sweeps of ResNet-50's 1x1 products at its bench batch (128) and of the 3x3 64 products (the slowest
# per FLOP of ResNet-18 @224) on tiles whose subgroups hold 64 x 64; per-dispatch profiles of resnet50 and resnet18 @224.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
T=auto,256x64/32x64/1/16,128x128/64x32/1/16,128x128/64x64/1/32,128x256/64x64/1/16,256x128/64x64/1/32
timeout 200 .gpu/gemm "1x1 " --batch 128 --store f16 --reps 50 --coop $T > $O/gemm_1x1_b128.txt 2>&1
grep " mixed " $O/gemm_1x1_b128.txt | cut -c1-100 | tee -a $O/verify.txt
T=auto,256x64/64x64/1/16,256x64/64x64/1/32,128x64/64x64/1/32,128x64/32x64/1/16,256x64/32x64/1/32,64x64/32x32/1/32,128x64/32x32/1/32
timeout 150 .gpu/gemm "3x3 64 " --store f16 --reps 30 --coop $T > $O/gemm_3x3_64.txt 2>&1
grep " mixed " $O/gemm_3x3_64.txt | cut -c1-100 | tee -a $O/verify.txt
for m in "resnet50 224 128 1000" "resnet18 224 256 1000"; do set -- $m
  timeout 60 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps 8 --no-scaling --precision mixed --profile --dispatches > $O/profile_$1.txt 2>&1
  head -1 $O/profile_$1.txt | tee -a $O/verify.txt
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
