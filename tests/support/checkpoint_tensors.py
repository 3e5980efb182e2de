#!/usr/bin/python3
"""Prints one line per tensor of the checkpoint files in a run directory (or of the files given):
`file step N tensor sha256-prefix`, sorted (N: the step the file was written at). Two runs whose lines are equal hold bit-identical parameters,
optimizer state and per-rank residuals; the header's metadata (wall-clock times, paths) is left out.
Used by the e2e scripts that compare a resumed or disturbed run with an uninterrupted one.

  tests/support/checkpoint_tensors.py RUN_DIR | FILE...
"""
import glob
import hashlib
import json
import os
import struct
import sys


def files(args):
    for a in args:
        if os.path.isdir(a):
            yield from sorted(glob.glob(os.path.join(a, "checkpoint*.safetensors")))
        else:
            yield a


def main():
    for f in files(sys.argv[1:]):
        data = open(f, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        step = header.get("__metadata__", {}).get("step", "-")
        for name, t in sorted(header.items()):
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            print(os.path.basename(f), "step", step, name, hashlib.sha256(data[8 + n + lo:8 + n + hi]).hexdigest()[:16])


if __name__ == "__main__":
    main()
