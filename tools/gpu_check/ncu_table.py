#!/usr/bin/env python3
"""Formats Nsight Compute's CSV of `qtrain bench-quant --profile-once` as Markdown tables: per kernel,
its time, its DRAM throughput and its achieved occupancy, under the method and phase that launched it.

Usage: ncu_table.py NCU_CSV [--methods LOG] [--values N] [--marker NAME]

NCU_CSV is what `ncu --csv --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,
sm__warps_active.avg.pct_of_peak_sustained_active --log-file NCU_CSV` wrote (long form: one row per
kernel and metric). bench-quant launches a one-value scale_kernel (the mark) before each encode and each
decode: the kernels between two marks are one encode or one decode, in the order of the
"profile-once method:" lines of its output (LOG). --values N adds the GB/s of N fp32 values per phase.
Exits 1, saying why, when the CSV holds no kernel (e.g. ncu lacked the permission to read the counters).
tests/tools/test_gpu_check_scripts.py holds it to a fixture (ctest -L tools).
"""
import argparse
import csv
import re
import sys

TIME = "gpu__time_duration.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS = (TIME, DRAM, OCCUPANCY)
# Microseconds per unit of a time (ncu scales units unless --print-units base; versions spell them
# differently).
TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
              "second": 1e6, "s": 1e6}
METHOD_LINE = "profile-once method: "


def number(text):
    """A metric value as ncu prints it: '1,234.5' (thousands separators), '9,5' (a decimal comma in
    some locales), 'n/a'. None when it is not a number."""
    text = text.strip()
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    elif "," in text and "." not in text:
        text = text.replace(",", ".")
    try:
        return float(text)
    except ValueError:
        return None


def short_name(name):
    """'void qtrain::quant_detail::(anonymous namespace)::decode_kernel<4, false>(const unsigned char *, ...)'
    -> 'decode_kernel<4, false>': no return type, namespaces or parameters (the method names the kernel)."""
    # GCC-style demangling says "(anonymous namespace)", ncu 2025's "<unnamed>" (seen on the H100).
    name = re.sub(r"\(anonymous namespace\)::|<unnamed>::", "", name)
    name = re.sub(r"\b[A-Za-z_]\w*::", "", name)
    name = re.sub(r"^(void|__global__ void)\s+", "", name.strip())
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            return name[:i].strip()
    return name


def read_kernels(path):
    """[(id, kernel name, {metric: value})] in launch order."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"') and '"Metric Name"' in line), None)
    if start is None:
        return []
    # ncu's own messages (==PROF==, ==WARNING==) may sit between the rows: only quoted lines are CSV.
    rows = csv.DictReader([line for line in lines[start:] if line.startswith('"')])
    kernels = {}
    for row in rows:
        try:
            kid = int(row["ID"])
        except (KeyError, TypeError, ValueError):
            continue
        k = kernels.setdefault(kid, [row.get("Kernel Name") or "?", {}])
        metric, unit, value = row.get("Metric Name"), (row.get("Metric Unit") or "").strip(), row.get("Metric Value")
        if metric not in METRICS or value is None:
            continue
        v = number(value)
        if v is not None and metric == TIME:
            v = v * TIME_UNITS[unit] if unit in TIME_UNITS else None
        k[1][metric] = v
    return [(kid, short_name(kernels[kid][0]), kernels[kid][1]) for kid in sorted(kernels)]


def read_methods(path):
    if not path:
        return []
    with open(path, errors="replace") as f:
        return [line[len(METHOD_LINE):].strip() for line in f if line.startswith(METHOD_LINE)]


def fmt(v, digits=1):
    return "n/a" if v is None else f"{v:.{digits}f}"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--methods", help="bench-quant's output, with its 'profile-once method:' lines")
    p.add_argument("--values", type=int, default=0, help="values per encode/decode: adds the GB/s of the fp32 input")
    p.add_argument("--marker", default="scale_kernel", help="the kernel that marks each encode and decode")
    a = p.parse_args(argv)
    kernels = read_kernels(a.csv)
    if not kernels:
        print(f"ncu_table: no kernel in {a.csv} (see ncu's messages in it: ERR_NVGPUCTRPERM means this user may not "
              "read the GPU's performance counters)")
        return 1
    labels = read_methods(a.methods)
    # Parts between marks: part 2m is method m's encode, 2m + 1 its decode; kernels before the first
    # mark (none, unless something else launched) are part -1.
    parts, part = [], -1
    for kid, name, m in kernels:
        if name == a.marker:
            part += 1
            continue
        parts.append((part, kid, name, m))
    marks = part + 1

    def method(part):
        if part < 0:
            return "(before the first mark)"
        i = part // 2
        return labels[i] if i < len(labels) else f"method #{i + 1}"

    print(f"{len(parts)} kernels profiled, {marks // 2} of {len(labels) or '?'} methods (time: gpu__time_duration.sum; "
          "DRAM: dram__throughput.avg.pct_of_peak_sustained_elapsed; occupancy: "
          "sm__warps_active.avg.pct_of_peak_sustained_active, achieved)")
    if labels and marks != 2 * len(labels):
        print(f"The profile holds {marks} marks for {len(labels)} methods: it stopped early (ncu's --launch-count "
              "or the step's time limit); the methods after the last mark are missing.")
    print()
    print("| method | phase | kernel | time (us) | DRAM % of peak | occupancy % |")
    print("|---|---|---|---:|---:|---:|")
    last = None
    for part, kid, name, m in parts:
        key = (part // 2, part % 2) if part >= 0 else None
        shown_method = method(part) if last is None or key is None or key[0] != last[0] else ""
        shown_phase = ("encode" if part % 2 == 0 else "decode") if part >= 0 and key != last else ""
        last = key
        print(f"| {shown_method} | {shown_phase} | {name} | {fmt(m.get(TIME), 2)} | {fmt(m.get(DRAM))} | "
              f"{fmt(m.get(OCCUPANCY))} |")
    # Per method: the sum of each phase's kernel times (what bench-quant's timed region would be with no
    # launch gaps and no host work).
    print()
    gbs = f" | encode GB/s | decode GB/s" if a.values else ""
    print(f"| method | encode (us) | kernels | decode (us) | kernels{gbs} |")
    print("|---|---:|---:|---:|---:" + ("|---:|---:|" if a.values else "|"))
    for i in range((marks + 1) // 2):
        cells = []
        for phase in (0, 1):
            times = [m.get(TIME) for part, _, _, m in parts if part == 2 * i + phase]
            total = None if not times or None in times else sum(times)
            cells.append((total, len(times)))
        row = f"| {method(2 * i)} | {fmt(cells[0][0], 2)} | {cells[0][1]} | {fmt(cells[1][0], 2)} | {cells[1][1]}"
        if a.values:
            for total, _ in cells:
                row += " | " + ("n/a" if not total else f"{4 * a.values / (total * 1e-6) / 1e9:.0f}")
        print(row + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
