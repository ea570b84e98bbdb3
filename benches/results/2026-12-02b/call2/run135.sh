#!/bin/bash
# Session 36, call 2: against 9560cb7 (h): d (backward_dx4 loading the next row before this row's store, dx_unmeasured.patch,
# with the x_rows4 / dy_rows4 and run_lanes refactors), s (d with 3x3 weight gradients into 256+ columns on 128 x 128, not 128 x 256),
# s2 (d with only those into 512+ columns or from fewer than 2,048 rows on 128 x 128), t (s2 with 1x1 weight gradients of 64 rows
# into 256+ columns on 128 x 64), alternating; the gemm bench's small weight gradients on more forced tiles.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in h d s s2 t; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
for v in h s2; do bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_1; done
timeout 60 .gpu/gemm "3x3 64 weight" --store f16 --coop auto,64x64/64x64/1/16,64x64/32x32/1/32,128x64/64x32/1/16,64x64/32x32/2/16 --stage auto,words,halves > $O/gemm_wgrad64.txt 2>&1; echo "gemm 64 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 40 .gpu/gemm "1x1 64>256 weight" --batch 128 --store f16 --coop auto,128x64/32x32/1/16,64x128/32x64/1/16,64x256/64x64/1/16,64x128/64x32/1/16 > $O/gemm_1x1_64_b128.txt 2>&1; echo "gemm 1x1 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 40 .gpu/gemm "stem 7x7/2 padded weight" --store f16 --coop auto,128x64/32x32/1/16,64x64/32x32/1/32,64x64/64x64/1/16 --splits auto,128,1024 > $O/gemm_stem.txt 2>&1; echo "gemm stem rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
