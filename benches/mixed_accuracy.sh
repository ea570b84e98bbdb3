#!/bin/bash
# Issue 13's accuracy criterion on the GPU machine: resnet20 trained on an image folder
# (benches/shapes_folder.py: ten classes of shapes on noisy backgrounds, 10,000 training and
# 2,000 validation PNGs of 32 px) in float32 and in mixed precision, two seeds each, the
# same command otherwise (SGD from 0.05 with a cosine decay to 0 over 15 epochs: at a constant
# rate the last epoch's validation accuracy swings by tens of points in either precision, so a
# comparison needs a run that ends at a low rate); prints each run's final validation accuracy
# and loss scale.
# Prepare as for benches/gpu_bench.sh (release binary in .gpu/, the Vulkan loader .debs in .gl/).
set -u
OUT=${OUT:-.}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig >/dev/null 2>&1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
dir=/tmp/shapes
[ -d $dir ] || python3 benches/shapes_folder.py $dir --train 1000 --val 200
for seed in ${SEEDS:-1 2 3 4}; do
    for precision in float32 mixed; do
        .gpu/convoy train --model resnet20 --data folder:$dir --epochs ${EPOCHS:-15} --batch-size 128 --schedule cosine \
            --seed $seed --precision $precision --devices 0 --json 2>/dev/null | tail -1 > "$OUT/accuracy_${precision}_$seed.json"
        python3 - "$OUT/accuracy_${precision}_$seed.json" $seed <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print("%-8s seed %s: val_accuracy %.4f val_loss %.4f train_accuracy %.4f loss_scale %s skipped %s" % (
    j["precision"], sys.argv[2], j["val_accuracy"], j["val_loss"], j["train_accuracy"], j.get("loss_scale"), j.get("skipped_steps")))
PY
    done
done
