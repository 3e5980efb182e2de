"""Subnormal flushing on PyTorch's side of the CPU comparisons (docs/design.md, "Arithmetic").

qtrain computes with subnormals flushed to zero in every thread (MXCSR FTZ and DAZ on x86); PyTorch
keeps IEEE gradual underflow unless torch.set_flush_denormal(True) is called, and then runs as fast
as it can on Intel cores, where each subnormal operation costs about a hundred cycles. A fair
comparison shows both: the drivers (bench_mlp_cpu.py, bench_convnet_cpu.py, bench_lstm_cpu.py) run
each PyTorch peer without and with --flush-denormal, and report both rows.

Peers: add_peer_flag(parser), then apply(args) first thing after parsing, before any torch operation
starts its threads (set_flush_denormal sets the calling thread's flags; PyTorch's intra-op threads,
started at the first parallel operation, inherit them).
Drivers: add_driver_flag(parser), then variants(args): [(row label, extra peer arguments)].
"""

LABELS = {"off": "", "on": ", flush denormal"}


def add_peer_flag(parser):
    parser.add_argument("--flush-denormal", action="store_true",
                        help="torch.set_flush_denormal(True): subnormals flushed to zero, as qtrain does")


def apply(args):
    if args.flush_denormal:
        import torch
        if not torch.set_flush_denormal(True):
            raise SystemExit("--flush-denormal: this CPU has no flush-to-zero mode PyTorch can set")


def add_driver_flag(parser):
    parser.add_argument("--pytorch-flush", choices=["both", "off", "on"], default="both",
                        help="run the PyTorch peer without (off) and/or with (on) torch.set_flush_denormal(True); "
                             "default both, reported as two rows")


def variants(args):
    chosen = ["off", "on"] if args.pytorch_flush == "both" else [args.pytorch_flush]
    return [(key, LABELS[key], ["--flush-denormal"] if key == "on" else []) for key in chosen]
