#!/bin/bash
# Session 25, call 1: validate d81140f (kernel tests with the forced-staging sweeps, convoy
# check mixed), a per-dispatch profile of resnet18_cifar mixed, and the gemm bench's staging
# sweep (--store f16 --stage auto,words,halves) over every case.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy.xz kernels.xz gemm.xz; do unxz -f $f; done && chmod +x convoy kernels gemm && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 120 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 170 $C check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 40 $C bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 20 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_cifar_mixed.txt 2>&1
timeout 200 .gpu/gemm --store f16 --stage auto,words,halves --reps 20 > $O/gemm_stage.txt 2>&1; echo "gemm rc=$?" | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
