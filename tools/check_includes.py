#!/usr/bin/env python3
"""Fails when a product source includes a header its folder may not see (docs/design.md, "Which
folder may include which"). Prints file:line, the include and the rule for every violation.

Usage: check_includes.py [REPO_ROOT]   (default: the checkout this script is in)
"""
import re
import sys
from pathlib import Path

PRODUCT_FOLDERS = ["framework", "layers", "optim", "quant", "comm", "data", "tools"]
SOURCE_SUFFIXES = {".h", ".cpp", ".cu", ".cuh", ".def"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')

# The headers of quant/ that other folders may include; the rest (numerics.h, det_sum.h, kernels.h,
# cpu_*.h, ...) are quant/'s own arithmetic and layout.
QUANT_PUBLIC = {
    "quant/quantizer.h", "quant/policy.h", "quant/method.h", "quant/wire.h", "quant/deferred_checks.h",
    "quant/encode_status.h",
}

CORE = "framework/core/"
MODEL = "framework/model/"
TRAIN = "framework/train/"


def starts(path, *prefixes):
    return any(path.startswith(p) for p in prefixes)


# Each rule: (applies to the including file, forbids the included path, the rule as printed).
RULES = [
    (lambda f: starts(f, CORE),
     lambda inc: not starts(inc, CORE),
     "framework/core/ includes only framework/core/"),
    (lambda f: starts(f, MODEL),
     lambda inc: not starts(inc, CORE, MODEL),
     "framework/model/ includes only framework/core/ and framework/model/ (layers come through the registry)"),
    (lambda f: not starts(f, TRAIN, "tools/"),
     lambda inc: starts(inc, TRAIN),
     "only framework/train/ and tools/ include framework/train/"),
    (lambda f: not starts(f, MODEL, TRAIN, "tools/"),
     lambda inc: starts(inc, MODEL),
     "only framework/model/, framework/train/ and tools/ include framework/model/"),
    (lambda f: starts(f, "quant/"),
     lambda inc: starts(inc, "comm/", "layers/"),
     "quant/ never includes comm/ or layers/"),
    (lambda f: starts(f, "layers/"),
     lambda inc: starts(inc, "comm/", "quant/"),
     "layers/ never includes comm/ or quant/"),
    (lambda f: starts(f, "data/"),
     lambda inc: starts(inc, "layers/", "comm/"),
     "data/ never includes layers/ or comm/"),
    (lambda f: starts(f, "optim/"),
     lambda inc: starts(inc, "comm/"),
     "optim/ never includes comm/"),
    (lambda f: not starts(f, "quant/"),
     lambda inc: starts(inc, "quant/") and inc not in QUANT_PUBLIC,
     "outside quant/, only quant/'s public headers (" + ", ".join(sorted(QUANT_PUBLIC)) + ")"),
    (lambda f: True,
     lambda inc: starts(inc, "tests/"),
     "product code never includes tests/"),
]


def violations(root):
    for folder in PRODUCT_FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                inc = m.group(1)
                for applies, forbids, rule in RULES:
                    if applies(rel) and forbids(inc):
                        yield f"{rel}:{number}: includes \"{inc}\": {rule}"


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    found = list(violations(root))
    for v in found:
        print(v)
    if found:
        print(f"{len(found)} forbidden include(s); the tiers are described in docs/design.md")
        return 1
    print("includes follow the folder rules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
