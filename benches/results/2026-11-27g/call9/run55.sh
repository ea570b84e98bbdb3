#!/bin/bash
# Session 23, call 9: the mixed forwards with the kernel read as f16 (exp_w16.patch: the gemm
# bench's --store f16w) beside f32 kernels (f16), alternating twice.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
for r in 1 2; do timeout 100 .gpu/gemm forward --store f16,f16w --reps 30 > $O/gemm_w16_$r.txt 2>&1; done
paste <(grep " mixed " $O/gemm_w16_1.txt | cut -c1-75) <(grep " mixed " $O/gemm_w16_2.txt | cut -c48-75) | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
