#!/usr/bin/python3
"""CPU training throughput of the MNIST MLP (run with Debian's /usr/bin/python3, which has python3-torch): qtrain against PyTorch 1.13 (Debian's python3-torch) on
the same model, data, batch and threads, measured in the same run, alternating the two programs.
Reports the median samples/s over the repetitions and each program's peak resident memory.

  tools/bench/bench_mlp_cpu.py [--threads 2] [--steps 400] [--repeat 3]
  tools/bench/bench_mlp_cpu.py --epochs 20 [--threads 2]     # whole runs: the config's full schedule

--epochs E trains both programs for E whole epochs on configs/mnist_mlp.yaml's schedule (one run
each) and reports samples/s per epoch, the training time of the whole run (evaluation excluded), the
last epoch's speed against the first's, and the test accuracy: the figures a short run cannot show
(a slowdown in the last epochs).

Both programs run with OPENBLAS_CORETYPE=SkylakeX when the CPU has AVX-512 (Debian's OpenBLAS
misdetects such CPUs as Prescott; qtrain sets it by itself, PyTorch needs it in the environment) and
OMP_WAIT_POLICY=passive: this is the tuned PyTorch figure of docs/performance.md, not the default one.
PyTorch runs both without and with torch.set_flush_denormal(True) (qtrain always flushes subnormals:
tools/bench/flush_denormal.py), two rows; --pytorch-flush off or on keeps one.
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

import flush_denormal

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
    p.add_argument("--epochs", type=int, default=0, help="whole runs of this many epochs (0: --steps)")
    flush_denormal.add_driver_flag(p)
    args = p.parse_args()

    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    with open("/proc/cpuinfo") as f:
        if "avx512f" in f.read():
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
    if args.epochs > 0:
        return whole_runs(args, env)
    peers = flush_denormal.variants(args)
    results = {"qtrain": [], **{key: [] for key, _, _ in peers}}
    peak = {key: 0.0 for key in results}
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
            for key, _, extra in peers:
                out, rss = run(["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_mlp_peer.py"), "--data",
                                args.data, "--steps", str(args.steps), "--warmup", str(warmup), "--threads",
                                str(args.threads)] + extra, env)
                results[key].append(json.loads(out)["samples_per_s"])
                peak[key] = max(peak[key], rss)
    q = statistics.median(results["qtrain"])
    import torch
    print(f"MNIST MLP 784-1024-1024-10, batch 128, RMSProp, {args.threads} threads, {args.steps} timed steps, "
          f"median of {args.repeat} alternating runs")
    print("| program | samples/s | peak RSS (MiB) | runs (samples/s) |")
    print("|---|---|---|---|")
    print(f"| qtrain | {q:.0f} | {peak['qtrain']:.0f} | {', '.join(f'{v:.0f}' for v in results['qtrain'])} |")
    for key, label, _ in peers:
        t = statistics.median(results[key])
        print(f"| PyTorch {torch.__version__}{label} | {t:.0f} | {peak[key]:.0f} | "
              f"{', '.join(f'{v:.0f}' for v in results[key])} |")
    for key, label, _ in peers:
        t = statistics.median(results[key])
        print(f"qtrain / PyTorch{label}: {q / t:.2f}x samples/s, {peak['qtrain'] / peak[key]:.2f}x peak memory")


def whole_runs(args, env):
    import torch
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = os.path.join(tmp, "run")
        _, q_rss = run([args.qtrain, "train", os.path.join(ROOT, "configs/mnist_mlp.yaml"),
                        "--set", f"data.path={args.data}", "--set", "device=cpu",
                        "--set", f"train.threads={args.threads}", "--set", f"train.epochs={args.epochs}",
                        "--set", "train.eval_every_epoch=false", "--set", f"output.dir={out_dir}",
                        "--set", "output.progress=none"], env)
        with open(os.path.join(out_dir, "metrics.csv")) as f:
            rows = [r for r in csv.DictReader(f) if float(r["samples_per_s"]) > 0]
        with open(os.path.join(out_dir, "train.log")) as f:
            per_epoch = int(f.read().split(" steps per epoch")[0].rsplit(" ", 1)[-1])
    q_rates = [float(r["samples_per_s"]) for r in rows]
    q_train_s = sum(60000 / v for v in q_rates)  # samples/s of an epoch of MNIST's 60000 training images
    q_acc = float(rows[-1]["test_accuracy"])
    peers = []  # (label, the peer's JSON, its peak RSS)
    for _, label, extra in flush_denormal.variants(args):
        out, t_rss = run(["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_mlp_peer.py"), "--data", args.data,
                          "--epochs", str(args.epochs), "--steps-per-epoch", str(per_epoch),
                          "--threads", str(args.threads)] + extra, env)
        peers.append((label, json.loads(out), t_rss))
    print(f"MNIST MLP 784-1024-1024-10, batch 128, RMSProp on a cosine schedule, {args.threads} threads, "
          f"{args.epochs} whole epochs of {per_epoch} steps, one run each")
    print("| epoch | qtrain samples/s |" + "".join(f" PyTorch {torch.__version__}{label} samples/s |"
                                                   for label, _, _ in peers))
    print("|---|---|" + "---|" * len(peers))

    def row(name, mine, theirs):
        print(f"| {name} | {mine} |" + "".join(f" {theirs(peer, rss)} |" for _, peer, rss in peers))
    for e, q in enumerate(q_rates, start=1):
        row(e, f"{q:.0f}", lambda peer, rss: f"{peer['epoch_samples_per_s'][e - 1]:.0f}")
    row("whole run (training s)", f"{q_train_s:.1f}", lambda peer, rss: f"{peer['train_s']:.1f}")
    row("last / first epoch", f"{q_rates[-1] / q_rates[0]:.2f}",
        lambda peer, rss: f"{peer['epoch_samples_per_s'][-1] / peer['epoch_samples_per_s'][0]:.2f}")
    row("test accuracy", f"{100 * q_acc:.2f}%", lambda peer, rss: f"{100 * peer['test_accuracy']:.2f}%")
    row("peak RSS (MiB)", f"{q_rss:.0f}", lambda peer, rss: f"{rss:.0f}")
    for label, peer, _ in peers:
        print(f"qtrain / PyTorch{label} over the whole run: {peer['train_s'] / q_train_s:.2f}x")


if __name__ == "__main__":
    main()
