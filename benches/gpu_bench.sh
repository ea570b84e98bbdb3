#!/bin/bash
# The command behind BENCHMARKS.md, run on the GPU machine from the repository root:
# `convoy bench` for the three benchmark models (1..N GPUs, batch 256 per GPU, with the
# per-kernel profile of one GPU) and the PyTorch reference in the same command.
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
# A freshly started machine runs its first seconds slowly (a cold start gave convnet7 42k
# images/s on one GPU, a warm one 85k): warm every GPU up first and discard the figures.
timeout 60 .gpu/convoy bench --model resnet20 --steps 400 --no-scaling --json > /dev/null 2>&1
# Timed steps per model: about a second of training each (30 steps of resnet20 are 0.2 s,
# short enough for one host hiccup to show).
for ms in convnet7:200 resnet20:100 resnet18_cifar:30; do
    m=${ms%:*} steps=${ms#*:}
    timeout 150 .gpu/convoy bench --model "$m" --steps "$steps" --profile --json 2>/dev/null | tail -1 > "$OUT/bench_$m.json"
    python3 - "$OUT/bench_$m.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(j["model"], "images/s by GPUs:", [round(s["images_per_sec"]) for s in j["scaling"]],
      "efficiency:", [round(s["efficiency"], 3) for s in j["scaling"]])
p = j["profile"]
print("  one GPU: step %.3f ms, GPU %.3f ms, host %.3f ms" % (p["step_ms"], p["gpu_ms"], p["host_ms"]))
for k in p["by_kernel"]:
    print("  %-26s %4d %8.3f ms %6.2f TFLOP/s %6.0f GB/s floor %.3f ms" % (k["kernel"], k["dispatches"], k["ms"], k["tflops"], k["gbps"], k.get("floor_ms", 0)))
PY
done
timeout 240 python3 .gpu/torch_reference.py --ddp --json "$OUT/torch.json" 2>&1 | grep -v Warn | grep ":" | tail -20
