#!/bin/bash
# Session 23, call 8: where the tensor-core kernel's time goes (exp_parts.patch, CONVOY_EXP):
# 0 as is, 1 no products, 2 no global fetches, 3 neither fetches nor staging stores, 4 no
# global stores of C; the mixed forwards and the square product.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for e in 0 1 2 3 4; do
  CONVOY_EXP=$e timeout 100 .gpu/gemm forward --store f16 --reps 30 > $O/gemm_exp$e.txt 2>&1
  CONVOY_EXP=$e timeout 60 .gpu/gemm matmul --reps 30 >> $O/gemm_exp$e.txt 2>&1
done
paste <(grep " mixed " $O/gemm_exp0.txt | cut -c1-30,60-70) <(grep " mixed " $O/gemm_exp1.txt | cut -c60-70) <(grep " mixed " $O/gemm_exp2.txt | cut -c60-70) <(grep " mixed " $O/gemm_exp3.txt | cut -c60-70) <(grep " mixed " $O/gemm_exp4.txt | cut -c60-70) | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
