#!/bin/bash
# Session 25, call 2: tiles for resnet18_cifar's shapes (gemm --side 32): the strided
# products (phase input gradients) and the stride-1 ones on smaller tiles; resnet18_cifar
# mixed alternating base (d81140f) with the 3x3 128-column weight gradients staged as words.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
T="auto,128x128/64x32/1/16,256x64/32x64/1/16,64x64/32x32/1/16,128x64/32x32/2/32,128x256/64x64/1/32,256x128/64x64/1/32"
timeout 150 .gpu/gemm "3x3/2" --side 32 --store f16 --coop $T --reps 20 > $O/gemm_strided.txt 2>&1; echo "gemm strided rc=$?" | tee -a $O/verify.txt
timeout 150 .gpu/gemm "3x3 " --side 32 --store f16 --coop $T --reps 20 > $O/gemm_cifar.txt 2>&1; echo "gemm cifar rc=$?" | tee -a $O/verify.txt
for r in 1 2 3; do
  for b in base new; do
    c=.gpu/convoy; [ $b = base ] && c=.gpu/convoy_base
    timeout 40 $c bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 30 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/r18c_${b}_$r.json
    python3 -c "import json; j=json.load(open('$O/r18c_${b}_$r.json')); print('resnet18_cifar $b $r', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
