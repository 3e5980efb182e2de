#!/usr/bin/env python3
"""CUEMU_STATS end to end (tests/cuemu/README.md): a file collects one JSON line per process, appended
(several processes ending at once, as the ranks of an mpirun do, each leave one whole line), holding
exactly what the probe (stats_probe.cu) did; "1" prints the line on stderr; unset prints nothing; a
file that cannot be written fails the process.

Usage: check_stats.py PROBE
"""
import json
import os
import subprocess
import sys
import tempfile

# What stats_probe.cu does, call by call.
EXPECTED = {
    "host_syncs": 2,
    "queries": 0,
    "d2h_copies": 1,
    "d2h_bytes": 1024,
    "h2d_copies": 0,
    "h2d_bytes": 0,
    "d2d_copies": 0,
    "h2h_copies": 0,
    "memsets": 0,
    "allocations": 1,
    "frees": 1,
    "allocation_syncs": 1,
    "event_records": 0,
    "stream_waits": 0,
    "launches": 2,
    "blocks": 6,
    "threads": 320,
    "barriers": 0,
    "warp_collectives": 0,
    "per_kernel": {"fill<int>": {"launches": 2, "blocks": 6, "threads": 320}},
}

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def check_line(obj, pid, rank, where):
    check(obj.get("pid") == pid, f"{where}: pid {obj.get('pid')}, expected {pid}")
    check(obj.get("rank") == rank, f"{where}: rank {obj.get('rank')!r}, expected {rank!r}")
    check(obj.get("program") == os.path.basename(PROBE), f"{where}: program {obj.get('program')!r}")
    check(obj.get("switches", 0) >= EXPECTED["threads"], f"{where}: switches {obj.get('switches')} < threads")
    for key, want in EXPECTED.items():
        check(obj.get(key) == want, f"{where}: {key} = {obj.get(key)!r}, expected {want!r}")


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CUEMU_STATS", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")}
    env.update(extra)
    return env


def run(env):
    return subprocess.run([PROBE], env=env, capture_output=True, text=True)


PROBE = os.path.abspath(sys.argv[1])

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "stats.jsonl")
    # One process, then two ending together (one of them rank 1 of an mpirun): three lines, appended.
    first = subprocess.Popen([PROBE], env=environment(CUEMU_STATS=path))
    check(first.wait() == 0, f"the probe failed: exit {first.returncode}")
    both = [subprocess.Popen([PROBE], env=environment(CUEMU_STATS=path)),
            subprocess.Popen([PROBE], env=environment(CUEMU_STATS=path, OMPI_COMM_WORLD_RANK="1"))]
    for p in both:
        check(p.wait() == 0, f"the probe failed: exit {p.returncode}")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    check(lines[-1] == "", "the file does not end with a newline")
    lines = lines[:-1]
    check(len(lines) == 3, f"{len(lines)} lines for 3 processes:\n{text}")
    by_pid = {}
    for i, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            failures.append(f"line {i + 1} is not JSON ({e}): {line}")
            continue
        by_pid[obj.get("pid")] = obj
    for p, rank in ((first, None), (both[0], None), (both[1], 1)):
        if p.pid in by_pid:
            check_line(by_pid[p.pid], p.pid, rank, f"the line of pid {p.pid}")
        else:
            failures.append(f"no line for pid {p.pid}")

    # "1": the same object on stderr; unset: nothing.
    r = run(environment(CUEMU_STATS="1"))
    check(r.returncode == 0, f"CUEMU_STATS=1: exit {r.returncode}")
    shown = [l[len("cuemu stats: "):] for l in r.stderr.splitlines() if l.startswith("cuemu stats: ")]
    check(len(shown) == 1, f"CUEMU_STATS=1: {len(shown)} stats lines on stderr:\n{r.stderr}")
    if len(shown) == 1:
        try:
            obj = json.loads(shown[0])
            check_line(obj, obj.get("pid"), None, "CUEMU_STATS=1")
        except json.JSONDecodeError as e:
            failures.append(f"CUEMU_STATS=1: not JSON ({e}): {shown[0]}")
    r = run(environment())
    check(r.returncode == 0 and "cuemu stats" not in r.stderr, f"CUEMU_STATS unset: {r.returncode}, {r.stderr!r}")

    # A file that cannot be written: the process fails, naming it.
    bad = os.path.join(tmp, "missing", "stats.jsonl")
    r = run(environment(CUEMU_STATS=bad))
    check(r.returncode != 0 and f"CUEMU_STATS={bad}" in r.stderr,
          f"an unwritable CUEMU_STATS: exit {r.returncode}, stderr {r.stderr!r}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("CUEMU_STATS: 3 processes, 3 lines, each counting exactly the probe's calls; stderr and off modes too")
