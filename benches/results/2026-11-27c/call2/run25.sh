#!/bin/bash
# Session 19, call 2: why the f16-stored step ran slower in its products (call 1: conv2d_coop
# 45.9 -> 57.2 ms on resnet50). Every product of the gemm bench on f32 and f16 activations
# (--store f32,a16,a16c16), and a per-dispatch profile of resnet50 mixed.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/gemm_store.txt
timeout 200 .gpu/gemm --store f32,a16,a16c16 --reps 20 >> $O/gemm_store.txt 2>&1
grep mixed $O/gemm_store.txt | cut -c1-75
timeout 60 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_dispatches.txt 2>&1
