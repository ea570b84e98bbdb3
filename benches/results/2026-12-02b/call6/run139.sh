#!/bin/bash
# Session 36, call 6: the gemm bench's products on zero operands (as every earlier sweep ran them) against operands holding
# values (--fill): the weight gradients on the engine's tiles and the two the sweeps compared, the 3x3 64 forward and input
# gradient, and the 1x1 64 > 256 ones at batch 128.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
for fill in "" --fill; do
  n=zeros; [ -n "$fill" ] && n=fill
  timeout 150 .gpu/gemm "weight grad" --store f16 $fill --coop auto,128x128/64x32/1/16,128x256/64x64/1/16 > $O/wgrad_b256_$n.txt 2>&1; echo "wgrad $n rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  timeout 60 .gpu/gemm "3x3 64 " --store f16 $fill > $O/c64_b256_$n.txt 2>&1; echo "3x3 64 $n rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  timeout 60 .gpu/gemm "1x1 64>256" --batch 128 --store f16 $fill --coop auto,128x64/32x32/1/16 > $O/c1x1_b128_$n.txt 2>&1; echo "1x1 $n rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
