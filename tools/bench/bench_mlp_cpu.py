#!/usr/bin/python3
"""CPU training throughput of the MNIST MLP (run with Debian's /usr/bin/python3, which has python3-torch): qtrain against PyTorch 1.13 (Debian's python3-torch) on
the same model, data, batch and threads, measured in the same run, alternating the two programs.
Reports the median samples/s over the repetitions and each program's peak resident memory.

  tools/bench/bench_mlp_cpu.py [--threads 2] [--steps 400] [--repeat 3]

Both programs run with OPENBLAS_CORETYPE=SkylakeX when the CPU has AVX-512 (Debian's OpenBLAS
misdetects such CPUs as Prescott; qtrain sets it by itself, PyTorch needs it in the environment) and
OMP_WAIT_POLICY=passive: this is the tuned PyTorch figure of docs/performance.md, not the default one.
"""
import argparse
import csv
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env):
    """Runs cmd and returns (stdout, peak RSS in MiB of that child)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    out = proc.stdout.read()
    err = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{err}")
    return out, usage.ru_maxrss / 1024.0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data", default=os.path.join(ROOT, "data/mnist"))
    p.add_argument("--qtrain", default=os.path.join(ROOT, "build/qtrain"))
    args = p.parse_args()

    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    with open("/proc/cpuinfo") as f:
        if "avx512f" in f.read():
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
    results = {"qtrain": [], "pytorch": []}
    peak = {"qtrain": 0.0, "pytorch": 0.0}
    # Both programs are timed from their first training step to their last (qtrain's metrics.csv
    # samples/s of the run; the peer's own clock), so start-up costs weigh the same on both sides.
    warmup = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            out_dir = os.path.join(tmp, f"run{r}")
            _, rss = run([args.qtrain, "train", os.path.join(ROOT, "configs/mnist_mlp.yaml"),
                          "--set", f"data.path={args.data}", "--set", "device=cpu",
                          "--set", f"train.threads={args.threads}",
                          "--set", f"train.max_steps={args.steps}",
                          "--set", "train.eval_every_epoch=false", "--set", "data.limit_test=1000",
                          "--set", f"output.dir={out_dir}", "--set", "output.progress=none"], env)
            with open(os.path.join(out_dir, "metrics.csv")) as f:
                row = list(csv.DictReader(f))[-1]
            results["qtrain"].append(float(row["samples_per_s"]))
            peak["qtrain"] = max(peak["qtrain"], rss)
            out, rss = run(["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_mlp_peer.py"), "--data", args.data,
                            "--steps", str(args.steps), "--warmup", str(warmup), "--threads", str(args.threads)], env)
            results["pytorch"].append(json.loads(out)["samples_per_s"])
            peak["pytorch"] = max(peak["pytorch"], rss)
    q = statistics.median(results["qtrain"])
    t = statistics.median(results["pytorch"])
    import torch
    print(f"MNIST MLP 784-1024-1024-10, batch 128, RMSProp, {args.threads} threads, {args.steps} timed steps, "
          f"median of {args.repeat} alternating runs")
    print("| program | samples/s | peak RSS (MiB) | runs (samples/s) |")
    print("|---|---|---|---|")
    print(f"| qtrain | {q:.0f} | {peak['qtrain']:.0f} | {', '.join(f'{v:.0f}' for v in results['qtrain'])} |")
    print(f"| PyTorch {torch.__version__} | {t:.0f} | {peak['pytorch']:.0f} | "
          f"{', '.join(f'{v:.0f}' for v in results['pytorch'])} |")
    print(f"qtrain / PyTorch: {q / t:.2f}x samples/s, {peak['qtrain'] / peak['pytorch']:.2f}x peak memory")


if __name__ == "__main__":
    main()
