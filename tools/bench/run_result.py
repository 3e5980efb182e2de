#!/usr/bin/env python3
"""One run's "samples/s accuracy" line for the netbed benchmark scripts (bench_ddp_hooks_netbed.sh,
bench_diloco_peer_netbed.sh), which collect one such line per seed for seed_table_row.py.

  run_result.py peer            the last JSON line on stdin of a PyTorch peer (tools/bench/*_peer.py):
                                its "samples_per_s" and "accuracy"
  run_result.py metrics FILE    a qtrain run's metrics.csv: samples/s over the whole run (the harmonic
                                mean of its epochs', which hold as many samples each) and the last
                                test accuracy
"""
import csv
import json
import sys


def main(argv):
    if len(argv) == 2 and argv[1] == "peer":
        lines = [line for line in sys.stdin.read().splitlines() if line.startswith("{")]
        if not lines:
            sys.exit("run_result.py: the peer printed no JSON result line")
        r = json.loads(lines[-1])
        samples, accuracy = r["samples_per_s"], r["accuracy"]
    elif len(argv) == 3 and argv[1] == "metrics":
        rows = list(csv.DictReader(open(argv[2])))
        if not rows:
            sys.exit(f"run_result.py: {argv[2]} has no rows")
        samples = len(rows) / sum(1.0 / float(r["samples_per_s"]) for r in rows)
        accuracy = float(rows[-1]["test_accuracy"])
    else:
        sys.exit(__doc__)
    print("%.0f %.4f" % (samples, accuracy))


if __name__ == "__main__":
    main(sys.argv)
