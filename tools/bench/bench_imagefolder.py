#!/usr/bin/python3
"""The imagefolder input pipeline against a PIL peer, measured in the same run.

Writes a JPEG tree of ImageNet-sized images (500x375, quality 90, smooth content plus noise) into a
temporary folder, then times, over the same files and the same transforms:
  - qtrain: `build/qtrain bench-data` on the training split (decode with libjpeg-turbo, random resized
    crop to 224, flip, normalize into CHW floats) with data.workers = 1 and = 2;
  - the peer: what torchvision's RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize do
    on PIL images (PIL open/convert, crop, BILINEAR resize, flip, numpy normalization), one process.
torchvision itself is not installed here; the peer performs the same PIL calls it would.

Usage: tools/bench/bench_imagefolder.py [--images 256] [--batches 8] [--batch-size 32]
"""
import argparse
import math
import os
import random
import re
import subprocess
import tempfile
import time

import numpy as np
from PIL import Image

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def write_tree(root, images, classes=4):
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:375, 0:500].astype(np.float32)
    for i in range(images):
        c = i % classes
        folder = os.path.join(root, "train", f"class{c}")
        os.makedirs(folder, exist_ok=True)
        base = np.stack([128 + 100 * np.sin(xx / (20 + 7 * k + i) + yy / (31 + k)) for k in range(3)], axis=-1)
        pixels = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(os.path.join(folder, f"img{i:05d}.JPEG"), quality=90)
    os.makedirs(os.path.join(root, "val", "class0"), exist_ok=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(os.path.join(root, "val", "class0", "v.JPEG"))


def rrc_params(rng, height, width, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision.transforms.RandomResizedCrop.get_params."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, height - h), rng.randint(0, width - w), h, w
    return 0, 0, height, width


def peer(files, batches, batch_size):
    rng = random.Random(1)
    order = list(range(len(files)))
    samples = 0
    start = None
    for b in range(batches + 1):  # batch 0 is the warm-up, as in bench-data
        if b == 1:
            start = time.perf_counter()
        out = np.empty((batch_size, 3, 224, 224), np.float32)
        for r in range(batch_size):
            img = Image.open(files[order[(b * batch_size + r) % len(files)]]).convert("RGB")
            i, j, h, w = rrc_params(rng, img.height, img.width)
            img = img.crop((j, i, j + w, i + h)).resize((224, 224), Image.BILINEAR)
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
            x = np.asarray(img, np.float32).transpose(2, 0, 1) / 255.0
            out[r] = (x - MEAN) / STD
        samples += batch_size if b > 0 else 0
    return samples / (time.perf_counter() - start)


def qtrain(root, config, workers, batches, batch_size):
    out = subprocess.run(
        ["build/qtrain", "bench-data", config, "--batches", str(batches), "--set", f"data.path={root}",
         "--set", f"data.workers={workers}", "--set", f"data.batch_size={batch_size}"],
        check=True, capture_output=True, text=True).stdout
    return float(re.search(r"([0-9.]+) samples/s", out).group(1)), out.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        write_tree(root, a.images)
        config = os.path.join(root, "bench.yaml")
        with open(config, "w") as f:
            f.write("data: {dataset: imagefolder, path: x, prefetch: 2, "
                    "augment: {random_resized_crop: true, horizontal_flip: true}}\n")
        files = sorted(os.path.join(dp, n) for dp, _, ns in os.walk(os.path.join(root, "train")) for n in ns)
        results = {"qtrain workers=1": [], "qtrain workers=2": [], "PIL peer (1 process)": []}
        for _ in range(a.repeat):  # alternate the programs so that machine noise hits all of them
            for workers in (1, 2):
                rate, line = qtrain(root, config, workers, a.batches, a.batch_size)
                results[f"qtrain workers={workers}"].append(rate)
                print(line)
            results["PIL peer (1 process)"].append(peer(files, a.batches, a.batch_size))
        print(f"\n{a.images} JPEGs of 500x375, {a.batches} batches of {a.batch_size}, median of {a.repeat}:")
        peer_rate = float(np.median(results["PIL peer (1 process)"]))
        for name, rates in results.items():
            med = float(np.median(rates))
            print(f"| {name} | {med:.1f} samples/s | {med / peer_rate:.2f}x | {', '.join(f'{r:.1f}' for r in rates)} |")


if __name__ == "__main__":
    main()
