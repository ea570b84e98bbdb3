#!/bin/bash
# The host all-reduce at 4 and 8 replicas without 4 or 8 GPUs: several replicas per H200
# (`--devices 0,1,0,1,...` opens an adapter once per mention), batch 256 each. Throughput is
# bounded by the two GPUs; what it measures is the host's summing time per step (the
# "exchange" share). Run on the GPU machine like benches/gpu_bench.sh.
set -u
OUT=${OUT:-.}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
timeout 40 .gpu/convoy bench --model resnet20 --steps 300 --no-scaling --devices 0,1 --json > /dev/null 2>&1
for m in resnet20 resnet18_cifar; do
  timeout 120 .gpu/convoy bench --model $m --steps 20 --devices 0,1,0,1,0,1,0,1 --json 2>/dev/null | tail -1 > $OUT/multi_$m.json
  python3 -c "
import json; j=json.load(open('$OUT/multi_$m.json'))
x = max(d['exchange'] for d in j['devices'])
print('$m', [(s['devices'], round(s['images_per_sec']), round(s['step_ms'],2)) for s in j['scaling']], 'host summing per replica thread at 8 replicas: %.2f ms per step (%.1f%%)' % (x * j['step_ms'], 100 * x))
"
done
