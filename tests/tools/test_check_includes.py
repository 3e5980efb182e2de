#!/usr/bin/env python3
"""tools/check_includes.py can fail: on a small tree of its own it passes the allowed includes and
links and names the file, line and rule of an injected forbidden include, a forbidden library link
and a transport library linked by the ground floor.

  test_check_includes.py REPO_ROOT
"""
import subprocess
import sys
import tempfile
from pathlib import Path


def write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def run(script, root):
    r = subprocess.run([sys.executable, script, str(root)], capture_output=True, text=True)
    return r.returncode, r.stdout


def main():
    script = Path(sys.argv[1]) / "tools" / "check_includes.py"
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root, "framework/core/tensor.h", '#include "framework/core/check.h"\n')
        write(root, "exchange/plan.h", '#include "comm/communicator.h"\n#include "quant/quantizer.h"\n')
        write(root, "framework/CMakeLists.txt", "qtrain_library(qtrain_core\n  HOST core/a.cpp\n  LINK fmt::fmt)\n")
        write(root, "exchange/CMakeLists.txt", "qtrain_library(qtrain_exchange\n  HOST a.cpp\n  LINK qtrain_comm qtrain_quant)\n")
        code, out = run(script, root)
        if code != 0:
            print(f"FAIL: the allowed tree was refused:\n{out}")
            failures += 1
        cases = [
            ("quant/numerics.h", '#include "comm/communicator.h"\n', "quant/numerics.h:1",
             "quant/ may include only quant/, framework/core/"),
            ("comm/CMakeLists.txt", "qtrain_library(qtrain_comm\n  HOST a.cpp\n  LINK qtrain_core qtrain_exchange)\n",
             "comm/CMakeLists.txt:1", "qtrain_comm links qtrain_exchange"),
            ("framework/CMakeLists.txt", "qtrain_library(qtrain_core\n  HOST core/a.cpp\n  LINK fmt::fmt MPI::MPI_C)\n",
             "framework/CMakeLists.txt:1", "qtrain_core links MPI::MPI_C"),
        ]
        for rel, text, where, rule in cases:
            before = (root / rel).read_text() if (root / rel).exists() else None
            write(root, rel, text)
            code, out = run(script, root)
            if code == 0 or where not in out or rule not in out:
                print(f"FAIL: {rel} ({rule}) was not reported:\n{out}")
                failures += 1
            else:
                print(f"ok: {out.splitlines()[0]}")
            if before is None:
                (root / rel).unlink()
            else:
                write(root, rel, before)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
