#!/bin/bash
# K groups (KG) in gemm_coop: kernel tests (forced KG tiles included) and the weight-gradient tiles.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy kernels gemm; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
T=auto,64x64/32x32/1/16,64x64/32x32/1/32/2,64x64/32x32/2/32/2,64x64/64x64/1/64/4,128x64/64x32/1/32/2,128x128/64x64/1/32/2,128x64/32x32/1/16
timeout 150 .gpu/gemm "weight grad" --side 32 --store f16 --coop $T --reps 40 > $O/gemm_wgrad.txt 2>&1; echo "gemm rc=$?" | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
