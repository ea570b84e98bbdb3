#!/usr/bin/env python3
"""The scaling model of BENCHMARKS.md (issue 16): predicted efficiency of M machines of 8 GPUs,
from measured pieces, against 8M GPUs each at its one-GPU speed.

    python3 benches/mpi_scaling_model.py [mpi_allreduce.json]

Pieces (each measured, or the extrapolation named):
- one GPU's step at 256 a GPU (ResNet-50: 128), H100, BENCHMARKS.md session 8/12;
- the local efficiency of 8 GPUs in one machine: the measured 2-GPU figure (session 12) less
  1.3 points per further doubling (2 -> 4 GPUs cost 1.2-1.3 points in session 3): an
  extrapolation, eight GPUs were never lent;
- the gradient bytes (parameters x 4) in buckets of 8 MB (at least 4), produced evenly over the backward,
  which is taken as 2/3 of the step (the share of session 4's profiles);
- the host stage the MPI path adds (gathering a bucket's host sum and writing the global one
  into each replica's upload slot): the host sum's 73 GB/s of session 3 on 8 threads;
- the sum across machines, one bucket at a time (the MPI thread): a ring all-reduce,
  2(M-1)/M x bytes / (link x 0.8) + 2(M-1) x latency, the latency the 4 KB all-reduce
  measured over loopback (examples/mpi_allreduce.rs, mpi_allreduce.json) plus 5 us of wire.
The exposed time is what the last bucket's sum runs past the end of the backward.
"""
import json
import math
import sys

MODELS = [
    # name, parameters, one-GPU images/s, batch per GPU, measured 2-GPU efficiency
    ("resnet20", 272_474, 35_692, 256, 0.957),
    ("resnet18_cifar", 11_173_962, 8_296, 256, 0.945),
    ("resnet18 @224", 11_689_512, 2_622, 256, 0.945),
    ("ResNet-50 @224", 25_557_032, 1_036, 128, 0.972),
]
LINKS_GBPS = [25, 100, 400]
MACHINES = [2, 4, 16]
BUCKET = 8 << 20
HOST_GBS = 73e9
LINK_EFFICIENCY = 0.8


def latency(path):
    if path is None:
        return 30e-6
    for line in open(path):
        j = json.loads(line)
        if j["bytes"] == 4096:
            return j["ms"] * 1e-3 + 5e-6
    return 30e-6


def efficiency(params, ips, batch, eff2, machines, gbps, alpha):
    step1 = batch / ips
    eff8 = eff2 - 2 * 0.013
    step8 = step1 / eff8
    size = params * 4
    # The replicas cut at layer boundaries: even resnet20 has four buckets.
    k = max(4, math.ceil(size / BUCKET))
    backward = 2 / 3 * step1
    link = gbps / 8 * 1e9 * LINK_EFFICIENCY
    done = 0.0
    for i in range(k):
        b = size / k
        ready = step8 - backward + (i + 1) / k * backward + b / HOST_GBS
        ring = 2 * (machines - 1) / machines * b / link + 2 * (machines - 1) * alpha
        done = max(done, ready) + ring
    exposed = max(0.0, done - step8)
    return eff8 * step8 / (step8 + exposed), eff8, exposed


def main():
    alpha = latency(sys.argv[1] if len(sys.argv) > 1 else None)
    print(f"latency per ring step: {alpha * 1e6:.1f} us")
    print("| model | gradient MB | 8 GPUs, one machine | " + " | ".join(f"{m} x 8 at {g} Gb/s" for g in LINKS_GBPS for m in MACHINES) + " |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in LINKS_GBPS for _ in MACHINES) + " |")
    for name, params, ips, batch, eff2 in MODELS:
        cells = []
        for g in LINKS_GBPS:
            for m in MACHINES:
                e, eff8, _ = efficiency(params, ips, batch, eff2, m, g, alpha)
                cells.append(f"{e * 100:.0f}%")
        print(f"| {name} | {params * 4 / 1e6:.1f} | {eff8 * 100:.1f}% | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
