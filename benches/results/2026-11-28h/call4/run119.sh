#!/bin/bash
# Session 33, call 4: why the engine's 64 x 64-region tiles run at half the probe's speed. The driver's registers of the probe and of the
# engine's 128 x 128 / 64 x 64 (128 invocations) and 128 x 256 tiles as they are (e0), with the probe's plain fetch of row-major A and B
# without bounds checks (e2), and with it and a bare epilogue (e3); then the e3 engine (timing only: it ignores bounds, bias and splits) against HEAD.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in gemm gemm_e3 pipeline_stats; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
for e in e0 e2 e3; do
  s=""; [ $e != e0 ] && s="--shaders .gpu/regs/$e"
  timeout 120 .gpu/pipeline_stats .gpu/regs/variants.jsonl $s > $O/stats_$e.txt 2>&1
  echo "== $e" | tee -a $O/verify.txt
  grep -E "^ +[0-9]+ " $O/stats_$e.txt | sed -e 's/,BUFS=1,B_KIND=0,SG_M=64,SG_N=64//' -e 's/,TM=8,WM=16,WN=16//' -e 's/ | Stack Size=0 | Local Memory Size=[0-9]*//' | tee -a $O/verify.txt
done
T=auto,128x128/64x64/1/32,128x256/64x64/1/32,256x128/64x64/1/32
for g in gemm gemm_e3; do
  timeout 90 .gpu/$g matmul --reps 50 --coop $T > $O/${g}_matmul.txt 2>&1
  grep " mixed " $O/${g}_matmul.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
  timeout 150 .gpu/$g "1x1" --store f16 --reps 50 --coop $T > $O/${g}_1x1.txt 2>&1
  grep " mixed " $O/${g}_1x1.txt | grep -v "weight grad" | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
