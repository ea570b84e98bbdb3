#!/bin/bash
# Issue 6's scaling table, run on the GPU machine from the repository root (prepare as for
# benches/gpu_bench.sh): `convoy bench` for resnet20 and resnet18_cifar on 1, 2, 4 (and 8) of the
# machine's GPUs, batch 256 per GPU, then the PyTorch reference with DDP on all of them in
# the same command.
set -u
OUT=${OUT:-.}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L
# Every GPU leaves its idle clocks first (see gpu_bench.sh).
timeout 60 .gpu/convoy bench --model resnet20 --steps 400 --no-scaling --json > /dev/null 2>&1
for ms in resnet20:100 resnet18_cifar:30; do
    m=${ms%:*} steps=${ms#*:}
    timeout 150 .gpu/convoy bench --model "$m" --steps "$steps" --json 2>/dev/null | tail -1 > "$OUT/scaling_$m.json"
    python3 - "$OUT/scaling_$m.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(j["model"], "images/s by GPUs:", [(s["devices"], round(s["images_per_sec"])) for s in j["scaling"]],
      "efficiency:", [round(s["efficiency"], 3) for s in j["scaling"]],
      "host summing share per replica:", [round(d["exchange"], 4) for d in j["devices"]])
PY
done
timeout 300 python3 .gpu/torch_reference.py --ddp --json "$OUT/torch.json" 2>&1 | grep -v Warn | grep ":" | tail -20
