#!/bin/bash
# Session 24, call 3: A staged as f16 only beside an f16 B (weight gradients: act_h16.wgsl in the
# +a16+b16 coop modules), f16 tiles stored a quad at a time, against the base (618f621).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -f $f; done && chmod +x convoy convoy_base gemm gemm_base kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result" $O/kernels.txt | tee -a $O/verify.txt
for r in 1 2; do
  for b in base new; do
    g=.gpu/gemm; [ $b = base ] && g=.gpu/gemm_base
    timeout 100 $g --store f16 --reps 20 > $O/gemm_${b}_$r.txt 2>&1
  done
done
paste <(grep " mixed " $O/gemm_base_1.txt | cut -c1-80) <(grep " mixed " $O/gemm_new_1.txt | cut -c50-80) <(grep " mixed " $O/gemm_base_2.txt | cut -c50-80) <(grep " mixed " $O/gemm_new_2.txt | cut -c50-80) > $O/gemm_cmp.txt
head -60 $O/gemm_cmp.txt >> $O/verify.txt
B="--image-size 224 --classes 1000 --devices 0 --steps 20 --no-scaling --precision mixed --json"
for r in 1 2; do
  for b in base new; do
    c=.gpu/convoy; [ $b = base ] && c=.gpu/convoy_base
    timeout 120 $c bench --model resnet18 --batch-size 256 $B > $O/r18_${b}_$r.json 2>$O/r18_${b}_$r.err
    timeout 120 $c bench --model resnet50 --batch-size 128 $B > $O/r50_${b}_$r.json 2>$O/r50_${b}_$r.err
    echo "$b $r r18 $(grep -o '"images_per_sec":[0-9.]*' $O/r18_${b}_$r.json | head -1) r50 $(grep -o '"images_per_sec":[0-9.]*' $O/r50_${b}_$r.json | head -1)" | tee -a $O/verify.txt
  done
done
timeout 200 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$?" | tee -a $O/verify.txt; tail -3 $O/check_mixed.txt >> $O/verify.txt
timeout 200 .gpu/convoy check --devices 0 --model all --batch-size 24 --precision float32 > $O/check_f32.txt 2>&1; echo "check float32 rc=$?" | tee -a $O/verify.txt; tail -3 $O/check_f32.txt >> $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
