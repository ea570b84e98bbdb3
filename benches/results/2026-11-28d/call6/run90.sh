#!/bin/bash
# Session 28: issue 13's accuracy criterion after the split-K order changes (653c901): SEEDS="1 2 3" bash benches/mixed_accuracy.sh.
cd "$(dirname "$0")/.."
cd .gpu && unxz -f convoy.xz; chmod +x convoy; cd ..
O=${OUT:-/tmp/out}; mkdir -p $O
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee $O/verify.txt
SEEDS="1 2 3" OUT=$O timeout 340 bash benches/mixed_accuracy.sh 2>&1 | tee -a $O/verify.txt
