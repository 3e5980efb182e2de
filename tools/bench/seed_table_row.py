#!/usr/bin/python3
"""One Markdown row from a file of runs, one "samples/s accuracy" line per seed: the median samples/s
with its range and the mean test accuracy with its range. Shared by the netbed benchmarks that sweep
seeds (bench_ddp_hooks_netbed.sh, bench_diloco_peer_netbed.sh).

  tools/bench/seed_table_row.py LABEL RUNS_FILE"""
import statistics
import sys


def main():
    label, path = sys.argv[1], sys.argv[2]
    runs = [tuple(map(float, line.split())) for line in open(path) if line.strip()]
    if not runs:
        sys.exit(f"{path}: no runs (every run of '{label}' failed)")
    sps = [r[0] for r in runs]
    acc = [100 * r[1] for r in runs]
    print(f"| {label} | {statistics.median(sps):.0f} ({min(sps):.0f}-{max(sps):.0f}) | "
          f"{statistics.mean(acc):.2f}% ({min(acc):.2f}-{max(acc):.2f}) |")


if __name__ == "__main__":
    main()
