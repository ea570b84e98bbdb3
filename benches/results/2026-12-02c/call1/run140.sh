#!/bin/bash
# Session 37, call 1: the tensor-core epilogue's share. gemm_base = 314f7cc; gemm_sum: the epilogue replaced by one
# summed 16x16 block per subgroup (the main loop alone); gemm_lds: every round's coopStoreT and subgroup barriers, the
# global stores of round 0 only. ResNet-50's 1x1 and 3x3 products at batch 128, f16 storage.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
for v in base sum lds base2; do
  b=${v%2}
  timeout 100 .gpu/gemm_$b "1x1" --batch 128 --store f16 > $O/c1x1_$v.txt 2>&1; echo "1x1 $v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  timeout 100 .gpu/gemm_$b "3x3" --batch 128 --store f16 > $O/c3x3_$v.txt 2>&1; echo "3x3 $v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
