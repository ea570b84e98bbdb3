#!/bin/bash
# Session 37, call 2: the tensor-core GEMM's whole f16 tiles stored straight from the accumulators (OpFConvert +
# OpCooperativeMatrixStoreKHR in SPIR-V compiled by convoy, src/device/spirv.rs), against the staged stores
# (CONVOY_COOP_STAGED=1, the same binaries): a gemm smoke, the GPU kernel suite, the models alternating, convoy check
# (mixed), the 1x1 and 3x3 products at batch 128.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
timeout 60 .gpu/gemm "1x1 64>256" --batch 128 --store f16 > $O/smoke_direct.txt 2>&1; echo "smoke direct rc=$?" | tee -a $O/verify.txt; grep "mixed\|rror\|convoy:" $O/smoke_direct.txt | cut -c1-120 | tee -a $O/verify.txt
CONVOY_COOP_STAGED=1 timeout 60 .gpu/gemm "1x1 64>256" --batch 128 --store f16 > $O/smoke_staged.txt 2>&1; echo "smoke staged rc=$?" | tee -a $O/verify.txt; grep "mixed" $O/smoke_staged.txt | cut -c1-120 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
bench() { timeout 40 env $8 .gpu/convoy bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  bench x resnet50 224 128 1000 12 r50_d_$r CONVOY_COOP_STAGED=0
  bench x resnet50 224 128 1000 12 r50_s_$r CONVOY_COOP_STAGED=1
  bench x resnet18 224 256 1000 12 r18_d_$r CONVOY_COOP_STAGED=0
  bench x resnet18 224 256 1000 12 r18_s_$r CONVOY_COOP_STAGED=1
  bench x resnet18_cifar 32 256 10 40 r18c_d_$r CONVOY_COOP_STAGED=0
  bench x resnet18_cifar 32 256 10 40 r18c_s_$r CONVOY_COOP_STAGED=1
done
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
for v in 0 1; do
  CONVOY_COOP_STAGED=$v timeout 100 .gpu/gemm "1x1" --batch 128 --store f16 > $O/c1x1_staged$v.txt 2>&1; echo "1x1 staged=$v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
  CONVOY_COOP_STAGED=$v timeout 100 .gpu/gemm "3x3" --batch 128 --store f16 > $O/c3x3_staged$v.txt 2>&1; echo "3x3 staged=$v rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
