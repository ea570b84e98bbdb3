"""Issue 21 on the GPU machine: torchvision models with random weights and randomised BatchNorm
statistics, saved as safetensors, imported by convoy; convoy's class probabilities for a fixed u8
batch against PyTorch's (TF32 off); the export back into PyTorch."""
import json, os, subprocess, sys  # noqa
import numpy as np, torch, torchvision
from PIL import Image
sys.path.insert(0, "tests/fixtures/torchvision")
from make_fixture import save

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
OUT = os.environ["OUT"]
C = ".gpu/convoy"
MEAN = np.array([0.485, 0.456, 0.406]); STD = np.array([0.229, 0.224, 0.225])
rng = np.random.default_rng(21)
img_dir = "/tmp/i21_images"; os.makedirs(img_dir, exist_ok=True)
images = rng.integers(0, 256, (6, 256, 256, 3), dtype=np.uint8)
names = []
for i, im in enumerate(images):
    p = f"{img_dir}/img{i}.png"; Image.fromarray(im).save(p); names.append(p)
x = ((images[:, 16:240, 16:240, :] / 255.0 - MEAN) / STD).transpose(0, 3, 1, 2)
xt = torch.tensor(x, dtype=torch.float32).cuda()

def probs_torch(m):
    with torch.no_grad():
        return torch.softmax(m(xt).double(), 1).cpu().numpy()

def load_file(path):
    """safetensors.torch.load_file, for machines without the package (F32 and I64 only)."""
    import struct
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); body = raw[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[v["dtype"]]
        out[k] = torch.tensor(np.frombuffer(body[a:b], dtype=dt).reshape(v["shape"]).copy()).cuda()
    return out

def convoy(*args):
    r = subprocess.run([C, *args], capture_output=True, text=True)
    if r.returncode != 0:
        print("convoy", args[0], "failed:", r.stderr.strip()[-500:]); sys.exit(1)
    return r.stdout

results = {}
for name in ["resnet18", "resnet50", "mobilenet_v2"]:
    torch.manual_seed(0)
    m = getattr(torchvision.models, name)(weights=None).cuda().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.BatchNorm2d):
                c = mod.num_features
                mod.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.5)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
        fc = m.fc if hasattr(m, "fc") else m.classifier[1]
        logits = m(xt)
        fc.weight.mul_(2.0 / logits.std())  # moderate logits: probabilities not one-hot
    sd = {k: ("I64" if v.dtype == torch.int64 else "F32", v.detach().cpu().numpy()) for k, v in m.state_dict().items()}
    src = f"/tmp/{name}_tv.safetensors"; save(src, sd)
    want = probs_torch(m)
    convoy("import", "--from", "torchvision", "--model", name, src, "--out", f"/tmp/{name}.safetensors")
    pred = json.loads(convoy("predict", "--load", f"/tmp/{name}.safetensors", "--data", f"images:{img_dir}", "--devices", "0", "--json", "--scores"))
    by_file = {os.path.basename(p["file"]): p["scores"] for p in pred["predictions"]}
    got = np.array([by_file[os.path.basename(n)] for n in names], dtype=np.float64)
    err = np.abs(got - want).max() / np.abs(want).max()
    # The way back: export, load into a fresh torchvision model (strict=False), same outputs.
    convoy("export", "--load", f"/tmp/{name}.safetensors", "--to", "torchvision", "--out", f"/tmp/{name}_back.safetensors")
    back = getattr(torchvision.models, name)(weights=None).cuda().eval()
    missing, unexpected = back.load_state_dict(load_file(f"/tmp/{name}_back.safetensors"), strict=False)
    same = all(torch.equal(back.state_dict()[k].cpu(), v.cpu()) for k, v in m.state_dict().items() if "num_batches" not in k)
    err_back = np.abs(probs_torch(back) - want).max() / np.abs(want).max()
    results[name] = {"rel_err_probs": err, "max_prob": float(want.max()), "argmax_agree": int((got.argmax(1) == want.argmax(1)).sum()),
                     "export_missing": [k for k in missing if "num_batches" not in k], "export_unexpected": list(unexpected),
                     "export_bitwise_equal": same, "export_rel_err": err_back}
    print(name, json.dumps(results[name]))
json.dump(results, open(f"{OUT}/i21.json", "w"), indent=1)
