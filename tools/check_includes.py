#!/usr/bin/env python3
"""Fails when a product source includes a header its folder may not see, or a CMake target links a
library its folder may not use (docs/design.md, "Which folder may include which"). The rules are an
allow-list: each folder names the folders it may include and link; anything else is a violation.
Prints file:line, the include or link and the rule for every violation.

Usage: check_includes.py [REPO_ROOT]   (default: the checkout this script is in)
"""
import re
import sys
from pathlib import Path

SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".def"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

CORE, MODEL = "framework/core/", "framework/model/"
# Folder -> the folders its sources may include (its own always). Ground floor first; a folder sees
# only the floors below it (docs/design.md draws them).
ALLOWED = {
    CORE: [],
    MODEL: [CORE],
    "quant/": [CORE],
    "layers/": [CORE],
    "optim/": [CORE],
    "data/": [CORE],
    "comm/": [CORE],
    "exchange/": [CORE, "comm/", "quant/"],
    "train/": [CORE, MODEL, "layers/", "optim/", "data/", "quant/", "comm/", "exchange/"],
    "tools/": [CORE, MODEL, "layers/", "optim/", "data/", "quant/", "comm/", "exchange/", "train/"],
    # The Python module: the quantizers and the exchange, over PyTorch's process groups; no trainer.
    "python/": [CORE, "quant/", "comm/", "exchange/"],
}
# The CMake library of each folder (qtrain_library names), for the link rules.
LIBRARY = {
    "qtrain_core": CORE, "qtrain_model": MODEL, "qtrain_quant": "quant/", "qtrain_layers": "layers/",
    "qtrain_optim": "optim/", "qtrain_data": "data/", "qtrain_comm": "comm/", "qtrain_exchange": "exchange/",
    "qtrain_train": "train/", "qtrain_cli": "tools/",
}
# Outside libraries that only some folders may link: the transports' (MPI, NCCL) stay out of the
# ground floor and of everything that is not a transport or above one.
RESTRICTED_LINKS = {
    "MPI::MPI_C": ["comm/", "exchange/", "train/", "tools/"],
    "qtrain_nccl": ["comm/", "exchange/", "train/", "tools/"],
}

# The headers of quant/ that other folders may include; the rest (numerics.h, det_sum.h, kernels.h,
# cpu_*.h, ...) are quant/'s own arithmetic and layout.
QUANT_PUBLIC = {
    "quant/quantizer.h", "quant/policy.h", "quant/method.h", "quant/wire.h", "quant/deferred_checks.h",
    "quant/encode_status.h",
}


def folder_of(path):
    for folder in ALLOWED:
        if path.startswith(folder):
            return folder
    return None


def include_violation(rel, inc):
    if inc.startswith("tests/"):
        return "product code never includes tests/"
    own, target = folder_of(rel), folder_of(inc)
    if target is None:
        return None  # a header outside the product folders (generated, third party)
    if target != own and target not in ALLOWED[own]:
        allowed = ", ".join([own] + ALLOWED[own])
        return f"{own} may include only {allowed}"
    if target == "quant/" and own != "quant/" and inc not in QUANT_PUBLIC:
        return "outside quant/, only quant/'s public headers (" + ", ".join(sorted(QUANT_PUBLIC)) + ")"
    return None


def include_violations(root):
    for folder in ALLOWED:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and (rule := include_violation(rel, m.group(1))):
                    yield f"{rel}:{number}: includes \"{m.group(1)}\": {rule}"


def link_violations(root):
    for cmake in sorted(root.glob("*/**/CMakeLists.txt")):
        text = cmake.read_text()
        for m in re.finditer(r"qtrain_library\((\w+)([^)]*)\)", text):
            own = LIBRARY.get(m.group(1))
            if own is None:
                continue
            body = m.group(2)
            links = re.findall(r"(?:PRIVATE_)?LINK\s+([^\n]*(?:\n\s+(?![A-Z_]+\s)[^\n]*)*)", body)
            line = text[:m.start()].count("\n") + 1
            for lib in " ".join(links).split():
                target = LIBRARY.get(lib)
                if target and target != own and target not in ALLOWED[own]:
                    yield f"{cmake.relative_to(root)}:{line}: {m.group(1)} links {lib}: {own} may use only " + \
                          ", ".join([own] + ALLOWED[own])
                if lib in RESTRICTED_LINKS and own not in RESTRICTED_LINKS[lib]:
                    yield f"{cmake.relative_to(root)}:{line}: {m.group(1)} links {lib}: only " + \
                          ", ".join(RESTRICTED_LINKS[lib]) + " may link it"


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    found = list(include_violations(root)) + list(link_violations(root))
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} forbidden include(s) or link(s); the floors are described in docs/design.md")
        return 1
    print("includes and links follow the folder rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
