#!/bin/bash
# Session 31, call 1 (prepared in session 30): validate HEAD on the GPU. New since the last GPU run (b1bc524):
# packed max-pool argmax, block Welford, BN row loads (389195b), BN statistics from the GEMM epilogue (STATS,
# tensor-core epilogue never run before), conv bias in the product, the 1x1/2 input gradient's Rows phase.
# Needs in .gpu: kernels.xz and convoy.xz (HEAD). Then run103.sh (A/B, gemm forwards with/without --stats, profile).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy kernels; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 300 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 110 .gpu/convoy check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
