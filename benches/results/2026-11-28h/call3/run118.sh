#!/bin/bash
# Session 33, call 3 (call 2 ran it cold: every product 1.5-3x slower than in call 1, discarded): tile sweeps of ResNet-50's 1x1 products (batch 256, 56 px) and resnet18_cifar's weight gradients (side 32) on tiles with more workgroups a compute unit.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
T=auto,128x64/32x32/1/16,64x64/32x32/1/16,128x64/64x32/1/16,256x64/32x64/1/32,128x128/64x32/1/16,128x256/64x64/1/16
timeout 200 .gpu/gemm "1x1 " --store f16 --reps 50 --coop $T > $O/gemm_1x1.txt 2>&1
grep " mixed " $O/gemm_1x1.txt | cut -c1-100 | tee -a $O/verify.txt
T=auto,128x64/32x32/1/16,64x64/64x32/1/16,128x64/64x32/1/16,64x64/32x32/1/32
timeout 200 .gpu/gemm "weight grad" --side 32 --store f16 --reps 50 --coop $T > $O/gemm_wgrad32.txt 2>&1
grep " mixed " $O/gemm_wgrad32.txt | cut -c1-100 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
