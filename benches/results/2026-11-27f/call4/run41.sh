#!/bin/bash
# Session 22, call 4 (binaries of the tree after 8bf1e84: as_stored mixed products, the 128 x 128
# tile at K 16): GPU kernel tests, convoy check, model speeds; convoy_exp (exp_narrow.patch)
# moves narrow products to the tensor cores: CONVOY_EXP_NARROW (weight gradients into this
# many columns or fewer stay on the f32 kernel; 32 now), CONVOY_EXP_WIDE (outputs of this
# many columns or fewer stay on the f32 kernel; 16 now).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy* kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 240 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | tee -a $O/verify.txt
CONVOY_EXP_NARROW=0 CONVOY_EXP_WIDE=8 timeout 120 .gpu/convoy_exp check --devices 0 --model all --batch-size 24 --precision mixed 2>&1 | tail -1 | sed 's/^/exp n0 w8: /' | tee -a $O/verify.txt
r() { # binary model tag image batch classes
  local b=$1 m=$2 t=$3
  timeout 60 .gpu/$b bench --model $m --devices 0 --no-scaling --precision mixed --json --image-size $4 --batch-size $5 --classes $6 --steps 30 2>/dev/null | tail -1 > $O/${b}_${m}_$t.json
  python3 -c "import json; j=json.load(open('$O/${b}_${m}_$t.json')); print('$b $m $t', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
}
for spec in "resnet20 32 256 10" "resnet18_cifar 32 256 10" "mobilenet_v2 224 128 1000"; do
  set -- $spec
  for rep in 1 2; do
    r convoy $1 now_$rep $2 $3 $4
    CONVOY_EXP_NARROW=0 r convoy_exp $1 n0_$rep $2 $3 $4
    CONVOY_EXP_NARROW=0 CONVOY_EXP_WIDE=8 r convoy_exp $1 n0w8_$rep $2 $3 $4
  done
done
r convoy resnet18 now 224 256 1000
r convoy resnet50 now 224 128 1000
timeout 60 .gpu/convoy bench --model resnet20 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet20_mixed.txt 2>&1
CONVOY_EXP_NARROW=0 CONVOY_EXP_WIDE=8 timeout 60 .gpu/convoy_exp bench --model resnet20 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_exp_n0w8_resnet20_mixed.txt 2>&1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
