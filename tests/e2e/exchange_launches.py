#!/usr/bin/env python3
"""Kernel launches per exchange call on the GPU path, counted by the CUDA emulator (label cuda_emu):
one rank, reduce-scatter + allgather with device payloads over the emulator's NCCL, one piece (two
encodes and two decodes, each decode kernel making its header check), measured as tools/gpu_check/host_syncs.py measures
(per call = the difference of a run of 3 calls and one of 1, over 2). On a GPU each launch costs the
host a few microseconds, about what a 4 MB piece's kernels take, so these counts are what the
exchange pays per piece (issue "The GPU path at its floor", docs/gpu-checklist.md); this test holds
each method to its count so that a change which adds a kernel to a codec's path is noticed.

Usage: exchange_launches.py CUEMU_QTRAIN SOURCE_DIR
"""
import os
import sys
import tempfile

# Launches per call (one piece) at most, and why that many.
CEILINGS = {
    # encode one fused kernel; decode one kernel (its checks and the header's in it under DeferredChecks).
    "qsgd:bits=4": 4,
    # encode: max (with the header), mean, centered squares (each sum folded by its last block), codes;
    # decode one kernel. Each encode pass needs the previous one over the whole bucket.
    "terngrad": 10,
    # encode: max, pool and chunk sort; the boundaries by merge rank and the plan; codes and bin sums
    # with the table in the last block; decode one kernel.
    "codebook": 8,
    # encode: span max, codes; decode one kernel (the scale read on the device).
    "fp8": 6,
    "nvfp4": 6,
    # encode: the header, the groups' sign sums (two deterministic sums, the last block folding them),
    # the packed words; decode one kernel (the means checked in it under DeferredChecks).
    "onebit": 8,
}


def main(argv):
    qtrain, src = argv[1], argv[2]
    sys.path.insert(0, os.path.join(src, "tools", "gpu_check"))
    import host_syncs  # noqa: E402

    work = tempfile.mkdtemp(prefix="exchange-launches-")
    failures = 0
    for method, ceiling in CEILINGS.items():
        runs = [
            host_syncs.run(qtrain, "auto", method, "0.25", 0.25, n, os.path.join(work, f"{method}-{n}.json"))
            for n in (1, 3)
        ]
        launches = host_syncs.per_call(runs[0], runs[1], "launches")
        print(f"{method}: {launches} launches per call of one piece (at most {ceiling})")
        if launches == "n/a" or float(launches) > ceiling:
            print(f"FAIL: {method}: {launches} launches per piece, more than {ceiling}")
            failures += 1
    if failures == 0:
        print("exchange_launches: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
