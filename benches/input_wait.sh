#!/bin/bash
# How long training waits for decoded images: ResNet-50 at 224 px from a folder of JPEGs and
# from the same images packed (convoy pack), one line each with images/s and the share of
# the step time spent waiting for input. Run on the GPU machine from the repository root:
#
#   bash benches/input_wait.sh [DEVICES]        # DEVICES: 0 (default), 0,0 (two replicas on GPU 0), 0,1, ...
#
# Prepare here as for benches/gpu_bench.sh (cargo build --release && mkdir -p .gpu &&
# cp target/release/convoy .gpu/; the Vulkan loader .debs in .gl/); carry .gl and .gpu.
# Writes to $OUT: input_wait_folder.json and input_wait_packed.json (convoy train --json of
# each run) and input_wait_pack.json (convoy pack --json).
#
# The environment overrides the defaults, for a dry run at a tiny size on any adapter:
# CONVOY (.gpu/convoy), MODEL (resnet50), SIZE (224), BATCH (256), EPOCHS (1), CLASSES (10),
# TRAIN (1024 images a class: 40 steps of 256), VAL (50 a class), DATA (/tmp/input_wait_jpegs).
# The figures are the last epoch's; with EPOCHS=1 that epoch also compiles the pipelines and
# fills the loader's first batches, so EPOCHS=2 (on half the images) measures steady state.
set -u
OUT=${OUT:-.}
DEVICES=${1:-0}
CONVOY=${CONVOY:-.gpu/convoy} MODEL=${MODEL:-resnet50} SIZE=${SIZE:-224} BATCH=${BATCH:-256} EPOCHS=${EPOCHS:-1}
CLASSES=${CLASSES:-10} TRAIN=${TRAIN:-1024} VAL=${VAL:-50} DATA=${DATA:-/tmp/input_wait_jpegs}
PACK=/tmp/input_wait.pack
# Validation resizes to floor(S x 256/224) before its centre crop (256 for 224): pack at that.
PACK_SIZE=$((SIZE * 256 / 224))
if [ -d .gl ]; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}
command -v nvidia-smi > /dev/null && nvidia-smi -L

rm -rf "$DATA" "$PACK"
started=$(date +%s)
python3 "$(dirname "$0")/input_wait_jpegs.py" "$DATA" --classes "$CLASSES" --train "$TRAIN" --val "$VAL" || exit 1
echo "JPEGs written in $(($(date +%s) - started)) s"

# One `convoy train --json` run from data spec $1, its JSON to $OUT/$2 and a line of figures.
# Exit 3 (the loss diverged) still measured the input pipeline, so its JSON is reported too.
train() {
    local spec=$1 out=$OUT/$2 log=/tmp/input_wait_train.log
    timeout 500 "$CONVOY" train --model "$MODEL" --image-size "$SIZE" --data "$spec" --batch-size "$BATCH" \
        --epochs "$EPOCHS" --devices "$DEVICES" --json > /tmp/input_wait_train.out 2> "$log"
    local rc=$?   # 124: past the timeout
    tail -1 /tmp/input_wait_train.out > "$out"
    if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
        echo "$spec: convoy train failed (exit $rc):"; tail -5 "$log"; return 1
    fi
    python3 - "$out" "$spec" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = sum(d["samples"] for d in j["devices"])
print("%-8s %s: %.0f images/s, input_wait %.1f%%, compute %.1f%%, exchange %.1f%% (%d samples on %d replicas, %.1f s)"
      % (sys.argv[2].split(":")[0], j["model"], j["images_per_sec"], 100 * j["input_wait"], 100 * j["compute"],
         100 * j["exchange"], n, len(j["devices"]), j["seconds"]))
PY
}

train "folder:$DATA" input_wait_folder.json
"$CONVOY" pack --data "folder:$DATA" --image-size "$PACK_SIZE" --out "$PACK" --json 2> /tmp/input_wait_pack.log | tail -1 > "$OUT/input_wait_pack.json"
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    echo "convoy pack failed:"; tail -5 /tmp/input_wait_pack.log; exit 1
fi
python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print('packed %d + %d images at %d px: %.1f MB in %.1f s' % (j['train'], j['val'], j['image_size'], j['bytes'] / 1e6, j['seconds']))" "$OUT/input_wait_pack.json"
train "packed:$PACK" input_wait_packed.json
