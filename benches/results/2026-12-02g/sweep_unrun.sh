#!/bin/bash
# Session 41, not run (no machine, twice): tensor-core tiles of the short-K 1x1 products, and split against unsplit
# forwards and input gradients (ResNet-50, batch 128, f16 stores), gemm bench. Needs `.gpu/gemm.xz`: the stripped,
# xz-compressed `cargo bench --bench gemm --no-run` binary.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
S=$(date +%s)
T=auto,128x128/64x32/1/16,128x128/64x32/1/32,128x128/64x32/2/16,256x64/32x64/1/16,256x64/32x64/1/32,256x64/32x64/2/16,128x64/32x32/1/16,128x64/32x32/2/32,128x64/64x32/1/32,64x64/32x32/1/16,64x64/32x32/2/32,128x256/64x64/1/32,256x128/64x64/1/32,128x128/64x64/1/32,128x128/64x64/1/16
for c in "1x1 64>256" "1x1 128>512" "1x1 256>1024"; do
  timeout 150 .gpu/gemm "$c" --batch 128 --store f16 --coop $T > "$O/gemm_${c//[ >]/_}.txt" 2>&1; echo "$c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
for c in "3x3 256>256" "3x3 512>512" "1x1 2048>512" "1x1 512>2048" "1x1 1024>256" "1x1 256>1024" "3x3/2"; do
  timeout 100 .gpu/gemm "$c" --batch 128 --store f16 --splits auto,1 > "$O/split_${c//[ >\/]/_}.txt" 2>&1; echo "$c rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt
done
grep -h "mixed" $O/split_*.txt $O/gemm_*.txt | tee -a $O/verify.txt | tail -3
