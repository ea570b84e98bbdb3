#!/bin/bash
# convoy and PyTorch (../shared/bench/torch_imagenet.py, copied to .gpu/) at 224 px in one
# command on one GPU: ResNet-50 b128 and ResNet-18 b256 with the per-kernel profile. Prepare as
# for benches/gpu_bench.sh (release binary in .gpu/, the Vulkan loader .debs in .gl/).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig >/dev/null 2>&1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
nvidia-smi -L
.gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 20 --profile --json > "$OUT"/convoy_resnet50_224.json 2>/dev/null; echo "resnet50 rc=$?"
.gpu/convoy bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 20 --profile --json > "$OUT"/convoy_resnet18_224.json 2>/dev/null; echo "resnet18 rc=$?"
python3 -c "
import json
for m in ['resnet50','resnet18']:
    j=json.load(open('$OUT/convoy_'+m+'_224.json')); print(m, round(j['images_per_sec']), 'img/s', round(j['step_ms'],2), 'ms')"
python3 .gpu/torch_imagenet.py --json $OUT/torch_imagenet.json
