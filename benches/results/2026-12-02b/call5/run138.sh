#!/bin/bash
# Session 36, call 5: the halo weight-gradient probe (benches/wgrad_halo.wgsl, a row of taps a workgroup, one or two buffers) beside the engine's
# 3x3 64 weight gradient, batch 256 and 128 at 56 px.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
timeout 30 .gpu/gemm "3x3 64 weight" --store f16 > $O/gemm_wgrad64_b256.txt 2>&1; grep mixed $O/gemm_wgrad64_b256.txt | cut -c1-90 | tee -a $O/verify.txt
timeout 90 .gpu/gemm --probe-wgrad > $O/probe_wgrad_b256.txt 2>&1; echo "probe b256 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe_wgrad_b256.txt | head -12 | tee -a $O/verify.txt
timeout 60 .gpu/gemm --probe-wgrad --batch 128 > $O/probe_wgrad_b128.txt 2>&1; echo "probe b128 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe_wgrad_b128.txt | head -12 | tee -a $O/verify.txt
timeout 30 .gpu/gemm "3x3 64 weight" --store f16 --batch 128 > $O/gemm_wgrad64_b128.txt 2>&1; grep mixed $O/gemm_wgrad64_b128.txt | cut -c1-90 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
