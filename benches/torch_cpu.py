"""The PyTorch CPU anchor for convoy on a software adapter (BENCHMARKS.md, issue 15).

PyTorch (its CPU kernels: oneDNN convolutions, MKL/oneDNN matmuls) training on the same cores
as lavapipe, float32: resnet20 from ../shared/bench/torch_reference.py (the model convoy's
`bench --model resnet20` builds; synthetic 3x32x32 data) and the mlp of `convoy bench --model
mlp` (Flatten, Dense 256, ReLU, Dense 128, ReLU, Dense 10); SGD lr 0.05, Nesterov momentum
0.9, weight decay 5e-4, as convoy's bench. One thread per core, the best of five timed runs.

    pip install torch
    python3 benches/torch_cpu.py [--reference PATH] [MODEL:BATCH ...]   # default resnet20:64 mlp:256 mlp:128
"""
import importlib.util
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def load_reference(path):
    spec = importlib.util.spec_from_file_location("torch_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(3072, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def images_per_second(model, batch, steps, channels_last):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch, 3, 32, 32)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        best = min(best, (time.perf_counter() - t) / steps)
    return batch / best, best


def main():
    args = sys.argv[1:]
    reference = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "torch_reference.py")
    if "--reference" in args:
        i = args.index("--reference")
        reference = args[i + 1]
        del args[i : i + 2]
    torch.set_num_threads(os.cpu_count())
    models = {"mlp": mlp}
    models.update(load_reference(reference).MODELS)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for spec in args or ["resnet20:64", "mlp:256", "mlp:128"]:
        name, batch = spec.split(":")
        batch = int(batch)
        for channels_last in ([False, True] if name != "mlp" else [False]):
            torch.manual_seed(0)
            rate, seconds = images_per_second(models[name](), batch, 3 if name != "mlp" else 20, channels_last)
            layout = " channels_last" if channels_last else ""
            print(f"{name} batch {batch}{layout}: {rate:,.0f} images/s, {seconds * 1e3:.1f} ms/step")


if __name__ == "__main__":
    main()
