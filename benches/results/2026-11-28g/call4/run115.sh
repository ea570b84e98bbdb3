#!/bin/bash
# Session 32, call 4: the reductions' row split (src/kernels/reduce.rs TARGET_WORKGROUPS) at 1024 (b8bc077, convoy), 512 and 256:
# alternating A/B on resnet50 and resnet18_cifar, then each one's ResNet-50 profile (BatchNorm passes).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_512 convoy_256; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in 1024 512 256; do
    c=.gpu/convoy_$v; [ $v = 1024 ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${v}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
done
for v in 1024 512 256; do
  c=.gpu/convoy_$v; [ $v = 1024 ] && c=.gpu/convoy
  timeout 45 $c bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50_$v.txt 2>&1
  for e in stats_partial4 stats_finalize normalize_train4 backward_partial4 backward_merge backward_dx4 reduce_splits; do grep -F "($e)" $O/profile_resnet50_$v.txt | awk -v e="$v $e" '{for(i=1;i<=NF;i++) if($i ~ /^\(/) {s+=$(i+2); n++}} END{printf "%s n=%d ms=%.3f\n", e, n, s}' | tee -a $O/verify.txt; done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
