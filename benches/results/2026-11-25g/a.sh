#!/bin/bash
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "import torch, torchvision, safetensors; print(torch.__version__, torchvision.__version__)" 2>&1 | tail -1
cp -r tests/fixtures/torchvision /tmp/fx && cd /tmp/fx && python3 make_fixture.py --names 2>&1 | tail -4; cd - >/dev/null
mkdir -p $OUT/fx; for f in /tmp/fx/*; do cmp -s $f tests/fixtures/torchvision/$(basename $f) && echo "same: $(basename $f)" || { echo "differs: $(basename $f)"; cp $f $OUT/fx/; }; done
timeout 400 python3 .gpu/i21.py 2>&1 | grep -v Warn | tail -8
