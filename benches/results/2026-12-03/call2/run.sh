#!/bin/bash
# Session 42, call 2: tensor-core tiles and K splits of ResNet-50's weight gradients into 64 columns or from 64 rows
# (the stem's, 3x3 64, 1x1 256>64, 1x1 64>256) and of its strided input gradients (phase products), gemm bench, batch 128.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
TW=auto,64x64/32x32/1/16,256x64/32x64/1/16,128x64/32x32/1/16,128x128/64x32/1/16,256x128/64x64/1/32
for c in "stem 7x7/2 padded weight grad" "3x3 64 weight grad" "1x1 256>64 weight grad" "1x1 64>256 weight grad"; do
  left=$(( 500 - ($(date +%s) - S) )); [ $left -lt 20 ] && break
  timeout $left .gpu/gemm "$c" --batch 128 --store f16 --coop $TW --splits auto,128,256,512,1024 > "$O/w_${c//[ >\/]/_}.txt" 2>&1; echo "$c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
T=auto,128x128/64x32/1/16,256x64/32x64/1/16,128x64/32x32/1/16,64x64/32x32/1/16,128x128/64x64/1/32,256x128/64x64/1/32,128x256/64x64/1/32
for c in "3x3/2 128>128 input grad" "3x3/2 256>256 input grad" "3x3/2 512>512 input grad" "1x1/2 256>512 input grad" "1x1/2 512>1024 input grad" "1x1/2 1024>2048 input grad"; do
  left=$(( 560 - ($(date +%s) - S) )); [ $left -lt 20 ] && break
  timeout $left .gpu/gemm "$c" --batch 128 --store f16 --coop $T > "$O/d_${c//[ >\/]/_}.txt" 2>&1; echo "$c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
