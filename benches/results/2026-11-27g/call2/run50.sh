#!/bin/bash
# Session 23, call 2: the padded f16 stem (convoy_stem) and with it the 1x1 tiles (convoy)
# against c0596f3 (convoy_old): GPU kernel tests, convoy check, models alternating.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f convoy.xz convoy_old.xz convoy_stem.xz kernels.xz && chmod +x convoy convoy_old convoy_stem kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels 2>&1 | grep -E "test result|FAILED|panicked|worst|failures:|^    [a-z_]+::" | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision float32 > $O/check_float32.txt 2>&1; tail -1 $O/check_float32.txt | tee -a $O/verify.txt
timeout 60 .gpu/convoy check --devices 0,0 --model resnet18 --batch-size 24 --precision mixed > $O/check_two_replicas.txt 2>&1; tail -1 $O/check_two_replicas.txt | tee -a $O/verify.txt
r() { # binary model image batch classes tag
  timeout 50 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps 20 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/${1}_${2}_$6.json
  python3 -c "import json; j=json.load(open('$O/${1}_${2}_$6.json')); print('$1 $2 $6', round(j['images_per_sec']), round(j['step_ms'],2))" | tee -a $O/verify.txt
}
for spec in "resnet18 224 256 1000" "resnet50 224 128 1000"; do
  for b in convoy_old convoy_stem convoy convoy_old convoy_stem convoy; do r $b $spec x; done
done
for b in convoy_old convoy; do r $b mobilenet_v2 224 128 1000 x; r $b resnet20 32 256 10 x; done
timeout 60 .gpu/convoy bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_mixed.txt 2>&1
timeout 60 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_mixed.txt 2>&1
head -22 $O/profile_resnet18_mixed.txt | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
