#!/bin/bash
# Session 22, call 9 (the gemm bench of 64f6fdb): every ResNet-18 product at 224 px, batch
# 256, mixed on f16 activations (a16c16) and f32, beside the probe's plain f16 products: how
# far the engine's gathers and tiles sit from what cooperative matrices give.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f gemm.xz && chmod +x gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 200 .gpu/gemm --bench --store a16c16 --reps 20 > $O/gemm_a16c16.txt 2>&1; tail -60 $O/gemm_a16c16.txt
timeout 100 .gpu/gemm --bench --probe > $O/gemm_probe.txt 2>&1; tail -15 $O/gemm_probe.txt
