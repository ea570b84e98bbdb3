#!/bin/bash
# Session 46, call 4 (call21): the weight gradients into 256 columns or more at K 32 (494e86e), with what
# device time was left: the tensor-core tests (their pipelines logged for tests/fixtures/coop_pipelines.jsonl),
# convoy check under mixed_float16, resnet50 and resnet18 @224, then PyTorch's ImageNet script if time is left.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O/plog
cat .gpu/HEAD_BUILT > $O/verify.txt
nvidia-smi --query-gpu=name,pci.bus_id,serial,driver_version --format=csv,noheader | tee -a $O/verify.txt
S=$(date +%s); B=${BUDGET:-290}
left() { echo $(( B - ($(date +%s) - S) )); }
CONVOY_PIPELINE_LOG=$O/plog CONVOY_TEST_DEVICE=0 timeout 150 .gpu/kernels coop:: > $O/kernels_coop.txt 2>&1; echo "kernels coop rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; grep "^test \|test result\|panicked" $O/kernels_coop.txt | cut -c1-300 | head -10 | tee -a $O/verify.txt
[ $(left) -gt 60 ] && { timeout $(( $(left) - 10 )) .gpu/convoy check --devices 0 --model all --batch-size 24 --precision mixed > $O/check_mixed.txt 2>&1; echo "check mixed rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -1 $O/check_mixed.txt | tee -a $O/verify.txt; }
bench() { timeout 30 .gpu/$1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
[ $(left) -gt 20 ] && bench convoy resnet50 224 128 1000 12 r50_1
[ $(left) -gt 20 ] && bench convoy resnet18 224 256 1000 12 r18_1
[ $(left) -gt 100 ] && { timeout $(( $(left) - 10 )) python3 .gpu/torch_imagenet.py --json $O/torch_imagenet.json > $O/torch_imagenet.txt 2>&1; echo "torch_imagenet rc=$? $(( $(date +%s) - S )) s" | tee -a $O/verify.txt; tail -6 $O/torch_imagenet.txt | tee -a $O/verify.txt; }
[ $(left) -gt 20 ] && bench convoy resnet50 224 128 1000 12 r50_2
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
