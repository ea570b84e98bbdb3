#!/bin/bash
# Session 17, call 4: float32 and mixed resnet18 on the committed tree (convoy) against the
# rounding-by-flag build of call 3 (convoy_flag), alternated on one warm machine.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz convoy_flag.xz && chmod +x convoy convoy_flag && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/ab.txt
for i in 1 2; do
  for c in convoy convoy_flag; do
    for prec in float32 mixed; do
      timeout 60 .gpu/$c bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 20 --no-scaling --precision $prec --json 2>/dev/null | tail -1 > $O/${c}_resnet18_${prec}_$i.json
      python3 -c "import json; j=json.load(open('$O/${c}_resnet18_${prec}_$i.json')); print('$c resnet18 224 $prec run $i', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/ab.txt
    done
  done
done
