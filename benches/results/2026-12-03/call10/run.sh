#!/bin/bash
# Session 43, call 10: the tensor-core epilogue's staging in workgroup memory (uncommitted constants, set by
# environment in this build): C_STRIDE, floats between a staged 16x16 block's rows (16 as shipped; 24 puts the
# eight rows one accumulator store writes in distinct banks, taken out of SQUARE16's pad), and C_ROTATE, each
# lane reading its quad's four floats starting at a different one (lane / 8), so that a scalar read of 32
# lanes meets 32 banks. Gemm bench, resnet50 alternating, then the GPU tensor-core kernel tests (coop::) with
# both (C_STRIDE 24, C_ROTATE 1); device time left for no more.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
S=$(date +%s)
for V in 16:0 16:1 24:0 24:1; do
  st=${V%%:*}; rot=${V##*:}
  for c in "1x1 64>256 forward" "1x1 256>64 input grad" "1x1 256>64 joined" "1x1 128>512 forward" "3x3 64 forward"; do
    CONVOY_CSTRIDE=$st CONVOY_CROT=$rot timeout 30 .gpu/gemm "$c" --batch 128 --store f16 2>&1 | grep mixed | sed "s/^/$V /" >> $O/gemm_stage.txt
  done
done
awk '{print $1, $2, $3, $4, $5, $7, $8}' $O/gemm_stage.txt | tee -a $O/verify.txt
echo "gemm $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
bench() { timeout 40 .gpu/convoy bench --model $1 --image-size $2 --batch-size $3 --classes $4 --devices 0 --steps $5 --no-scaling --precision mixed --json 2>$O/$6.err | tail -1 > $O/$6.json; python3 -c "import json; j=json.load(open('$O/$6.json')); print('$6', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for V in 16:0 16:1 24:1; do
    export CONVOY_CSTRIDE=${V%%:*} CONVOY_CROT=${V##*:}
    bench resnet50 224 128 1000 12 r50_${V/:/_}_$r
    [ $r -eq 1 ] && bench resnet18_cifar 32 256 10 40 cifar_${V/:/_}_$r
  done
done
export CONVOY_CSTRIDE=24 CONVOY_CROT=1
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop:: > $O/kernels_coop.txt 2>&1; echo "kernels coop (24:1) rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_coop.txt | head -8 | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
