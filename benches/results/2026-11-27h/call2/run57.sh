#!/bin/bash
# Session 24, call 2: the gemm bench on three trees: base (618f621), x (A staged as two
# words and widened/rounded into vec4<f16> tiles, B f16 staged as f16) and new (A and B f16
# staged as vec4<f16>), alternating twice.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm*.xz; do unxz -f $f; done && chmod +x gemm gemm_base gemm_x && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for r in 1 2; do
  for b in base x new; do
    g=.gpu/gemm; [ $b = base ] && g=.gpu/gemm_base; [ $b = x ] && g=.gpu/gemm_x
    timeout 100 $g --store f16 --reps 20 > $O/gemm_${b}_$r.txt 2>&1
  done
done
echo "product  base1 x1 new1 base2 x2 new2 (ms)" >> $O/verify.txt
paste <(grep " mixed " $O/gemm_base_1.txt | cut -c1-30) <(grep " mixed " $O/gemm_base_1.txt | cut -c61-70) <(grep " mixed " $O/gemm_x_1.txt | cut -c61-70) <(grep " mixed " $O/gemm_new_1.txt | cut -c61-70) <(grep " mixed " $O/gemm_base_2.txt | cut -c61-70) <(grep " mixed " $O/gemm_x_2.txt | cut -c61-70) <(grep " mixed " $O/gemm_new_2.txt | cut -c61-70) >> $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
