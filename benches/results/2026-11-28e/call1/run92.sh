#!/bin/bash
# Session 29, call 1 (H200): new = the tensor-core epilogue synced per subgroup (subgroupBarrier) instead of two workgroup barriers a round; base = 9b5ad65. Validation, registers, A/B.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base kernels pstats pstats_base; do unxz -f $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O; L=/tmp/plog; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 170 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -5 | tee -a $O/verify.txt
timeout 170 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
CONVOY_PIPELINE_LOG=$L timeout 40 .gpu/convoy_base bench --model resnet18_cifar --batch-size 256 --devices 0 --steps 3 --no-scaling --precision mixed > /dev/null 2>&1
cp -r $L $O/plog
for b in base new; do s=.gpu/pstats_$b; [ $b = new ] && s=.gpu/pstats; timeout 60 $s $L --filter gemm_coop > $O/stats_$b.txt 2>&1; echo "stats $b rc=$?" | tee -a $O/verify.txt; done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base new; do
    c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy
    bench $c resnet18_cifar 32 256 10 40 r18c_${b}_$r
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
