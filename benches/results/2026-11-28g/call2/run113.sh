#!/bin/bash
# Session 32, call 2: f6550b2 (BatchNorm+ReLU deferred into the next convolution gathers) — kernel tests, check (mixed and f32), A/B against 3691952 (convoy_base), alternating; profile.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base kernels; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT >> $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 300 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
timeout 150 .gpu/convoy check --devices 0 --model all --batch-size 24 > $O/check_f32.txt 2>&1; echo "check f32 rc=$?" | tee -a $O/verify.txt; tail -1 $O/check_f32.txt | tee -a $O/verify.txt
bench() { timeout 45 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base new; do
    c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${b}_$r
    bench $c resnet18 224 256 1000 12 r18_${b}_$r
  done
done
timeout 45 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50.txt 2>&1
timeout 45 .gpu/convoy_base bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_base.txt 2>&1
head -8 $O/profile_resnet50.txt | tee -a $O/verify.txt
echo "a_norm products (new): $(grep -F '(gemm_coop)' $O/profile_resnet50.txt | grep -F a_norm | awk '{for(i=1;i<=NF;i++) if($i ~ /^\(/) {s+=$(i+2); n++}} END{printf "n=%d ms=%.3f", n, s}')" | tee -a $O/verify.txt
for e in gemm_coop normalize_train4 stats_finalize; do grep -F "($e)" $O/profile_resnet50_base.txt | awk -v e=$e '{for(i=1;i<=NF;i++) if($i ~ /^\(/) {s+=$(i+2); n++}} END{printf "base %s n=%d ms=%.3f\n", e, n, s}' | tee -a $O/verify.txt; done
for e in stats_partial4 stats_finalize stats_finalize_norm normalize_train4 normalize_train_joined4 backward_partial4 backward_merge backward_dx4 gemm_coop; do grep -F "($e)" $O/profile_resnet50.txt | awk -v e=$e '{for(i=1;i<=NF;i++) if($i ~ /^\(/) {s+=$(i+2); n++}} END{printf "%s n=%d ms=%.3f\n", e, n, s}' | tee -a $O/verify.txt; done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
