#!/usr/bin/env python3
"""The formatters of tools/gpu_check.sh against fixtures, so that a change to them (or to what they
read) cannot silently break the report of the next GPU run, whose minutes are few:
- ncu_table.py on a canned Nsight Compute CSV (long form, thousands separators, three time units, a
  missing metric, ncu's messages between the rows, a profile cut short) must print the expected tables,
  and on ncu's output without a kernel (no counter permission) exit 1 saying so;
- step_phases.py on a real metrics.csv of two epochs must print the expected per-step phases;
- host_syncs.py must sum CUEMU_STATS objects (per line or run together), show a count an emulator
  does not write as n/a, and fall back to the launches of the emulator's stderr line.

Usage: test_gpu_check_scripts.py [REPO_ROOT]    (CTest: test_gpu_check_scripts, labels unit and tools)
"""
import difflib
import os
import subprocess
import sys
import tempfile

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
tools = os.path.join(root, "tools", "gpu_check")
fixtures = os.path.join(root, "tests", "tools", "fixtures")
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, tools)
import host_syncs  # noqa: E402

failures = []


def check(what, ok, detail=""):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)
        if detail:
            print(detail)


def run(script, *args):
    done = subprocess.run([sys.executable, os.path.join(tools, script), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def same_as(what, output, expected_file):
    with open(os.path.join(fixtures, expected_file)) as f:
        expected = f.read()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), output.splitlines(True), expected_file, "output"))
    check(what, output == expected, diff)


rc, out = run("ncu_table.py", os.path.join(fixtures, "ncu_profile_once.csv"), "--methods",
              os.path.join(fixtures, "ncu_profile_once.log"), "--values", "16777216")
check("ncu_table.py exits 0 on the fixture", rc == 0, out)
same_as("ncu_table.py prints the expected tables", out, "ncu_profile_once.expected.md")

# ncu 2025.3 on the H100 wrote the kernels' anonymous namespace as "<unnamed>" and no return type; the
# marks must still be found (the first GPU run's table had none).
with open(os.path.join(fixtures, "ncu_profile_once.csv")) as f:
    h100_style = f.read().replace("(anonymous namespace)::", "<unnamed>::").replace('"void qtrain::', '"')
h100_csv = os.path.join(tempfile.mkdtemp(), "ncu_h100_style.csv")
with open(h100_csv, "w") as f:
    f.write(h100_style)
rc, out = run("ncu_table.py", h100_csv, "--methods", os.path.join(fixtures, "ncu_profile_once.log"), "--values",
              "16777216")
same_as("ncu_table.py reads ncu 2025's <unnamed> namespaces alike", out, "ncu_profile_once.expected.md")

rc, out = run("ncu_table.py", os.path.join(fixtures, "ncu_no_permission.csv"))
check("ncu_table.py exits 1 on ncu's output without a kernel, naming ERR_NVGPUCTRPERM",
      rc == 1 and "ERR_NVGPUCTRPERM" in out, out)

rc, out = run("step_phases.py", os.path.join(fixtures, "resnet_metrics.csv"), "--batch", "8", "--ranks", "2")
check("step_phases.py exits 0 on the fixture", rc == 0, out)
same_as("step_phases.py prints the expected phases", out, "resnet_metrics.expected.md")

with tempfile.TemporaryDirectory() as tmp:
    def stats(text):
        path = os.path.join(tmp, "stats.json")
        with open(path, "w") as f:
            f.write(text)
        return host_syncs.read_stats(path)

    two = stats('{"host_syncs": 3, "launches": 10, "d2h_copies": 1}\n{"host_syncs": 4, "launches": 2}\n')
    check("read_stats sums the objects of two processes", two == {"host_syncs": 7, "launches": 12, "d2h_copies": 1},
          str(two))
    run_together = stats('{"host_syncs": 1, "name": "x"}{"host_syncs": 2, "nested": {"a": 1}}')
    check("read_stats reads objects run together, numbers only", run_together == {"host_syncs": 3}, str(run_together))
    one, three = {"host_syncs": 5, "launches": 12}, {"host_syncs": 11, "launches": 36}
    check("per_call is (N3 - N1) / 2", host_syncs.per_call(one, three, "host_syncs") == "3"
          and host_syncs.per_call(one, three, "launches") == "12")
    check("per_call shows a count the emulator did not write as n/a",
          host_syncs.per_call(one, three, "d2h_copies") == "n/a"
          and host_syncs.per_call(None, three, "launches") == "n/a")
    check("read_stats of a missing file is None", host_syncs.read_stats(os.path.join(tmp, "none.json")) is None)
    fallback = host_syncs.stats_of(os.path.join(tmp, "none.json"),
                                   "# qtrain bench-allreduce ...\ncuemu: 12 launches, 614 blocks, 156736 threads\n")
    check("stats_of falls back to the launches of the emulator's stderr line", fallback == {"launches": 12},
          str(fallback))

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
