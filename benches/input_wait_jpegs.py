"""Writes an image folder of photo-like JPEGs for benches/input_wait.sh:
DIR/train/<class>/*.jpg and DIR/val/<class>/*.jpg, about 500x375 (a fifth portrait, sizes
varying by some 10%), quality 90.

JPEG decode time depends on the content (how many DCT coefficients survive quantisation), so
the images are not flat colour: a smooth field of colour (sky, walls) blended with mid-scale
blobs and a fine blurred texture (grass, fabric), which gives files of roughly the size of
ImageNet's photos at the same dimensions.

usage: python3 input_wait_jpegs.py DIR [--classes 10] [--train 1024] [--val 50] [--workers N]
(--train and --val are images per class)
"""
import argparse
import os
import random
from multiprocessing import Pool

from PIL import Image, ImageFilter


def photo(seed):
    rnd = random.Random(seed)
    w, h = rnd.randint(450, 550), rnd.randint(340, 410)
    if rnd.random() < 0.2:
        w, h = h, w

    def noise(nw, nh):
        return Image.frombytes("RGB", (nw, nh), rnd.randbytes(nw * nh * 3))

    base = noise(rnd.randint(3, 8), rnd.randint(3, 6)).resize((w, h), Image.BICUBIC)
    blobs = noise(w // 12, h // 12).resize((w, h), Image.BICUBIC).filter(ImageFilter.GaussianBlur(3))
    # Photos carry their fine detail in brightness rather than colour: the texture is grey.
    grey = Image.frombytes("L", (w, h), rnd.randbytes(w * h))
    texture = grey.filter(ImageFilter.GaussianBlur(rnd.uniform(0.5, 0.9))).convert("RGB")
    img = Image.blend(base, blobs, 0.35)
    return Image.blend(img, texture, rnd.uniform(0.25, 0.4))


def write(job):
    path, seed = job
    photo(seed).save(path, "JPEG", quality=90)
    return os.path.getsize(path)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train", type=int, default=1024)
    p.add_argument("--val", type=int, default=50)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    a = p.parse_args()
    paths = []
    for split, count in (("train", a.train), ("val", a.val)):
        for c in range(a.classes):
            d = os.path.join(a.dir, split, "class%02d" % c)
            os.makedirs(d, exist_ok=True)
            paths += [os.path.join(d, "%05d.jpg" % k) for k in range(count)]
    # Seeded by position, so that every run writes the same files.
    jobs = [(path, seed) for seed, path in enumerate(paths)]
    with Pool(a.workers) as pool:
        sizes = pool.map(write, jobs, chunksize=16)
    print("wrote %d JPEGs to %s, %.0f KB each on average" % (len(sizes), a.dir, sum(sizes) / len(sizes) / 1024))


if __name__ == "__main__":
    main()
