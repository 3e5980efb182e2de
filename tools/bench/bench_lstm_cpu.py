#!/usr/bin/python3
"""CPU training throughput of the AN4 LSTM (configs/an4_lstm.yaml: 3 bidirectional LSTM layers of 128,
dense to 28 classes, CTC, Adam, clip_norm 400, batch 16): qtrain against PyTorch 1.13's nn.LSTM +
CTCLoss (tools/bench/torch_lstm_peer.py) with the same sizes, batch, utterance lengths and threads,
alternating the two programs in the same run. Reports the median samples/s over the repetitions.

  tools/bench/bench_lstm_cpu.py [--threads 2] [--steps 20] [--repeat 3] [--data ../shared/data/an4] [--ranks 2]
                                [--epochs E] [--no-pytorch]

--ranks R adds qtrain as R data-parallel ranks of threads/R threads each (mpirun, shared memory),
alternating with the others: one replica with all the threads against R replicas sharing them, in
global samples/s (each rank a batch of 16).

qtrain's figure is the samples/s of metrics.csv (first to last step of the run, features read from
its cache, which the first, untimed, warm-up run fills); the peer's is timed by its own clock.

Over --steps S, R ranks and one replica train on different utterances: the replica on the first 16 S
of the epoch's permutation, each rank on 16 S of its own 1/R of it. AN4's utterances differ in length
by 10x, so the two figures then time different work. --epochs E trains every qtrain run (replica and
ranks) for E whole epochs instead, the same 948 utterances per epoch for both, and reports the
whole run's samples/s (E over the sum of the epochs' 1/samples-per-s: the epochs hold the same
samples) with each epoch's figure. The PyTorch peer still runs --steps steps (an epoch of its LSTM
takes 5-20 minutes on 2 cores); --no-pytorch leaves it out.
PyTorch runs both without and with torch.set_flush_denormal(True) (tools/bench/flush_denormal.py), one
row each; --pytorch-flush off or on keeps one.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

import flush_denormal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    return proc.stdout


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data", default=os.path.join(ROOT, "../shared/data/an4"))
    p.add_argument("--qtrain", default=os.path.join(ROOT, "build/qtrain"))
    p.add_argument("--ranks", type=int, default=0, help="also qtrain on this many ranks of threads/ranks threads")
    p.add_argument("--epochs", type=int, default=0, help="qtrain runs train this many whole epochs (not --steps)")
    p.add_argument("--no-pytorch", action="store_true", help="leave the PyTorch peer out")
    flush_denormal.add_driver_flag(p)
    args = p.parse_args()
    if args.epochs < 0 or args.steps < 1 or args.repeat < 1:
        sys.exit("--epochs must be >= 0, --steps and --repeat >= 1")
    if args.ranks and (args.ranks < 2 or args.threads % args.ranks):
        sys.exit(f"--ranks {args.ranks}: expected at least 2 and a divisor of --threads {args.threads}")
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    peers = [] if args.no_pytorch else flush_denormal.variants(args)
    results = {"qtrain": [], "ranks": [], **{key: [] for key, _, _ in peers}}
    epochs = {"qtrain": [], "ranks": []}  # per run, each epoch's samples/s (--epochs)
    with tempfile.TemporaryDirectory() as tmp:
        # record: None for a run of `steps` steps (returns its last row's samples/s); a list for a run of
        # --epochs whole epochs (appends each epoch's samples/s, returns the whole run's).
        def qtrain_run(name, steps, ranks=1, record=None):
            out_dir = os.path.join(tmp, name)
            launcher = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] if ranks > 1 else []
            run(launcher + [args.qtrain, "train", os.path.join(ROOT, "configs/an4_lstm.yaml"),
                 "--set", f"data.path={args.data}", "--set", "device=cpu",
                 # The peer feeds 40 features per 10 ms frame: no frame stacking on either side.
                 "--set", "data.features.stack=1", "--set", "model.input=[40]",
                 "--set", f"data.cache_dir={os.path.join(tmp, 'features')}",
                 "--set", f"train.threads={args.threads // ranks}",
                 *(["--set", f"train.epochs={args.epochs}"] if record is not None else
                   ["--set", f"train.max_steps={steps}"]),
                 "--set", "train.eval_every_epoch=false", "--set", "data.limit_test=16",
                 "--set", f"output.dir={out_dir}", "--set", "output.progress=none"], env)
            with open(os.path.join(out_dir, "metrics.csv")) as f:
                rates = [float(row["samples_per_s"]) for row in csv.DictReader(f)]
            if record is None:
                return rates[-1]
            record.append(rates)
            return len(rates) / sum(1 / v for v in rates)
        qtrain_run("warmup", 1)  # fills the feature cache
        whole = args.epochs > 0
        for r in range(args.repeat):
            results["qtrain"].append(qtrain_run(f"run{r}", args.steps, record=epochs["qtrain"] if whole else None))
            if args.ranks:
                results["ranks"].append(
                    qtrain_run(f"ranks{r}", args.steps, args.ranks, record=epochs["ranks"] if whole else None))
            for key, _, extra in peers:
                out = run(["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_lstm_peer.py"), "--data",
                           args.data, "--steps", str(args.steps), "--threads", str(args.threads)] + extra, env)
                results[key].append(json.loads(out)["samples_per_s"])
    q = statistics.median(results["qtrain"])
    what = f"{args.steps} steps"
    if args.epochs:
        what = f"{args.epochs} whole epochs" + ("" if args.no_pytorch else f" (PyTorch: {args.steps} steps)")
    print(f"AN4 LSTM 3x bidirectional 128, batch 16, CTC, Adam, {args.threads} threads, {what}, "
          f"median of {args.repeat} alternating runs")
    print("| program | samples/s | runs |" + (" samples/s per epoch |" if args.epochs else ""))
    print("|---|---|---|" + ("---|" if args.epochs else ""))

    def per_epoch(key):  # the last column with --epochs: each run's epochs, runs separated by ';'
        if not args.epochs:
            return ""
        return " " + "; ".join(", ".join(f"{v:.1f}" for v in rates) for rates in epochs[key]) + " |"
    print(f"| qtrain | {q:.1f} | {', '.join(f'{v:.1f}' for v in results['qtrain'])} |{per_epoch('qtrain')}")
    if args.ranks:
        r = statistics.median(results["ranks"])
        print(f"| qtrain, {args.ranks} ranks x {args.threads // args.ranks} thread(s) | {r:.1f} | "
              f"{', '.join(f'{v:.1f}' for v in results['ranks'])} |{per_epoch('ranks')}")
    for key, label, _ in peers:
        import torch
        t = statistics.median(results[key])
        print(f"| PyTorch {torch.__version__}{label} | {t:.1f} | {', '.join(f'{v:.1f}' for v in results[key])} |"
              + (" |" if args.epochs else ""))
    for key, label, _ in peers:
        print(f"qtrain / PyTorch{label}: {q / statistics.median(results[key]):.2f}x samples/s")
    if args.ranks:
        print(f"qtrain 1 replica x {args.threads} threads / {args.ranks} ranks x {args.threads // args.ranks}: "
              f"{q / r:.2f}x (median of each); per run pair: "
              f"{', '.join(f'{a / b:.2f}' for a, b in zip(results['qtrain'], results['ranks']))}")


if __name__ == "__main__":
    main()
