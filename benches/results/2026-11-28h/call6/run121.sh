#!/bin/bash
# Session 33, call 6: registers of the weight-gradient and forward tiles with f1/f2/f3 (pipeline_stats --shaders) against HEAD; e2 (no edge
# tests in the row fetches, HEAD's epilogue) and f2e (f2's fetches with edge tests, e3's bare epilogue) on single products: which of the two made
# e3 fast; f3 (B's quad test a pipeline constant only in convolution forwards with row-major B) on single products and the models against HEAD.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_f3 gemm gemm_e2 gemm_e3 gemm_f2e gemm_f3 pipeline_stats; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 60 .gpu/gemm matmul --reps 1000 > $O/warmup.txt 2>&1; nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
for d in head f1 f2 f3 f2e; do
  j=.gpu/regs/bq.jsonl; s="--shaders .gpu/regs/$d"; [ $d = head ] && { j=.gpu/regs/head.jsonl; s=""; }
  timeout 120 .gpu/pipeline_stats $j $s > $O/stats_$d.txt 2>&1
  echo "== $d" | tee -a $O/verify.txt
  grep -E "^ +[0-9]+ " $O/stats_$d.txt | sed -e 's/,TM=8,WM=16,WN=16//' -e 's/ | Stack Size=0 | Local Memory Size=[0-9]*//' -e 's/gemm_coop //' | cut -c1-200 | tee -a $O/verify.txt
done
for g in gemm gemm_e2 gemm_e3 gemm_f2e gemm_f3; do
  timeout 60 .gpu/$g matmul --reps 50 --coop auto,128x128/64x64/1/32 > $O/${g}_matmul.txt 2>&1
  grep " mixed " $O/${g}_matmul.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
  timeout 100 .gpu/$g "1x1" --store f16 --reps 50 > $O/${g}_1x1.txt 2>&1
  grep " mixed " $O/${g}_1x1.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
done
for g in gemm gemm_e3 gemm_f3; do
  timeout 100 .gpu/$g "3x3" --store f16 --reps 30 > $O/${g}_3x3.txt 2>&1
  grep " mixed " $O/${g}_3x3.txt | cut -c1-95 | sed "s/^/$g /" | tee -a $O/verify.txt
done
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in base f3; do
    c=.gpu/convoy_$v; [ $v = base ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${v}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${v}_$r
    bench $c resnet18 224 256 1000 12 r18_${v}_$r
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
