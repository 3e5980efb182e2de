#!/usr/bin/env python3
"""Writes a CIFAR-10 folder of random images (data_batch_1..5.bin and test_batch.bin, RECORDS records
each, labels i mod 10) for runs that time training steps and need no real data: tools/gpu_check.sh's
ResNet-110 step on a GPU machine, where the dataset is not brought (its 160 MB would dwarf the bundle).
The records have the binary version's layout (1 label byte, 3072 pixel bytes), so `qtrain train`
loads them as CIFAR-10; the pixels are a fixed pseudo-random stream, the same on every machine.

Usage: synthetic_cifar.py OUT_DIR [--records N]   (default 1000: 15 MB in all)
"""
import argparse
import os
import random

RECORD_PIXELS = 3 * 32 * 32


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--records", type=int, default=1000)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(20261127)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        data = bytearray()
        for r in range(a.records):
            data.append(r % 10)
            data += rng.randbytes(RECORD_PIXELS)
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(data)
    print(f"synthetic_cifar: {a.out}: 6 files of {a.records} random records")


if __name__ == "__main__":
    main()
