#!/bin/bash
# Session 42, call 6: every convolution's kernel flip in one dispatch before the backward (convoy) against
# m = a4ab6ea (each input gradient flipping its own kernel first), resnet50 alternating; the flip kernel tests;
# convoy check in mixed precision (the policy whose input gradients read flips).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
S=$(date +%s)
bench() { timeout 40 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>$O/$7.err | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in convoy_m convoy; do
    bench $v resnet50 224 128 1000 12 r50_${v}_$r
  done
done
bench convoy resnet18 224 256 1000 12 r18_convoy_1
echo "models $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 40 .gpu/kernels flip:: > $O/kernels_flip.txt 2>&1; echo "kernels flip rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_flip.txt | head -4 | tee -a $O/verify.txt
timeout 110 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
