#!/bin/bash
# Session 36, call 3: 7dbfbb7 (f: the x_rows4 / dy_rows4 and run_lanes refactors): the GPU kernel suite, convoy check in both
# policies, the models once; the halo weight-gradient probe (benches/wgrad_halo.wgsl) beside the engine's 3x3 64 weight gradient.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
S=$(date +%s)
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
timeout 130 .gpu/convoy_f check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 130 .gpu/convoy_f check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
bench .gpu/convoy_f resnet50 224 128 1000 12 r50_f_1
bench .gpu/convoy_f resnet18 224 256 1000 12 r18_f_1
bench .gpu/convoy_f resnet18_cifar 32 256 10 40 r18c_f_1
timeout 60 .gpu/gemm --probe-wgrad > $O/probe_wgrad_b256.txt 2>&1; echo "probe b256 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe_wgrad_b256.txt | head -12 | tee -a $O/verify.txt
timeout 30 .gpu/gemm "3x3 64 weight" --store f16 > $O/gemm_wgrad64_b256.txt 2>&1; grep mixed $O/gemm_wgrad64_b256.txt | cut -c1-90 | tee -a $O/verify.txt
timeout 60 .gpu/gemm --probe-wgrad --batch 128 > $O/probe_wgrad_b128.txt 2>&1; echo "probe b128 rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "probe\|rror" $O/probe_wgrad_b128.txt | head -12 | tee -a $O/verify.txt
timeout 30 .gpu/gemm "3x3 64 weight" --store f16 --batch 128 > $O/gemm_wgrad64_b128.txt 2>&1; grep mixed $O/gemm_wgrad64_b128.txt | cut -c1-90 | tee -a $O/verify.txt
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
