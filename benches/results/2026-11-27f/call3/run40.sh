#!/bin/bash
# Session 22, call 3: (a) where resnet20's mixed step went (8.5 ms in session 16, 17 ms
# since): binaries of 3fe9582 (session 16), 2fbff50 (17), 4b4b4bf (19) and 8bf1e84 (now),
# and a Chrome trace of the current one training; (b) tensor-core tiles staging K 16 / other
# buffer counts (convoy_exp = 8bf1e84 + exp_tiles.patch, CONVOY_EXP_TILES=index=bk x bufs).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f *.xz && chmod +x convoy* && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
r() { # binary model precision tag [extra...]
  local b=$1 m=$2 p=$3 t=$4; shift 4
  timeout 60 .gpu/$b bench --model $m --devices 0 --no-scaling --precision $p --json "$@" 2>/dev/null | tail -1 > $O/${b}_${m}_${p}_$t.json
  python3 -c "import json; j=json.load(open('$O/${b}_${m}_${p}_$t.json')); print('$b $m $p $t', round(j['images_per_sec']), round(j['step_ms'],2), round(j['devices'][0]['compute'],3))" | tee -a $O/verify.txt
}
for b in convoy_3fe9582 convoy_2fbff50 convoy_4b4b4bf convoy convoy_3fe9582 convoy; do r $b resnet20 mixed s40 --steps 40; done
for b in convoy_3fe9582 convoy; do r $b resnet20 float32 s40 --steps 40; done
timeout 60 .gpu/convoy bench --model resnet20 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_resnet20_mixed.txt 2>&1
timeout 60 .gpu/convoy_3fe9582 bench --model resnet20 --devices 0 --steps 10 --no-scaling --precision mixed --profile --dispatches > $O/profile_3fe9582_resnet20_mixed.txt 2>&1
timeout 90 .gpu/convoy train --model resnet20 --devices 0 --epochs 1 --batch-size 256 --precision mixed --trace $O/trace_resnet20_mixed.json > $O/train_trace.txt 2>&1
tail -3 $O/train_trace.txt | tee -a $O/verify.txt
for spec in "resnet18 256" "resnet50 128"; do
  set -- $spec
  for rep in 1 2; do
    for cfg in "" "1=16x1" "1=16x2" "2=16x1" "2=16x2" "3=16x2" "3=16x1" "1=16x2,2=16x2,3=16x2"; do
      CONVOY_EXP_TILES=$cfg r convoy_exp $1 mixed "t${cfg//[,=]/_}_$rep" --image-size 224 --batch-size $2 --classes 1000 --steps 20
    done
  done
done
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
