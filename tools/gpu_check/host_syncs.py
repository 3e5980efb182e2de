#!/usr/bin/env python3
"""Host synchronizations (and copies and launches) per call of the gradient exchange over NCCL, counted
by the CUDA emulator: `cuemu_qtrain bench-allreduce` runs with CUEMU_STATS=FILE, which makes the
emulator write its totals at exit as one JSON object per process (keys host_syncs, d2h_copies,
h2d_copies, launches, ...). qtrain has no single place where it waits for the GPU to count them on a
real one. Each case runs twice, with 1 and with 3 timed calls and no warm-up, so that everything but
the calls (start-up, the data, the exchange's first allocations) cancels: per call = (N3 - N1) / 2.
A call here is what bench-allreduce times: the exchange plus its own wait for it (one stream
synchronization, as a training step waits for its exchange too) and the copy that restores the input.
The counts depend on the number of pieces (communication.piece_mb), not on the bytes, so the small
sizes run with a piece size scaled down alike: 0.25 and 4 MB in pieces of 0.25 MB have the pieces of
4 and 64 MB in the default pieces of 4 MB (1 and 16).

Usage: host_syncs.py CUEMU_QTRAIN [--sizes 0.25,4] [--piece-mb 0.25] [--methods qsgd:bits=4,onebit]
                     [--work DIR]
A count the emulator does not write (an older emulator) is shown as n/a.
tests/tools/test_gpu_check_scripts.py holds the parsing to fixtures (ctest -L tools).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

DEFAULT_PIECE_MB = 4  # communication.piece_mb's default (exchange/exchange_config.h)
KEYS = ["host_syncs", "d2h_copies", "h2d_copies", "launches"]
PATHS = ["auto", "host"]  # bench-allreduce --payload-path (communication.payload_path)


def read_stats(path):
    """The sums over the JSON objects in PATH (one per process, one per line or run together), or None
    when there is none (the file is missing, or the emulator printed its totals elsewhere)."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    decoder, at, total, found = json.JSONDecoder(), 0, {}, False
    while True:
        at = text.find("{", at)
        if at < 0:
            break
        try:
            obj, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at += 1
            continue
        at = end
        if isinstance(obj, dict):
            found = True
            for k, v in obj.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    total[k] = total.get(k, 0) + v
    return total if found else None


def stats_of(path, output):
    """read_stats(PATH), or, where the emulator wrote no file, the launches of the line it prints to
    stderr with CUEMU_STATS set ("cuemu: 12 launches, ..."), or None."""
    stats = read_stats(path)
    if stats is None:
        m = re.search(r"^cuemu: (\d+) launches", output, re.M)
        stats = {"launches": int(m.group(1))} if m else None
    return stats


def per_call(one, three, key, calls=2):
    """(N3 - N1) / calls as text, or 'n/a' when either run lacks the count."""
    if one is None or three is None or key not in one or key not in three:
        return "n/a"
    v = (three[key] - one[key]) / calls
    return f"{v:.0f}" if v == int(v) else f"{v:.1f}"


def run(qtrain, payload_path, method, size, piece_mb, iterations, stats):
    if os.path.exists(stats):
        os.remove(stats)
    env = dict(os.environ, CUEMU_STATS=stats)
    cmd = [qtrain, "bench-allreduce", "--backend", "nccl", "--sizes", size, "--methods", method, "--baseline", method,
           "--no-library", "--iterations", str(iterations), "--warmup", "0", "--piece-mb", str(piece_mb),
           "--payload-path", payload_path]
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        raise SystemExit(f"host_syncs: {' '.join(cmd)} failed (exit {done.returncode})")
    return stats_of(stats, done.stdout)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("qtrain")
    p.add_argument("--sizes", default="0.25,4")
    p.add_argument("--piece-mb", type=float, default=0.25)
    p.add_argument("--methods", default="qsgd:bits=4,onebit")
    p.add_argument("--work", help="folder for the stats files (default: a temporary one)")
    a = p.parse_args(argv)
    work = a.work or tempfile.mkdtemp(prefix="host-syncs-")
    os.makedirs(work, exist_ok=True)  # the emulator aborts when it cannot write its stats file
    scale = DEFAULT_PIECE_MB / a.piece_mb if a.piece_mb > 0 else 1
    print(f"Per exchange call on 1 rank over the emulator's NCCL in pieces of {a.piece_mb:g} MB, so that each size "
          f"has the pieces of {scale:g} times its size in the default {DEFAULT_PIECE_MB:g} MB pieces (path: the "
          "payloads in device memory (auto), or through the host with --payload-path host):")
    print()
    print("| path | method | size (MB) | as (MB) | host syncs | D2H copies | H2D copies | launches |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    missing = False
    for path in PATHS:
        for method in a.methods.split(","):
            for size in a.sizes.split(","):
                stats = [run(a.qtrain, path, method, size, a.piece_mb, n,
                             os.path.join(work, f"{path}-{method}-{size}-{n}.json")) for n in (1, 3)]
                cells = [per_call(stats[0], stats[1], k) for k in KEYS]
                missing = missing or "n/a" in cells
                print(f"| {path} | {method} | {size} | {float(size) * scale:g} | " + " | ".join(cells) + " |")
    if missing:
        print()
        print("n/a: the emulator did not write that count (CUEMU_STATS=FILE writes one JSON object per process "
              "with host_syncs, d2h_copies, h2d_copies and launches where it supports them).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
