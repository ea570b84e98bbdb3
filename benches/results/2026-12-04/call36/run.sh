#!/bin/bash
# Session 49, call 36: the coopmat2 probe with its diagnostics, small sizes first (a fault there
# says the module or the configuration is wrong), then 4096^3 on the largest workgroups.
source benches/device.sh
p() { echo "== coop2_probe $*" | tee -a $O/verify.txt; timeout 60 .gpu/coop2_probe "$@" 2>&1 | grep -v "^flexible" | tee -a $O/verify.txt; echo "rc=${PIPESTATUS[0]} $(elapsed) s" | tee -a $O/verify.txt; }
p --size 256 --reps 1 --invocations 256 --tile 128x128x32
p --size 256 --reps 1 --invocations 256 --tile 64x64x16
p --size 256 --reps 1 --invocations 32 --tile 32x32x16
p --size 256 --reps 1 --invocations 128 --tile 64x64x32
p --size 4096 --reps 10 --invocations 256
p --size 4096 --reps 10 --invocations 128
finish
