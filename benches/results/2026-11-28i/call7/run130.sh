#!/bin/bash
# Session 34, call 7: against 674de60 (h), bp (BatchNorm's backward first pass issuing the next four rows' loads before this step's sums) and
# pc (max pool's runs of quads strided by the pixel's lanes, each load contiguous across them), alternating; the GPU kernel suite on both.
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && for f in *.xz; do unxz -kf $f; chmod +x ${f%.xz}; done && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
timeout 30 .gpu/convoy_h bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 30 --no-scaling --precision mixed > /dev/null 2>&1
nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv | tee -a $O/verify.txt
bench() { timeout 40 $1 bench --model $2 --image-size $3 --batch-size $4 --classes $5 --devices 0 --steps $6 --no-scaling --precision mixed --json 2>/dev/null | tail -1 > $O/$7.json; python3 -c "import json; j=json.load(open('$O/$7.json')); print('$7', round(j['images_per_sec']), round(j['step_ms'],3))" | tee -a $O/verify.txt; }
for r in 1 2; do
  for v in h bp pc; do
    bench .gpu/convoy_$v resnet50 224 128 1000 12 r50_${v}_$r
    bench .gpu/convoy_$v resnet18 224 256 1000 12 r18_${v}_$r
    [ $v = pc ] || bench .gpu/convoy_$v resnet18_cifar 32 256 10 40 r18c_${v}_$r
  done
done
for v in bp; do timeout 40 .gpu/convoy_$v bench --model resnet50 --image-size 224 --batch-size 128 --classes 1000 --devices 0 --steps 8 --no-scaling --precision mixed --profile > $O/profile_r50_$v.txt 2>&1; grep "^batchnorm" $O/profile_r50_$v.txt | sed "s/^/$v /" | tee -a $O/verify.txt; done
timeout 40 .gpu/convoy_pc bench --model resnet18 --image-size 224 --batch-size 256 --classes 1000 --devices 0 --steps 8 --no-scaling --precision mixed --profile --dispatches > $O/profile_r18_pc.txt 2>&1; grep "max_pool" $O/profile_r18_pc.txt | cut -c1-110 | tee -a $O/verify.txt
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels_bppc > $O/kernels.txt 2>&1; echo "kernels rc=$?" | tee -a $O/verify.txt; grep "test result\|FAILED\|panicked" $O/kernels.txt | head -8 | tee -a $O/verify.txt
cd $O && cp verify.txt /tmp/verify.txt && tar czf /tmp/call.tgz . && find . -mindepth 1 -delete && mv /tmp/call.tgz . && mv /tmp/verify.txt .
