#!/bin/bash
# Session 31, call 2 (prepared in session 30; needs convoy, convoy_base, convoy_base0 and gemm .xz in .gpu): A/B of b1bc524 (convoy_base0, the last GPU-validated tree),
# 389195b (convoy_base: packed argmax, BN block statistics and row loads) and HEAD (convoy: + BN statistics from
# the epilogue, conv bias in the product, the 1x1/2 Rows phase), alternating, then ResNet-50's profile at HEAD.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in convoy convoy_base convoy_base0 gemm; do unxz -kf $f.xz; chmod +x $f; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
bench() { timeout 45 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for b in base0 base new; do
    [ $r = 2 ] && [ $b = base0 ] && continue
    c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy
    bench $c resnet50 224 128 1000 12 r50_${b}_$r
    bench $c resnet18_cifar 32 256 10 40 r18c_${b}_$r
  done
done
for b in base0 new; do c=.gpu/convoy_$b; [ $b = new ] && c=.gpu/convoy; bench $c resnet18 224 256 1000 12 r18_${b}_1; done
CONVOY_BENCH_DEVICES=0 timeout 50 .gpu/gemm forward --store a16c16 > $O/gemm_forward.txt 2>&1
CONVOY_BENCH_DEVICES=0 timeout 50 .gpu/gemm forward --store a16c16 --stats > $O/gemm_forward_stats.txt 2>&1
python3 - $O/gemm_forward.txt $O/gemm_forward_stats.txt <<'PY' | tee -a $O/verify.txt
import sys
def rows(f):
    return {(l[:28].strip(), l[29:38].strip()): l[57:66].strip() for l in open(f) if l[29:38].strip() in ("mixed", "float32")}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
for k in a:
    print(f"{k[0]:<28} {k[1]:>8} ms {a[k]:>8} stats {b.get(k, '-'):>8}")
PY
timeout 45 .gpu/convoy bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 12 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet50.txt 2>&1
grep "max_pool\|stats_partial\|stats_finalize" $O/profile_resnet50.txt | head -12 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
