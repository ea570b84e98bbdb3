#!/bin/bash
# Session 31, call 10: tensor-core tiles swept on ResNet-50's 1x1 products (A = Rows: forwards and input gradients),
# batch 256 at 224 px, each sweep twice in opposite orders.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp CONVOY_BENCH_DEVICES=0
cd .gpu && for f in gemm; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
T=auto,128x64/32x32/1/16,64x64/32x32/1/16,256x64/32x64/1/16,128x128/64x32/1/16,128x64/64x32/1/16
R=128x64/64x32/1/16,128x128/64x32/1/16,256x64/32x64/1/16,64x64/32x32/1/16,128x64/32x32/1/16,auto
for c in "1x1 64>256" "1x1 256>64" "1x1 1024>256" "1x1 512>2048"; do
  n=$(echo "$c" | tr -c 'a-z0-9' _)
  timeout 60 .gpu/gemm "$c forward" --store f16 --reps 20 --coop $T > $O/gemm_${n}_f.txt 2>&1
  timeout 60 .gpu/gemm "$c forward" --store f16 --reps 20 --coop $R > $O/gemm_${n}_r.txt 2>&1
  timeout 60 .gpu/gemm "$c input" --store f16 --reps 20 --coop $T > $O/gemm_${n}_if.txt 2>&1
  timeout 60 .gpu/gemm "$c input" --store f16 --reps 20 --coop $R > $O/gemm_${n}_ir.txt 2>&1
  grep -h " mixed \|rror" $O/gemm_${n}_*.txt | cut -c1-75 | sort | tee -a $O/verify.txt
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
