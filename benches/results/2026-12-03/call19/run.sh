#!/bin/bash
# Session 46, call 2 (call19): every ResNet-50 product (batch 128, f16 activations and gradients) on each
# tensor-core tile the kernel can run, beside the engine's choice: the tiles were chosen before the loop's
# accumulators moved into each pass (955cc6c), which changed what this machine's driver makes of the kernel.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
T=auto,128x128/64x32/1/16,128x128/64x32/2/16,128x128/64x32/1/32,128x128/64x64/1/16,128x128/64x64/1/32,256x64/32x64/1/16,256x64/32x64/1/32,128x256/64x64/1/16,128x256/64x64/1/32,256x128/64x64/1/16,256x128/64x64/1/32,128x64/32x32/1/16,128x64/64x32/1/16,64x64/32x32/1/16
for f in "1x1" "3x3 " "3x3/2" "stem 7x7/2 padded"; do
  left=$(( 540 - ($(date +%s) - S) )); [ $left -gt 20 ] || break
  timeout $left .gpu/gemm "$f" --batch 128 --store f16 --precision mixed --coop $T --reps 10 >> $O/gemm_sweep.txt 2>&1; echo "sweep '$f' rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
grep -c mixed $O/gemm_sweep.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
