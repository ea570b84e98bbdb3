#!/bin/bash
# Session 42, call 1: the join's quads loaded 1, 2 or 3 rounds ahead in the tensor-core epilogue (CONVOY_JOIN_AHEAD,
# an experiment's hook, not committed) against m = 6ee6e24; the joined input gradients' tiles swept in the gemm bench
# (`joined input grad` cases); the stem's tiles and splits.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s)
bench() { timeout 40 env CONVOY_JOIN_AHEAD=$8 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in m:convoy_m:1 a1:convoy:1 a2:convoy:2 a3:convoy:3; do
    IFS=: read tag bin ahead <<< "$v"
    bench $bin resnet50 224 128 1000 12 r50_${tag}_$r $ahead
    bench $bin resnet18 224 256 1000 12 r18_${tag}_$r $ahead
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
for a in 2 3; do
  CONVOY_JOIN_AHEAD=$a CONVOY_TEST_DEVICE=0 timeout 60 .gpu/kernels join > $O/kernels_join_a$a.txt 2>&1; echo "kernels join ahead $a rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_join_a$a.txt | head -4 | tee -a $O/verify.txt
done
T=auto,128x128/64x32/1/16,256x64/32x64/1/16,128x64/32x32/1/16,64x64/32x32/1/16,128x128/64x64/1/32,256x128/64x64/1/32
for a in 1 2 3; do
  left=$(( 560 - ($(date +%s) - S) )); [ $left -lt 20 ] && break
  CONVOY_JOIN_AHEAD=$a timeout $left .gpu/gemm "joined input grad" --batch 128 --store f16 --coop $T --reps 10 2>&1 | grep "joined input grad" > $O/gemm_joined_a$a.txt; echo "gemm ahead $a rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
left=$(( 560 - ($(date +%s) - S) )); [ $left -gt 30 ] && { timeout $left .gpu/gemm "stem 7x7/2 padded" --batch 128 --store a16c16 --coop auto,256x64/32x64/1/16,128x64/32x32/1/16,64x64/32x32/1/16,128x128/64x32/1/16,256x64/32x64/1/32,128x64/32x32/2/32 --splits auto,64,128,512 --reps 10 > $O/gemm_stem.txt 2>&1; echo "gemm stem rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; }
grep -h "mixed" $O/gemm_joined_*.txt | awk '{print FILENAME? "" : "", $0}' | cut -c1-120 >> $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
