"""Where PyTorch's training step goes: torchvision ResNet-18 / ResNet-50 at 224 px in bf16
autocast + channels_last (torch_imagenet.py's bf16cl mode), under torch.profiler. Prints the
GPU time a step of each kind of kernel (convolutions forward / input / weight gradients,
BatchNorm, elementwise, the rest) and each convolution's forward and backward by its input
shape, so that convoy's `bench --profile --dispatches` has a per-product counterpart.

Usage: python3 torch_profile.py [--model resnet18|resnet50|all] [--steps N] [--json PATH]"""
import json
import sys
from collections import defaultdict

import torch
import torch.nn as nn
import torchvision
from torch.profiler import ProfilerActivity, profile


def device_us(event, own):
    # The attribute's name moved from cuda to device in PyTorch 2.4.
    for name in (("self_device_time_total", "self_cuda_time_total") if own
                 else ("device_time_total", "cuda_time_total")):
        if hasattr(event, name):
            return getattr(event, name)
    return 0.0


def kind(kernel):
    k = kernel.lower()
    # cuDNN's kernels: sm90_xmma_{fprop,dgrad,wgrad}_implicit_gemm_*, cutlass *fprop* ones,
    # the NHWC padding and the weight gradients' workspace initialisation around them.
    if any(w in k for w in ("fprop", "dgrad", "wgrad", "conv", "implicit_gemm", "nhwcaddpadding", "init_device_workspace")):
        return "convolution"
    if "batch_norm" in k or "bn_" in k or "batchnorm" in k:
        return "batchnorm"
    if "gemm" in k or "cutlass" in k:
        return "gemm"
    if "elementwise" in k or "vectorized" in k or "reduce" in k:
        return "elementwise/reduce"
    if "pool" in k:
        return "pool"
    return "other"


def run(name, batch, steps):
    dev = torch.device("cuda:0")
    torch.backends.cudnn.benchmark = True
    m = getattr(torchvision.models, name)(num_classes=1000).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=dev)
    lossf = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = lossf(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(8):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kinds = defaultdict(float)
    kernels = []
    for e in prof.key_averages():
        if "CUDA" in str(e.device_type):
            us = device_us(e, True) / steps
            kinds[kind(e.key)] += us
            kernels.append((us, e.count // steps, e.key[:110]))
    convs = []
    for e in prof.key_averages(group_by_input_shape=True):
        if e.key in ("aten::cudnn_convolution", "aten::convolution_backward"):
            convs.append((e.key, str(e.input_shapes[:2]), e.count // steps, device_us(e, False) / steps))
    total = sum(kinds.values())
    print(f"{name} b{batch} bf16cl: kernels {total / 1000:.3f} ms a step")
    for k, us in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {k:20s} {us / 1000:8.3f} ms  {100 * us / total:5.1f}%")
    print("  top kernels (ms a step, launches a step):")
    for us, n, key in sorted(kernels, reverse=True)[:25]:
        print(f"    {us / 1000:8.3f} {n:4d}  {key}")
    print("  convolutions by input shape (ms a step, calls a step):")
    for key, shapes, n, us in sorted(convs, key=lambda c: -c[3]):
        print(f"    {us / 1000:8.3f} {n:3d}  {key:28s} {shapes}")
    return {"kernels_ms": total / 1000, "kinds_ms": {k: v / 1000 for k, v in kinds.items()},
            "convolutions": [{"op": k, "shapes": s, "calls": n, "ms": us / 1000} for k, s, n, us in convs]}


def main(argv):
    model = argv[argv.index("--model") + 1] if "--model" in argv else "all"
    steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 5
    out = {}
    for name, batch in [("resnet18", 256), ("resnet50", 128)]:
        if model in (name, "all"):
            out[name] = run(name, batch, steps)
    if "--json" in argv:
        json.dump(out, open(argv[argv.index("--json") + 1], "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
