#!/usr/bin/env python3
"""What a correct f32 framework gets against float64 at the shapes `convoy check` uses.

PyTorch fp32 (cuDNN, TF32 off) runs one training step of a torchvision ResNet in train mode;
the same network in float64 then replays the f32 pass's ReLU masks and max-pool choices (as
convoy's reference takes the device's), so the two differ only by rounding. Printed with the
metrics `convoy check` uses: per gradient tensor the max-norm relative error, its scale
floored at 1% of the largest gradient of its module; per ReLU call the drift of the f32
pre-activations from f64 over the active units, relative to the call's RMS; and the
per-sample loss error. One JSON line per model.

    python3 torch_f64_check.py --model resnet50 --batch-size 32 --image-size 64
"""
import argparse
import copy
import json

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

GRAD_FLOOR = 1e-2


class Replay:
    """The f32 pass records each ReLU's input and each max pool's choice; the f64 pass
    takes the same decisions in the same call order and measures its drift."""

    def __init__(self):
        self.recording = True
        self.relu, self.pool, self.at = [], [], 0
        self.drift, self.drift_at = 0.0, None

    def rewind(self):
        self.recording, self.at = False, 0


class ReplayReLU(nn.Module):
    def __init__(self, log, name):
        super().__init__()
        self.log, self.name = log, name

    def forward(self, x):
        log = self.log
        if log.recording:
            log.relu.append(x.detach().clone())
            return F.relu(x)
        z32 = log.relu[log.at]
        log.at += 1
        active = z32 > 0
        rms = x.detach().pow(2).mean().sqrt().item()
        drift = ((z32.double() - x.detach()).abs() * active).max().item() / max(rms, 1e-300)
        if drift > log.drift:
            log.drift, log.drift_at = drift, f"{self.name} call {log.at - 1}"
        return x * active.to(x.dtype)


class ReplayMaxPool(nn.Module):
    def __init__(self, log, pool):
        super().__init__()
        self.log, self.k, self.s, self.p = log, pool.kernel_size, pool.stride, pool.padding

    def forward(self, x):
        if self.log.recording:
            y, idx = F.max_pool2d(x, self.k, self.s, self.p, return_indices=True)
            self.log.pool.append(idx)
            return y
        idx = self.log.pool.pop(0)
        return x.flatten(2).gather(2, idx.flatten(2)).view(idx.shape)


def instrument(model, log):
    for name, m in list(model.named_modules()):
        for child_name, child in list(m.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.ReLU):
                setattr(m, child_name, ReplayReLU(log, full))
            elif isinstance(child, nn.MaxPool2d):
                setattr(m, child_name, ReplayMaxPool(log, child))
    return model


def randomise_batchnorm(model, gen):
    # Fresh BatchNorm layers have gamma 1 and beta 0; convoy's check starts from trained-like
    # weights after its first step, so give them spread.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.weight.copy_(1.0 + 0.1 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))


def step(model, x, y):
    model.zero_grad(set_to_none=True)
    logits = model(x)
    losses = F.cross_entropy(logits, y, reduction="none")
    losses.mean().backward()
    return losses.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(a.seed)
    torch.manual_seed(a.seed)

    log = Replay()
    m32 = getattr(torchvision.models, a.model)(num_classes=a.classes)
    randomise_batchnorm(m32, gen)
    m64 = copy.deepcopy(m32).double()
    m32 = instrument(m32, log).to(a.device).train()
    m64 = instrument(m64, log).to(a.device).train()

    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=gen)
    y = torch.randint(0, a.classes, (a.batch_size,), generator=gen)
    l32 = step(m32, x.to(a.device), y.to(a.device))
    log.rewind()
    l64 = step(m64, x.double().to(a.device), y.to(a.device))

    worst, worst_at = 0.0, None
    modules64 = dict(m64.named_modules())
    for name, p32 in m32.named_parameters():
        module = name.rsplit(".", 1)[0]
        g64 = dict(m64.named_parameters())[name].grad
        largest = max(p.grad.abs().max().item() for p in modules64[module].parameters(recurse=False))
        scale = max(g64.abs().max().item(), GRAD_FLOOR * largest)
        err = (p32.grad.double() - g64).abs().max().item() / scale
        if err > worst:
            worst, worst_at = err, name
    loss_err = ((l32.double() - l64).abs().max() / l64.abs().max()).item()
    print(json.dumps({
        "framework": f"torch {torch.__version__} fp32 (TF32 off)",
        "device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
        "model": a.model, "batch_size": a.batch_size, "image_size": a.image_size,
        "max_grad_error": worst, "worst_tensor": worst_at,
        "max_loss_error": loss_err,
        "max_drift": log.drift, "worst_drift": log.drift_at,
        "relu_calls": len(log.relu),
    }))


if __name__ == "__main__":
    main()
