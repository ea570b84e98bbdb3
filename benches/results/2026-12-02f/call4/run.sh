#!/bin/bash
# Session 40, call 4: weight gradients deferred past the next 1 (a), 2 (b) or 3 (c) pushed kernels (EXP_DEFER), against m = 87b0363.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
bench() { env $8 timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3), 'wait', round(j['devices'][0]['input_wait'],3))" | tee -a $O/verify.txt; }
for r in 1 2 3; do
  for v in m:convoy_m:EXP_DEFER=1 a:convoy:EXP_DEFER=1 b:convoy:EXP_DEFER=2 c:convoy:EXP_DEFER=3; do
    IFS=: read n bin e <<< "$v"
    bench $bin resnet50 224 128 1000 12 r50_${n}_$r $e
    bench $bin resnet18_cifar 32 256 10 40 cifar_${n}_$r $e
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
