#!/bin/bash
# Session 43, call 8: short-K 1x1 products (stage 1's K 64, stage 2's K 128) on tensor-core tiles staging K 64 a
# step (one step for K 64) and others, gemm bench at batch 128 as ResNet-50 stores them (f16); the forced-tile
# kernel tests with the K 64 tile; a ResNet-50 profile on HEAD.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
S=$(date +%s)
CONVOY_TEST_DEVICE=0 timeout 90 .gpu/kernels forced > $O/kernels_forced.txt 2>&1; echo "kernels forced rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels_forced.txt | head -6 | tee -a $O/verify.txt
T=auto,128x128/64x32/1/64,128x128/64x32/1/32,128x128/64x32/2/32,64x128/32x32/1/64,256x128/64x64/1/32,128x256/64x64/1/16,256x64/32x64/1/16
for c in "1x1 64>256 forward" "1x1 256>64 input grad" "1x1 256>64 joined" "1x1 128>512 forward" "1x1 512>128 joined" "1x1 512>128 input grad"; do
  timeout 60 .gpu/gemm "$c" --batch 128 --store f16 --coop $T >> $O/gemm_shortk.txt 2>&1; echo "gemm $c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
timeout 30 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 6 --no-scaling --precision mixed --profile --dispatches > $O/profile_r50.txt 2>&1; echo "profile rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
cd $O && find . -name "*.err" -size 0 -delete; cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
