#!/bin/bash
# Session 37, call 5: two tiles a tensor-core workgroup (TILES=2), the next tile's first K step fetched during this
# tile's last step and epilogue, where the grid has CONVOY_COOP_TILES workgroups or more (default 2,048; 0 = never,
# the same binary as h). Smoke, models alternating, the GPU kernel suite and convoy check with every grid paired
# (CONVOY_COOP_TILES=1), the 1x1 products both ways.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
for v in 0 2048; do
  CONVOY_COOP_TILES=$v timeout 60 .gpu/gemm "1x1 64>256" --batch 128 --store f16 > $O/smoke_$v.txt 2>&1; echo "smoke tiles_from=$v rc=$?" | tee -a $O/verify.txt; grep "mixed\|rror" $O/smoke_$v.txt | cut -c1-100 | tee -a $O/verify.txt
done
bench() { timeout 40 env CONVOY_COOP_TILES=$1 .gpu/convoy bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in 0 2048; do
    bench $v resnet50 224 128 1000 12 r50_${v}_$r
    bench $v resnet18 224 256 1000 12 r18_${v}_$r
    bench $v resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_COOP_TILES=1 CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
CONVOY_COOP_TILES=1 timeout 120 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for v in 0 2048; do
  CONVOY_COOP_TILES=$v timeout 60 .gpu/gemm "1x1" --batch 128 --store f16 > $O/c1x1_$v.txt 2>&1; echo "1x1 tiles_from=$v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
