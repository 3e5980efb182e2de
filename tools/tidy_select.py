#!/usr/bin/env python3
"""Chooses the files tools/check_tidy.sh gives clang-tidy, and the cache key of each.

Usage: tidy_select.py BUILD_DIR ROOT SALT_FILE [--changed LIST_FILE]

Prints one line per .cpp file of BUILD_DIR/compile_commands.json to check (qtrain's own: not tests/,
not the build folders): "KEY PATH", PATH relative to ROOT. KEY is a SHA-256 of everything a finding
can depend on: SALT_FILE (clang-tidy's version and the .clang-tidy set, written by check_tidy.sh), the
compile command (ROOT replaced, so that checkouts share keys), and the content of the file and of every
header it includes, as the build's last compile of it listed them (ninja's deps log). A file whose
dependencies ninja does not know, or knows as stale, gets the key "-": it is always checked.

--changed LIST_FILE: only the files a change touched: those whose own path or one of whose headers is
named in LIST_FILE (paths relative to ROOT, one a line). Files without known dependencies are kept.
"""
import hashlib
import json
import os
import shlex
import subprocess
import sys


def product_entries(db_path, root):
    seen = {}
    for entry in json.load(open(db_path)):
        path = os.path.realpath(os.path.join(entry["directory"], entry["file"]))
        rel = os.path.relpath(path, root)
        # One entry per source (the sanitizer and fuzzing copies of a library compile the same files).
        if not rel.endswith(".cpp") or rel.startswith(("..", "build", "tests/")) or rel in seen:
            continue
        seen[rel] = entry
    return seen


def object_of(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    return args[args.index("-o") + 1] if "-o" in args else None


def ninja_deps(build):
    """{object: [dependency paths as ninja wrote them]} for the objects whose deps are VALID."""
    try:
        out = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    deps, current = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" "):
            target, _, status = line.partition(": ")
            current = target if status.endswith("(VALID)") else None
            if current:
                deps[current] = []
        elif line.strip() and current:
            deps[current].append(line.strip())
    return deps


class Hasher:
    def __init__(self):
        self.cache = {}

    def file(self, path):
        if path not in self.cache:
            try:
                with open(path, "rb") as f:
                    self.cache[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                self.cache[path] = "missing"
        return self.cache[path]


def main():
    build, root, salt_file = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
    changed = None
    if len(sys.argv) > 5 and sys.argv[4] == "--changed":
        changed = {line.strip() for line in open(sys.argv[5]) if line.strip()}
    entries = product_entries(os.path.join(build, "compile_commands.json"), root)
    deps = ninja_deps(build)
    salt = open(salt_file, "rb").read()
    hasher = Hasher()
    for rel, entry in sorted(entries.items()):
        obj = object_of(entry)
        paths = deps.get(obj) if obj else None
        if paths is None:
            print("-", rel)
            continue
        absolute = [os.path.realpath(os.path.join(entry["directory"], p)) for p in paths]
        relative = [os.path.relpath(p, root) for p in absolute]
        if changed is not None and rel not in changed and not changed.intersection(relative):
            continue
        key = hashlib.sha256(salt)
        key.update(entry.get("command", " ".join(entry.get("arguments", []))).replace(root, "@ROOT@").encode())
        key.update(hasher.file(os.path.join(root, rel)).encode())
        for a, r in zip(absolute, relative):
            name = a if r.startswith("..") else r  # paths in the checkout named relative to it
            key.update(f"\n{name} {hasher.file(a)}".encode())
        print(key.hexdigest(), rel)


if __name__ == "__main__":
    main()
