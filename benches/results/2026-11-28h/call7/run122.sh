#!/bin/bash
# Session 33, call 7: the row fetches without a branch around each load (one load a slot from a clamped index, zeroed by a select).
# f4: row-major A (1x1 forwards and input gradients) and row-major B of forward-type products (IM2COL, ROWS); f5: f4 plus the forward
# convolutions' image gather (padding by select); f6: f5 plus the weight gradients (A_COLS and B rows of every kind). Single products, then the models.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_f4 convoy_f5 convoy_f6 gemm gemm_e3 gemm_f4 gemm_f5 gemm_f6; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
for g in gemm gemm_f4 gemm_f5 gemm_f6; do
  timeout 60 .gpu/$g matmul --reps 50 > $O/${g}_matmul.txt 2>&1
  grep " mixed " $O/${g}_matmul.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
  for f in 1x1 3x3; do
    timeout 100 .gpu/$g "$f" --store f16 --reps 30 > $O/${g}_$f.txt 2>&1
    grep " mixed " $O/${g}_$f.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
  done
done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in base f4 f5 f6; do
    c=.gpu/convoy_$v; [ $v = base ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${v}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
