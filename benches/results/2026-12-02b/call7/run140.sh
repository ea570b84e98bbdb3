#!/bin/bash
# Session 36, call 7: the gemm bench's probes after their operands moved to Device::upload_f16 (review): --probe and
# --probe-wgrad must still report exact results.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm --probe > $O/probe.txt 2>&1; echo "probe rc=$?" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe.txt | tee -a $O/verify.txt
timeout 60 .gpu/gemm --probe-wgrad --batch 128 > $O/probe_wgrad_b128.txt 2>&1; echo "probe-wgrad rc=$?" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe_wgrad_b128.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
