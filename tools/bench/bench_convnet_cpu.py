#!/usr/bin/python3
"""CPU training throughput of Dettmers' CIFAR-10 convnet (tools/bench/models/dettmers_cifar10_convnet.yaml)
and per-layer times of ResNet-style 3x3 convolutions: qtrain against PyTorch 1.13 (Debian's
python3-torch, run with /usr/bin/python3) on the same model, batch and threads, measured in the same
run, alternating the two programs. Both train on SYNTHETIC RANDOM INPUT (this is a speed benchmark:
`qtrain bench-model` and tools/bench/torch_convnet_peer.py), so no dataset is needed.

  tools/bench/bench_convnet_cpu.py [--threads 2] [--batch 128] [--steps 10] [--repeat 3] [--skip-layers]
  tools/bench/bench_convnet_cpu.py --model resnet110 --skip-layers    # ResNet-110 instead

Reports the median over the repetitions of each program's median step time. Environment as in
bench_mlp_cpu.py: OMP_WAIT_POLICY=passive, OPENBLAS_CORETYPE=SkylakeX on AVX-512 CPUs. PyTorch runs
both without and with torch.set_flush_denormal(True) (tools/bench/flush_denormal.py), one row (or
column) each; --pytorch-flush off or on keeps one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import flush_denormal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tools/bench/models/dettmers_cifar10_convnet.yaml")
# ResNet's CIFAR stages (16 channels at 32x32, 32 at 16x16, 64 at 8x8) and the wider layers at 32x32.
CONV_CASES = [(16, 32), (32, 32), (64, 32), (32, 16), (64, 8)]


def run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def conv_config(tmp, ch, hw):
    """A model whose second layer is the 3x3 convolution to time (the first layer computes no input
    gradient in a Net, so the conv is not first); the rest only closes the model for the loss."""
    path = os.path.join(tmp, f"conv{ch}x{hw}.yaml")
    with open(path, "w") as f:
        f.write(f"model:\n  input: [{ch}, {hw}, {hw}]\n  layers:\n    - {{type: relu}}\n"
                f"    - {{type: conv2d, out_channels: {ch}, kernel: 3, padding: 1}}\n"
                f"    - {{type: global_avgpool}}\n    - {{type: dense, units: 10}}\n")
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--skip-layers", action="store_true", help="only the whole-model comparison")
    p.add_argument("--model", choices=["dettmers", "resnet110"], default="dettmers",
                   help="the whole-model comparison: Dettmers' convnet or configs/cifar_resnet110.yaml")
    p.add_argument("--qtrain", default=os.path.join(ROOT, "build/qtrain"))
    flush_denormal.add_driver_flag(p)
    args = p.parse_args()
    peers = flush_denormal.variants(args)

    env = dict(os.environ, OMP_WAIT_POLICY="passive")
    with open("/proc/cpuinfo") as f:
        if "avx512f" in f.read():
            env["OPENBLAS_CORETYPE"] = "SkylakeX"
    common = ["--batch", str(args.batch), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    peer = ["/usr/bin/python3", os.path.join(ROOT, "tools/bench/torch_convnet_peer.py")]
    import torch

    model = MODEL if args.model == "dettmers" else os.path.join(ROOT, "configs/cifar_resnet110.yaml")
    q_rates, t_rates = [], {key: [] for key, _, _ in peers}
    for _ in range(args.repeat):
        q_rates.append(run([args.qtrain, "bench-model", model, "--device", "cpu", "--threads", str(args.threads)]
                           + common, env)["samples_per_s"])
        for key, _, extra in peers:
            t_rates[key].append(run(peer + ["model", "--model", args.model, "--threads", str(args.threads)] + common
                                    + extra, env)["samples_per_s"])
    q = statistics.median(q_rates)
    name = "Dettmers CIFAR-10 convnet" if args.model == "dettmers" else "CIFAR-10 ResNet-110"
    print(f"{name}, batch {args.batch}, SGD, {args.threads} threads, synthetic input, "
          f"median step of {args.steps} after {args.warmup} warm-up, median of {args.repeat} alternating runs")
    print("| program | samples/s | runs (samples/s) |")
    print("|---|---|---|")
    print(f"| qtrain | {q:.0f} | {', '.join(f'{v:.0f}' for v in q_rates)} |")
    for key, label, _ in peers:
        print(f"| PyTorch {torch.__version__}{label} | {statistics.median(t_rates[key]):.0f} | "
              f"{', '.join(f'{v:.0f}' for v in t_rates[key])} |")
    for key, label, _ in peers:
        print(f"qtrain / PyTorch{label}: {q / statistics.median(t_rates[key]):.2f}x samples/s")
    if args.skip_layers:
        return

    with tempfile.TemporaryDirectory() as tmp:
        q_layers = {case: [] for case in CONV_CASES}
        t_layers = {(key, case): [] for key, _, _ in peers for case in CONV_CASES}
        for _ in range(args.repeat):
            for ch, hw in CONV_CASES:
                r = run([args.qtrain, "bench-model", conv_config(tmp, ch, hw), "--device", "cpu", "--per-layer",
                         "--threads", str(args.threads)] + common, env)
                conv = r["layers"][1]
                q_layers[(ch, hw)].append(conv["forward_ms"] + conv["backward_ms"])
            for key, _, extra in peers:
                for layer in run(peer + ["layers", "--threads", str(args.threads)] + common + extra, env)["layers"]:
                    t_layers[(key, (layer["channels"], layer["hw"]))].append(layer["forward_ms"] + layer["backward_ms"])
    print()
    print(f"3x3 convolution, padding 1, C -> C channels, batch {args.batch}: forward + backward (input and "
          f"weight gradients) in ms, median of {args.repeat} alternating runs")
    print("| channels | H x W | qtrain (ms) |" + "".join(f" PyTorch{label} (ms) | qtrain / PyTorch{label} speed |"
                                                     for _, label, _ in peers))
    print("|---|---|---|" + "---|---|" * len(peers))
    for ch, hw in CONV_CASES:
        qm = statistics.median(q_layers[(ch, hw)])
        cells = ""
        for key, _, _ in peers:
            tm = statistics.median(t_layers[(key, (ch, hw))])
            cells += f" {tm:.1f} | {tm / qm:.2f}x |"
        print(f"| {ch} | {hw}x{hw} | {qm:.1f} |{cells}")


if __name__ == "__main__":
    main()
