#!/bin/bash
# Issue 17's rows on two GPUs after the kernel changes, PyTorch DDP in the same command.
set -u
for f in .gl/*.deb; do dpkg -x "$f" / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
nvidia-smi -L
echo "commit a45dd02; command: bash .gpu/scaling2.sh; $(nvidia-smi -L | head -2 | tr '\n' ' ')" > "$OUT/meta.txt"
timeout 60 .gpu/convoy bench --model resnet20 --steps 400 --no-scaling --json > /dev/null 2>&1
summ() { python3 - "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(j["model"], "images/s by GPUs:", [(s["devices"], round(s["images_per_sec"])) for s in j["scaling"]],
      "efficiency:", [round(s["efficiency"], 3) for s in j["scaling"]])
PY
}
for ms in resnet20:100 resnet18_cifar:30; do m=${ms%:*} steps=${ms#*:}
  timeout 150 .gpu/convoy bench --model "$m" --steps "$steps" --devices 0,1 --json 2>/dev/null | tail -1 > "$OUT/scaling_$m.json"; summ "$OUT/scaling_$m.json"
  timeout 150 .gpu/convoy bench --model "$m" --steps "$steps" --devices 0,1 --precision mixed --json 2>/dev/null | tail -1 > "$OUT/scaling_${m}_mixed.json"; echo -n "mixed "; summ "$OUT/scaling_${m}_mixed.json"
done
timeout 200 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --steps 20 --devices 0,1 --json 2>/dev/null | tail -1 > "$OUT/scaling_resnet50_224.json"; summ "$OUT/scaling_resnet50_224.json"
timeout 280 python3 .gpu/torch_reference.py --ddp --json "$OUT/torch.json" 2>&1 | grep -v Warn | grep ":" | tail -24
