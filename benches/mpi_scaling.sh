#!/bin/bash
# Issue 16's GPU rows, run on a machine with two GPUs from the repository root: for resnet20
# and resnet18_cifar (batch 256 per GPU, synthetic 32 px data), `convoy train` on one GPU, on
# both GPUs in one process (--devices 0,1: the host all-reduce alone), and under
# `mpirun -np 2` with one GPU per rank (MPMD: rank 0 --devices 0, rank 1 --devices 1: the host
# stage of one replica, then MPI_Iallreduce between the two processes). Prints each run's
# JSON line, then one summary line per model with images/s and the efficiency of each
# two-GPU form against twice the one-GPU figure; also the MPI sum's bandwidth between the
# two processes (examples/mpi_allreduce.rs).
#
# Prepare (a build machine with the network; design.md: GPU runs carry the OpenMPI .debs like
# the Vulkan loaders):
#   cargo build --release --features mpi --bin convoy --example mpi_allreduce
#   cp target/release/convoy .gpu/convoy-mpi; cp target/release/examples/mpi_allreduce .gpu/
#   mkdir -p .mpi && (cd .mpi && apt-get download openmpi-bin openmpi-common libopenmpi3 \
#       libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2 libfabric1 libpsm2-2 \
#       libpsm-infinipath1 libucx0 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libxnvctrl0)
# Each model's three runs take about three minutes; keep one call to one model if the
# device limit (600 s a command) is near: MODELS=resnet20 bash benches/mpi_scaling.sh
set -u
OUT=${OUT:-.}
MODELS=${MODELS:-resnet20 resnet18_cifar}
for f in .gl/*.deb .mpi/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json XDG_RUNTIME_DIR=/tmp
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The two ranks of one box talk through shared memory (vader), as the GPU rows measure.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
# The GPU machine's own PMIx has no `preg` components (mpirun then crashes in
# pmix_preg_base_generate_ppn): name the built-in one.
export PMIX_MCA_gds=hash PMIX_MCA_preg=native
BIN=${BIN:-.gpu/convoy-mpi}
nvidia-smi -L
timeout 60 mpirun --oversubscribe -np 2 .gpu/mpi_allreduce 2>/dev/null | tee "$OUT/mpi_allreduce.json"
for m in $MODELS; do
    case $m in
        resnet20) data=synthetic:131072,4096 epochs=3 ;;
        *) data=synthetic:32768,2048 epochs=3 ;;
    esac
    common=(train --model "$m" --data "$data" --epochs "$epochs" --json)
    timeout 200 "$BIN" "${common[@]}" --devices 0 --batch-size 256 2>/dev/null | tail -1 > "$OUT/mpi_${m}_1gpu.json"
    timeout 200 "$BIN" "${common[@]}" --devices 0,1 --batch-size 512 2>/dev/null | tail -1 > "$OUT/mpi_${m}_1proc_2gpu.json"
    timeout 200 mpirun -np 1 "$BIN" "${common[@]}" --devices 0 --batch-size 512 : -np 1 "$BIN" "${common[@]}" --devices 1 --batch-size 512 \
        2>"$OUT/mpi_${m}_2ranks.err" | tail -1 > "$OUT/mpi_${m}_2ranks.json"
    cat "$OUT/mpi_${m}_1gpu.json" "$OUT/mpi_${m}_1proc_2gpu.json" "$OUT/mpi_${m}_2ranks.json"
    python3 - "$m" "$OUT/mpi_${m}_1gpu.json" "$OUT/mpi_${m}_1proc_2gpu.json" "$OUT/mpi_${m}_2ranks.json" <<'PY'
import json, sys
def ips(p):
    try:
        return json.load(open(p))["images_per_sec"]
    except Exception:
        return None
one, proc, ranks = (ips(p) for p in sys.argv[2:5])
eff = lambda x: round(x / (2 * one), 4) if x and one else None
print(json.dumps({"model": sys.argv[1], "one_gpu": one, "one_process_two_gpus": proc, "two_ranks_one_gpu_each": ranks,
                  "efficiency_one_process": eff(proc), "efficiency_two_ranks": eff(ranks)}))
PY
done
