#!/usr/bin/python3
"""Instructions per training step of `qtrain bench-model` on the CPU, counted by valgrind's callgrind:
machine-independent evidence for a change whose wall time is too noisy to judge (guests whose speed
drifts 10-50%, a build beside the benchmark), and a figure that compares across machines.

  BUILD_DIR=build-v3 tools/build.sh -DQTRAIN_ARCH=x86-64-v3 -DQTRAIN_CUDA=OFF -DQTRAIN_CUDA_EMU=OFF
  tools/bench/instructions_per_step.py configs/cifar_resnet110.yaml [--batch 16] [--top 15]
  tools/bench/instructions_per_step.py configs/mnist_mlp.yaml --batch 128

Valgrind 3.19 (Debian 12) decodes AVX2 but not AVX-512, so the counted binary is an x86-64-v3 build
(--qtrain, default build-v3/qtrain): the counts are those of the AVX2 paths, the same on every x86-64
machine. The program runs twice, with 1 and with 1 + --steps timed steps (one warm-up step each), and
the difference divided by --steps is the steady step: set-up, warm-up and exit cancel. Callgrind
serializes threads, so the count is the total over all threads (--threads only changes how the work
is split). Prints one JSON line: instructions per step and per sample, and the --top functions by
instructions per step (self cost).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def count(qtrain, config, batch, threads, steps, extra, workdir):
    # qtrain re-executes itself once (tools/qtrain/main.cpp sets its libraries' environment first) and
    # MPI's singleton start forks helpers: every process is traced, each into its own file, and the
    # training process is the one with the most instructions.
    out = os.path.join(workdir, f"callgrind.{steps}.%p.out")
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={out}", qtrain,
           "bench-model", config, "--device", "cpu", "--threads", str(threads), "--batch", str(batch), "--steps",
           str(steps), "--warmup", "1"] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"instructions_per_step: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    totals = {}
    for name in os.listdir(workdir):
        if name.startswith(f"callgrind.{steps}."):
            with open(os.path.join(workdir, name)) as f:
                m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
            if m:
                totals[name] = int(m.group(1))
    if not totals:
        sys.exit(f"instructions_per_step: callgrind wrote no profile:\n{r.stderr[-2000:]}")
    main = max(totals, key=totals.get)
    ann = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", os.path.join(workdir, main)],
                         capture_output=True, text=True, check=True).stdout
    functions = {}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if m and ":" in m.group(2):
            name = m.group(2).split(":", 1)[1].strip()
            functions[name] = functions.get(name, 0) + int(m.group(1).replace(",", ""))
    return totals[main], functions


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config")
    p.add_argument("--qtrain", default=os.path.join(ROOT, "build-v3/qtrain"))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=2, help="timed steps of the longer run (default 2)")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--set", action="append", default=[], help="passed to bench-model as --set (repeatable)")
    args = p.parse_args()
    if not os.access(args.qtrain, os.X_OK):
        sys.exit(f"instructions_per_step: {args.qtrain} is not an executable: build it with\n"
                 "  BUILD_DIR=build-v3 tools/build.sh -DQTRAIN_ARCH=x86-64-v3 -DQTRAIN_CUDA=OFF -DQTRAIN_CUDA_EMU=OFF")
    extra = [a for s in args.set for a in ("--set", s)]
    with tempfile.TemporaryDirectory() as tmp:
        short, f_short = count(args.qtrain, args.config, args.batch, args.threads, 1, extra, tmp)
        long, f_long = count(args.qtrain, args.config, args.batch, args.threads, 1 + args.steps, extra, tmp)
    per_step = (long - short) / args.steps
    top = sorted(((name, (f_long.get(name, 0) - f_short.get(name, 0)) / args.steps) for name in f_long),
                 key=lambda kv: -kv[1])[:args.top]
    print(json.dumps({"config": args.config, "batch": args.batch, "threads": args.threads,
                      "instructions_per_step": round(per_step), "instructions_per_sample": round(per_step / args.batch),
                      "top_functions": [{"function": n, "instructions_per_step": round(v)} for n, v in top]}))


if __name__ == "__main__":
    main()
