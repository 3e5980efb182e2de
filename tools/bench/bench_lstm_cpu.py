#!/usr/bin/python3
"""CPU training throughput of the AN4 LSTM (configs/an4_lstm.yaml: 3 bidirectional LSTM layers of 128,
dense to 28 classes, CTC, Adam, clip_norm 400, batch 16): qtrain against PyTorch 1.13's nn.LSTM +
CTCLoss (tools/bench/torch_lstm_peer.py) with the same sizes, batch, utterance lengths and threads,
alternating the two programs in the same run. Reports the median samples/s over the repetitions.

  tools/bench/bench_lstm_cpu.py [--threads 2] [--steps 20] [--repeat 3] [--data ../shared/data/an4] [--ranks 2]

--ranks R adds qtrain as R data-parallel ranks of threads/R threads each (mpirun, shared memory),
alternating with the others: one replica with all the threads against R replicas sharing them, in
global samples/s (each rank a batch of 16).

qtrain's figure is the samples/s of metrics.csv (first to last step of the run, features read from
its cache, which the first, untimed, warm-up run fills); the peer's is timed by its own clock.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

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
    args = p.parse_args()
    if args.ranks and (args.ranks < 2 or args.threads % args.ranks):
        sys.exit(f"--ranks {args.ranks}: expected at least 2 and a divisor of --threads {args.threads}")
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    results = {"qtrain": [], "pytorch": [], "ranks": []}
    with tempfile.TemporaryDirectory() as tmp:
        def qtrain_run(name, steps, ranks=1):
            out_dir = os.path.join(tmp, name)
            launcher = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(ranks)] if ranks > 1 else []
            run(launcher + [args.qtrain, "train", os.path.join(ROOT, "configs/an4_lstm.yaml"),
                 "--set", f"data.path={args.data}", "--set", "device=cpu",
                 # The peer feeds 40 features per 10 ms frame: no frame stacking on either side.
                 "--set", "data.features.stack=1", "--set", "model.input=[40]",
                 "--set", f"data.cache_dir={os.path.join(tmp, 'features')}",
                 "--set", f"train.threads={args.threads // ranks}", "--set", f"train.max_steps={steps}",
                 "--set", "train.eval_every_epoch=false", "--set", "data.limit_test=16",
                 "--set", f"output.dir={out_dir}", "--set", "output.progress=none"], env)
            with open(os.path.join(out_dir, "metrics.csv")) as f:
                return float(list(csv.DictReader(f))[-1]["samples_per_s"])
        qtrain_run("warmup", 1)  # fills the feature cache
        for r in range(args.repeat):
            results["qtrain"].append(qtrain_run(f"run{r}", args.steps))
            if args.ranks:
                results["ranks"].append(qtrain_run(f"ranks{r}", args.steps, args.ranks))
            out = run(["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_lstm_peer.py"), "--data", args.data,
                       "--steps", str(args.steps), "--threads", str(args.threads)], env)
            results["pytorch"].append(json.loads(out)["samples_per_s"])
    q = statistics.median(results["qtrain"])
    t = statistics.median(results["pytorch"])
    import torch
    print(f"AN4 LSTM 3x bidirectional 128, batch 16, CTC, Adam, {args.threads} threads, {args.steps} steps, "
          f"median of {args.repeat} alternating runs")
    print("| program | samples/s | runs |")
    print("|---|---|---|")
    print(f"| qtrain | {q:.1f} | {', '.join(f'{v:.1f}' for v in results['qtrain'])} |")
    print(f"| PyTorch {torch.__version__} | {t:.1f} | {', '.join(f'{v:.1f}' for v in results['pytorch'])} |")
    if args.ranks:
        r = statistics.median(results["ranks"])
        print(f"| qtrain, {args.ranks} ranks x {args.threads // args.ranks} thread(s) | {r:.1f} | "
              f"{', '.join(f'{v:.1f}' for v in results['ranks'])} |")
    print(f"qtrain / PyTorch: {q / t:.2f}x samples/s")
    if args.ranks:
        print(f"qtrain 1 replica x {args.threads} threads / {args.ranks} ranks x {args.threads // args.ranks}: {q / r:.2f}x")


if __name__ == "__main__":
    main()
