"""Writes an image folder of a ten-class shapes task for benches/mixed_accuracy.sh:
DIR/train/<class>/*.png and DIR/val/<class>/*.png, 32x32 RGB.

Each image is one outline or filled shape (the class) of random size, position, thickness
and colours on a noisy gradient background, with a thin distractor line: a task a small
ResNet learns to the high nineties in a few epochs but not at once, so that a difference
between two precisions' validation accuracies shows rather than both sitting at 100%.

usage: python3 shapes_folder.py DIR [--train 1000] [--val 200] [--seed 0]
(--train and --val are images per class)
"""
import argparse
import math
import os
import random
from multiprocessing import Pool

from PIL import Image, ImageDraw, ImageFilter

CLASSES = ["circle", "square", "triangle", "cross", "ring", "hbar", "vbar", "diagonal", "dots", "star"]
SIZE = 32
SCALE = 4  # drawn at 4x and downsampled, for anti-aliased edges


def colour(rnd, avoid=None):
    while True:
        c = tuple(rnd.randint(0, 255) for _ in range(3))
        if avoid is None or sum(abs(a - b) for a, b in zip(c, avoid)) > 180:
            return c


def draw(cls, rnd):
    s = SIZE * SCALE
    bg0, bg1 = colour(rnd), colour(rnd)
    img = Image.new("RGB", (s, s))
    px = ImageDraw.Draw(img)
    for y in range(0, s, SCALE):
        t = y / s
        px.rectangle([0, y, s, y + SCALE], fill=tuple(int(a * (1 - t) + b * t) for a, b in zip(bg0, bg1)))
    d = ImageDraw.Draw(img)
    fg = colour(rnd, avoid=bg0)
    # A distractor: a thin line of another colour anywhere.
    d.line([rnd.randint(0, s), rnd.randint(0, s), rnd.randint(0, s), rnd.randint(0, s)], fill=colour(rnd), width=SCALE)
    r = rnd.uniform(0.18, 0.34) * s
    cx, cy = rnd.uniform(r, s - r), rnd.uniform(r, s - r)
    w = int(rnd.uniform(0.08, 0.16) * s)
    a = rnd.uniform(-0.3, 0.3)  # rotation jitter, radians
    if cls == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fg)
    elif cls == "ring":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], outline=fg, width=w)
    elif cls in ("square", "triangle", "star"):
        n = {"square": 4, "triangle": 3, "star": 10}[cls]
        pts = []
        for i in range(n):
            rr = r * (0.45 if cls == "star" and i % 2 else 1.0)
            t = a + 2 * math.pi * i / n + (math.pi / 4 if cls == "square" else 0)
            pts.append((cx + rr * math.cos(t), cy + rr * math.sin(t)))
        d.polygon(pts, fill=fg)
    elif cls == "cross":
        for t in (a, a + math.pi / 2):
            d.line([cx - r * math.cos(t), cy - r * math.sin(t), cx + r * math.cos(t), cy + r * math.sin(t)], fill=fg, width=w)
    elif cls in ("hbar", "vbar", "diagonal"):
        t = a + {"hbar": 0.0, "vbar": math.pi / 2, "diagonal": math.pi / 4 * rnd.choice([1, 3])}[cls]
        d.line([cx - r * math.cos(t), cy - r * math.sin(t), cx + r * math.cos(t), cy + r * math.sin(t)], fill=fg, width=w)
    elif cls == "dots":
        for sgn in (-1, 1):
            ox, oy = sgn * r * 0.6 * math.cos(a), sgn * r * 0.6 * math.sin(a)
            d.ellipse([cx + ox - r * 0.3, cy + oy - r * 0.3, cx + ox + r * 0.3, cy + oy + r * 0.3], fill=fg)
    img = img.resize((SIZE, SIZE), Image.BILINEAR)
    noise = Image.frombytes("RGB", (SIZE, SIZE), rnd.randbytes(SIZE * SIZE * 3))
    return Image.blend(img, noise, rnd.uniform(0.1, 0.3))


def write(job):
    path, cls, seed = job
    draw(cls, random.Random(seed)).save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--train", type=int, default=1000)
    ap.add_argument("--val", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    jobs = []
    for split, count in (("train", a.train), ("val", a.val)):
        for ci, cls in enumerate(CLASSES):
            os.makedirs(os.path.join(a.dir, split, cls), exist_ok=True)
            for i in range(count):
                seed = ((a.seed * 2 + (split == "val")) * len(CLASSES) + ci) * 1_000_000 + i
                jobs.append((os.path.join(a.dir, split, cls, f"{i:05d}.png"), cls, seed))
    with Pool() as p:
        p.map(write, jobs, chunksize=64)
    print(f"{len(jobs)} images in {a.dir}")


if __name__ == "__main__":
    main()
