#!/bin/bash
# Session 37, call 3: the direct f16 stores through an f16 view of C (c_half, moved onto C's binding in the SPIR-V)
# instead of call 2's vec2<u32> pointer: gemm smoke both ways; the coop kernel tests one at a time (call 2's suite
# crashed), the whole suite staged, then the 1x1 and 3x3 products both ways.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
for v in 0 1; do
  CONVOY_COOP_STAGED=$v timeout 60 .gpu/gemm "1x1 64>256" --batch 128 --store f16 > $O/smoke_staged$v.txt 2>&1; echo "smoke staged=$v rc=$?" | tee -a $O/verify.txt; grep "mixed\|rror\|convoy:" $O/smoke_staged$v.txt | cut -c1-100 | tee -a $O/verify.txt
  CONVOY_COOP_STAGED=$v timeout 60 .gpu/gemm "3x3 64 " --batch 128 --store f16 > $O/smoke64_staged$v.txt 2>&1; grep "mixed\|rror\|convoy:" $O/smoke64_staged$v.txt | cut -c1-100 | tee -a $O/verify.txt
done
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop --test-threads=1 > $O/kernels_coop.txt 2>&1; echo "kernels coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_coop.txt | head -8 | tee -a $O/verify.txt; tail -3 $O/kernels_coop.txt | tee -a $O/verify.txt
CONVOY_COOP_STAGED=1 CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels_staged.txt 2>&1; echo "kernels staged rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_staged.txt | head -8 | tee -a $O/verify.txt
for v in 0 1; do
  CONVOY_COOP_STAGED=$v timeout 100 .gpu/gemm "1x1" --batch 128 --store f16 > $O/c1x1_staged$v.txt 2>&1; echo "1x1 staged=$v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
