#!/bin/bash
# Session 43, call 9: where a short-K 1x1 product's time goes on tensor cores, by an uncommitted diagnostic
# constant of gemm_coop (CONVOY_DIAG): 1 = the epilogue's global stores left out (behind a test no value
# meets), 2 = one K step only, 3 = both; 0 = as shipped. Gemm bench at batch 128, f16 storage.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
cat .gpu/HEAD_BUILT > $O/verify.txt
S=$(date +%s)
for D in 0 1 2 3; do
  for c in "1x1 64>256 forward" "1x1 256>64 input grad" "1x1 128>512 forward" "3x3 64 forward" "1x1 256>64 forward"; do
    CONVOY_DIAG=$D timeout 60 .gpu/gemm "$c" --batch 128 --store f16 --coop auto,256x64/32x64/1/16 2>&1 | grep mixed | sed "s/^/D$D /" >> $O/gemm_diag.txt; echo "D$D $c rc=$? $(( $(date +%s) - S )) s" >> $O/verify.txt
  done
done
cat $O/gemm_diag.txt | awk '{print $1, $2, $3, $4, $6, $7, $8}'
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
