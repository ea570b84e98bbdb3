#!/bin/bash
# The command behind BENCHMARKS.md, run on the GPU machine from the repository root:
# `convoy bench` for the three benchmark models (1..N GPUs, batch 256 per GPU) and the
# PyTorch reference in the same command.
#
# Prepare here:  cargo build --release && mkdir -p .gpu && cp target/release/convoy .gpu/ &&
#                cp ../shared/bench/torch_reference.py .gpu/
# and the Vulkan loader .debs in .gl/ (see /work/.library/device/README.md); carry .gl and .gpu.
set -u
OUT=${OUT:-.}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
# NVLink multicast stays off on shared hosts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for m in convnet7 resnet20 resnet18; do
    timeout 120 .gpu/convoy bench --model "$m" --steps 30 --json 2>/dev/null | tail -1 > "$OUT/bench_$m.json"
    cat "$OUT/bench_$m.json"; echo
done
timeout 240 python3 .gpu/torch_reference.py --ddp --json "$OUT/torch.json" 2>&1 | grep -v Warn | grep ":" | tail -20
