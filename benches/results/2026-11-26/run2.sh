#!/bin/bash
# Session 14, call 2: the NVIDIA GL version string (issue 24); tensor-core experiments (issue 13):
# 128x128 coop tiles (CONVOY_COOP_WIDE=1), Winograd under mixed with f32 or f16 products.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
cd .gpu && unxz -f convoy.xz kernels.xz && chmod +x convoy kernels && cd ..
C=.gpu/convoy
O=${OUT:-/tmp/out}; mkdir -p $O
echo "== GL"
CONVOY_LOG=debug $C --backend gl devices 2>&1 | grep -E "Version|SL version|Renderer|Vendor|Profile|context" | head -12 | tee $O/gl.txt
$C --backend gl devices 2>&1 | tee -a $O/gl.txt
$C --backend gl bench --model mlp --steps 2 --no-scaling 2>&1 | tail -2 | tee -a $O/gl.txt
$C --backend gl bench --devices 0 --model mlp --steps 2 --no-scaling 2>&1 | tail -2 | tee -a $O/gl.txt
echo "== coop correctness with the wide tile"
CONVOY_COOP_WIDE=1 CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels coop 2>&1 | grep -E "test |result" | tail -8 | tee $O/wide_kernels.txt
for env in "CONVOY_COOP_WIDE=0" "CONVOY_COOP_WIDE=1" "CONVOY_WINOGRAD_MIXED=f32" "CONVOY_WINOGRAD_MIXED=coop"; do
  env $env timeout 200 $C check --devices 0 --precision mixed --model resnet18_cifar --batch-size 24 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$env', json.dumps(j)[:1500])" | tee -a $O/checks.txt
done
echo "== speed"
for model in "resnet18 256" "resnet50 128"; do
  set -- $model
  for env in "CONVOY_COOP_WIDE=0" "CONVOY_COOP_WIDE=1" "CONVOY_WINOGRAD_MIXED=f32" "CONVOY_WINOGRAD_MIXED=coop" "CONVOY_WINOGRAD_MIXED=f32 CONVOY_COOP_WIDE=1"; do
    env $env timeout 150 $C bench --model $1 --image-size 224 --batch-size $2 --steps 15 --no-scaling --precision mixed --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$1', '$env', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/speed.txt
  done
done
CONVOY_COOP_WIDE=1 timeout 150 $C bench --model resnet18 --image-size 224 --batch-size 256 --steps 5 --no-scaling --precision mixed --profile 2>&1 | grep -iE "coop|conv2d|step" | head -20 | tee $O/profile_wide.txt
