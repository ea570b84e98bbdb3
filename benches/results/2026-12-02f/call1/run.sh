#!/bin/bash
# Session 40, call 1: the BatchNorm reduction split (reduce::Split) through experiment knobs EXP_TILE_LOG2, EXP_ROWS, EXP_TARGET.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
bench() { env $3 timeout 40 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --json 2>$O/$1_$2.err | tail -1 > $O/$1_$2.json; python3 -c "import json; j=json.load(open('$O/$1_$2.json')); print('$1 $2', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
V="base:EXP_X=0 t256:EXP_TARGET=256 t1024:EXP_TARGET=1024 r64:EXP_ROWS=64 w7:EXP_TILE_LOG2=7 w8:EXP_TILE_LOG2=8 w8r64:EXP_TILE_LOG2=8,EXP_ROWS=64 w7r32t256:EXP_TILE_LOG2=7,EXP_ROWS=32,EXP_TARGET=256"
for r in 1 2; do
  for v in $V; do
    bench ${v%%:*} $r "$(echo ${v#*:} | tr ',' ' ')"
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
for v in base:EXP_X=0 w8:EXP_TILE_LOG2=8 r64:EXP_ROWS=64 t256:EXP_TARGET=256; do
  env $(echo ${v#*:} | tr ',' ' ') timeout 30 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_${v%%:*}.txt 2>&1; echo "profile ${v%%:*} rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  grep -E "^(batchnorm|batchnorm_merge) " $O/profile_${v%%:*}.txt | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
