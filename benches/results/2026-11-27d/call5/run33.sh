#!/bin/bash
# Session 20, call 5: the BatchNorm path test again, its folded vec4 case grown to 16 channels
# (four rows of a quad an invocation left call 4's shape on a 1-D grid).
cd "$(dirname "$0")/.."
for f in .gl/*.deb; do dpkg -x $f / >/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
cd .gpu && unxz -f kernels.xz && chmod +x kernels && cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
CONVOY_TEST_DEVICE=0 timeout 200 .gpu/kernels paths::batchnorm batchnorm:: 2>&1 | grep -E "^test |test result|FAILED|panicked|worst|failures:" | tee $O/verify.txt
