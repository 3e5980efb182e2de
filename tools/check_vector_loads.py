#!/usr/bin/env python3
"""Static check of the streaming codec kernels (ctest quant_vector_loads, tests/cuemu/CMakeLists.txt).

Each kernel named in REQUIRED must move its values with 128-bit global accesses inside its main loop:
loads for an encoder (LDG.E.128 in SASS, ld.global[.nc].v4 in PTX), stores for a decoder (STG.E.128,
st.global.v4), and that loop must not touch local memory (LDL/STL, ld.local/st.local). The main loop
is the innermost loop (a backward branch) around such an access. Every template instantiation of a
named kernel is checked, and each name must match at least one kernel, so a rename fails loudly.
Separately, no function in ptxas's reports (--resource-usage, kept beside each object as OBJ.ptxas by
tests/cuemu/tools/ptxas_capture.sh) may spill registers.

  check_vector_loads.py [--ptx F.ptx...] [--cuobjdump PATH --objects F.o...] [--ptxas F.o...]
                        [--only FILE:REGEX:load|store ... | --only none]

With --cuobjdump the SASS (sm_90) of the objects is read; otherwise the PTX files. --only replaces
the table (the self-tests ask for a kernel that must fail).
"""
import argparse
import os
import re
import subprocess
import sys

# (source file, kernel regex over the mangled name, access that must be 128 bits wide in the main loop)
REQUIRED = [
    ("common.cu", r"cast_encode_vec_kernel", "load"),
    ("common.cu", r"cast_decode_vec_kernel", "store"),
    ("common.cu", r"bucket_max_vec_kernel", "load"),  # qsgd's and terngrad's bucket max
    ("fp8.cu", r"span_max_bits_kernelILb[01]ELb1E", "load"),  # quant/minifloat.cuh, Vec = true
    ("dettmers8.cu", r"span_max_bits_kernelILb[01]ELb1E", "load"),
    ("fp8.cu", r"encode_vec_kernel", "load"),
    ("fp8.cu", r"decode_vec_kernel", "store"),
    ("mx.cu", r"encode_vec_kernel", "load"),
    ("mx.cu", r"decode_vec_kernel", "store"),
    ("nvfp4.cu", r"encode_vec_kernel", "load"),
    ("nvfp4.cu", r"decode_vec_kernel", "store"),
    ("signsgd.cu", r"check_kernelILb1E", "load"),
    ("signsgd.cu", r"pack_vec_kernel", "load"),
    ("efsign.cu", r"pack_vec_kernel", "load"),
    ("sign_words.cu", r"unpack_signs_vec_kernel", "store"),
    ("qsgd.cu", r"encode_vec_kernel", "load"),
    ("qsgd.cu", r"encode_fused_kernel", "load"),
    ("qsgd.cu", r"decode_vec_kernel", "store"),
    ("onebit.cu", r"pack_vec_kernel", "load"),
    ("onebit.cu", r"decode_vec_kernel", "store"),
]

PTX_WIDE = {
    "load": re.compile(r"\bld\.global(\.[\w:]+)*\.v4\.(f32|b32|u32|s32)\b"),
    "store": re.compile(r"\bst\.global(\.[\w:]+)*\.v4\.(f32|b32|u32|s32)\b"),
}
PTX_LOCAL = re.compile(r"\b(ld|st)\.local\b")
SASS_WIDE = {"load": re.compile(r"\bLDG\.E\.128\b|\bLDG\.E\.[\w.]*128\b"), "store": re.compile(r"\bSTG\.E\.128\b|\bSTG\.E\.[\w.]*128\b")}
SASS_LOCAL = re.compile(r"\b(LDL|STL)\b")


def source_of(path):
    """fp8.cu for .../fp8.ptx, .../fp8.cu.o, .../fp8.cu.ptx."""
    base = os.path.basename(path)
    for suffix in (".o", ".ptx", ".obj"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base if base.endswith(".cu") else base + ".cu"


def ptx_functions(text):
    """{kernel: [(kind, payload)]}: kind 'label' (name), 'branch' (target), 'insn' (text)."""
    funcs = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"^(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)", line)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        if re.match(r"^(?:\.visible\s+|\.weak\s+)?\.func\b", line):
            current = None
            continue
        if current is None or not line or line.startswith("//"):
            continue
        m = re.match(r"^(\$[\w$]+):", line)
        if m:
            current.append(("label", m.group(1)))
            continue
        m = re.search(r"\bbra(?:\.uni)?\s+(\$[\w$]+);", line)
        if m:
            current.append(("branch", m.group(1)))
            continue
        current.append(("insn", line))
    return funcs


def sass_functions(text):
    """The same from cuobjdump -sass: labels are instruction addresses."""
    funcs = {}
    current = None
    for raw in text.splitlines():
        m = re.search(r"Function\s*:\s*([\w$]+)", raw)
        if m:
            current = funcs.setdefault(m.group(1), [])
            continue
        if current is None:
            continue
        m = re.match(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*)$", raw)
        if not m:
            continue
        addr, insn = int(m.group(1), 16), m.group(2)
        current.append(("label", addr))
        b = re.search(r"\bBRA\b[^;]*?\b0x([0-9a-f]+)", insn)
        if b:
            current.append(("branch", int(b.group(1), 16)))
        current.append(("insn", insn))
    return funcs


def main_loop_verdict(items, wide, local):
    """None if a loop holds a `wide` access and the innermost such loop no local access; else why not."""
    insns = []  # (position, text)
    labels = {}
    loops = []  # (start, end) positions of backward branches
    for pos, (kind, payload) in enumerate(items):
        if kind == "label":
            labels.setdefault(payload, pos)
        elif kind == "branch":
            if payload in labels and labels[payload] <= pos:
                loops.append((labels[payload], pos))
        else:
            insns.append((pos, payload))
    wide_at = [pos for pos, text in insns if wide.search(text)]
    if not wide_at:
        return "no 128-bit access at all"
    inside = [(e - s, s, e) for s, e in loops if any(s <= p <= e for p in wide_at)]
    if not inside:
        return "its 128-bit accesses are outside every loop"
    _, s, e = min(inside)
    spilled = [text for pos, text in insns if s <= pos <= e and local.search(text)]
    if spilled:
        return "its main loop touches local memory: " + spilled[0]
    return None


def check_kernels(funcs_by_source, required, wide_map, local):
    failures = 0
    for source, pattern, access in required:
        funcs = funcs_by_source.get(source)
        if funcs is None:
            print(f"FAIL {source}: no machine code read for it")
            failures += 1
            continue
        names = [n for n in funcs if re.search(pattern, n)]
        if not names:
            print(f"FAIL {source}: no kernel matches {pattern}")
            failures += 1
            continue
        for name in sorted(names):
            why = main_loop_verdict(funcs[name], wide_map[access], local)
            print(f"{'FAIL' if why else 'ok  '} {source} {access:5} {name}" + (f": {why}" if why else ""))
            failures += 1 if why else 0
    return failures


def check_spills(objects):
    failures = 0
    checked = 0
    for obj in objects:
        report = obj + ".ptxas"
        try:
            text = open(report, encoding="utf-8").read()
        except OSError as e:
            print(f"FAIL {report}: {e}")
            failures += 1
            continue
        name = None
        for line in text.splitlines():
            m = re.search(r"Function properties for ([\w$]+)", line)
            if m:
                name = m.group(1)
                continue
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and name:
                checked += 1
                if int(m.group(2)) or int(m.group(3)):
                    print(f"FAIL {source_of(obj)} spills {m.group(2)}/{m.group(3)} bytes (stores/loads): {name}")
                    failures += 1
                name = None
    if objects and checked == 0:
        print("FAIL no 'bytes spill stores' line in the reports: has ptxas's format changed?")
        failures += 1
    print(f"spills: {checked} functions of {len(objects)} objects checked, {failures} failing")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ptx", nargs="*", default=[])
    ap.add_argument("--cuobjdump")
    ap.add_argument("--objects", nargs="*", default=[])
    ap.add_argument("--ptxas", nargs="*", default=[], help="objects whose OBJ.ptxas reports to read")
    ap.add_argument("--only", nargs="*", help="FILE:REGEX:load|store entries replacing the table, or none")
    args = ap.parse_args()

    required = REQUIRED
    if args.only is not None:
        required = [] if args.only == ["none"] else [tuple(e.split(":", 2)) for e in args.only]
    failures = 0
    if required:
        funcs_by_source = {}
        if args.cuobjdump:
            for obj in args.objects:
                sass = subprocess.run([args.cuobjdump, "-sass", "-arch", "sm_90", obj], capture_output=True,
                                      text=True, check=True).stdout
                funcs_by_source.setdefault(source_of(obj), {}).update(sass_functions(sass))
            wide_map, local = SASS_WIDE, SASS_LOCAL
            print("machine code: cuobjdump -sass (sm_90)")
        else:
            for ptx in args.ptx:
                with open(ptx, encoding="utf-8") as f:
                    funcs_by_source.setdefault(source_of(ptx), {}).update(ptx_functions(f.read()))
            wide_map, local = PTX_WIDE, PTX_LOCAL
            print("machine code: PTX (no cuobjdump; a v4 access is one 128-bit instruction)")
        failures += check_kernels(funcs_by_source, required, wide_map, local)
    if args.ptxas:
        failures += check_spills(args.ptxas)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
