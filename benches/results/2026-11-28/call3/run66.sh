#!/bin/bash
# Session 25, call 3: (1) the strided products' tiles again on a warm GPU (gemm --side 32,
# 50 repetitions, twice); (2) 128 x 128 at K 16 against the engine's wide tiles on 224-px
# 3x3 256 and 512 (gemm --side 56); (3) resnet18_cifar / resnet18 / resnet50 mixed on base
# (d81140f), new (3x3 128-column weight gradients staged as words) and new2 (+ 128 x 128
# for forwards and input gradients whose wide-tile grid is under 512 workgroups).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base convoy_new gemm && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm "matmul" --reps 200 > /dev/null 2>&1
T="auto,128x128/64x32/1/16,256x64/32x64/1/16,64x64/32x32/1/16"
for r in 1 2; do timeout 100 .gpu/gemm "3x3/2" --side 32 --store f16 --coop $T --reps 50 > $O/gemm_strided_$r.txt 2>&1; done
for c in "3x3 256" "3x3 512"; do timeout 100 .gpu/gemm "$c" --side 56 --store f16 --coop auto,128x128/64x32/1/16 --reps 50 > "$O/gemm_56_${c#3x3 }.txt" 2>&1; done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base new new2; do
    c=.gpu/convoy_$b; [ $b = new2 ] && c=.gpu/convoy
    bench $c resnet18_cifar 32 256 10 30 r18c_${b}_$r
    bench $c resnet18 224 256 1000 12 r18_${b}_$r
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
  done
done
timeout 40 .gpu/convoy bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 20 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet18_cifar_new2.txt 2>&1
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
