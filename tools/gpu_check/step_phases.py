#!/usr/bin/env python3
"""Where a training step's time goes, from the metrics.csv of a `qtrain train` run: per step, each
phase's milliseconds and the gradient exchange's share of the step, for the last row (the last epoch;
with two epochs or more, one after the warm-up, cuDNN's algorithm search and the first allocations).

Usage: step_phases.py METRICS_CSV --batch B --ranks P    (B: data.batch_size, per rank)

A row's phase times are that epoch's seconds on rank 0: data, forward, backward and optimizer on the
training thread; encode, communicate and decode on the exchange's thread, which overlaps backward when
communication.overlap is on. exposed_comm_s is the part the training thread waited for (the exchange's
cost to the step); hidden_comm_s the rest. The epoch's wall time is steps * B * P / samples_per_s.
tests/tools/test_gpu_check_scripts.py holds it to a fixture (ctest -L tools).
"""
import argparse
import csv
import sys

PHASES = ["data", "forward", "backward", "optimizer", "encode", "communicate", "decode"]


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("metrics")
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--ranks", type=int, required=True)
    a = p.parse_args(argv)
    try:
        with open(a.metrics, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f"step_phases: {e} (did the run start?)")
        return 1
    if not rows:
        print(f"step_phases: {a.metrics} has no row (the run ended before its first epoch's end)")
        return 1
    row = rows[-1]
    steps = int(row["step"]) - (int(rows[-2]["step"]) if len(rows) > 1 else 0)
    rate = float(row["samples_per_s"])
    if steps <= 0 or rate <= 0:
        print(f"step_phases: the last row of {a.metrics} has {steps} steps at {rate} samples/s")
        return 1
    wall = steps * a.batch * a.ranks / rate
    ms = {ph: 1e3 * float(row[f"time_{ph}_s"]) / steps for ph in PHASES}
    exposed = 1e3 * float(row["exposed_comm_s"]) / steps
    hidden = 1e3 * float(row["hidden_comm_s"]) / steps
    step = 1e3 * wall / steps
    exchange = ms["encode"] + ms["communicate"] + ms["decode"]
    which = (f"epoch {row['epoch']} (after {len(rows) - 1} earlier)" if len(rows) > 1
             else "the only row (warm-up included)")
    print(f"{which}: {steps} steps of {a.batch} samples on each of {a.ranks} ranks, {rate:.0f} samples/s, "
          f"{step:.2f} ms per step; {float(row['bytes_sent_per_step']) / 1e6:.2f} MB sent per step")
    print()
    print("| per step (ms) | " + " | ".join(PHASES) + " | exposed | hidden |")
    print("|---|" + "---:|" * (len(PHASES) + 2))
    print("| rank 0 | " + " | ".join(f"{ms[ph]:.2f}" for ph in PHASES) + f" | {exposed:.2f} | {hidden:.2f} |")
    print()
    print(f"The exchange's share of the step: {100 * exposed / step:.1f}% waited for (exposed {exposed:.2f} of "
          f"{step:.2f} ms); its whole time, encode + communicate + decode, {exchange:.2f} ms = "
          f"{100 * exchange / step:.1f}% of the step.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
