#!/bin/bash
# Session 37, call 4: v = h (314f7cc) with the tensor-core epilogue's staging block read as vec4<f32> (one 16-byte
# workgroup load a quad instead of four), same size and rounds. gemm products and models alternating h / v; the GPU
# kernel suite and convoy check (mixed) on v.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
for v in h v; do
  b=${v%2}
  timeout 100 .gpu/gemm_$b "1x1" --batch 128 --store f16 > $O/c1x1_$v.txt 2>&1; echo "1x1 $v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  timeout 100 .gpu/gemm_$b "3x3" --batch 128 --store f16 > $O/c3x3_$v.txt 2>&1; echo "3x3 $v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
bench() { timeout 40 .gpu/convoy_$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in h v; do
    bench $v resnet50 224 128 1000 12 r50_${v}_$r
    bench $v resnet18 224 256 1000 12 r18_${v}_$r
    bench $v resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
win=$(python3 -c "
import json
m=lambda v:sum(json.load(open('$O/r50_%s_%d.json'%(v,r)))['images_per_sec'] for r in (1,2))
print(int(m('v')>m('h')*1.004))" 2>/dev/null)
echo "v wins: $win" | tee -a $O/verify.txt
[ "$win" = 1 ] && CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
[ "$win" = 1 ] && timeout 150 .gpu/convoy_v check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
