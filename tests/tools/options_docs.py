#!/usr/bin/env python3
"""tests/tools/options_docs.py: the documents and the code agree with the
options table (policy/options.cpp):

- docs/OPTIONS.md's variable and PAGEFAST_CONF key tables and tools/pagefast-run's
  --help list are what `pagefast-options --section` generates (regenerate
  with tools/options/update-docs);
- the built pagefast-run --help prints that list;
- no C or C++ source of the library or the tools names a variable of its own
  in getenv("..."): they name it by its row (option_name(Opt::...));
- every PAGEFAST_* variable the launcher and the Python scripts read, and
  every one the Python package names, is a row of the table.

usage: options_docs.py --build DIR --source DIR
"""
import argparse
import os
import re
import subprocess
import sys

FAILURES = []


def check(condition, what):
    print(("ok: " if condition else "FAIL: ") + what)
    if not condition:
        FAILURES.append(what)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    tool = os.path.join(args.build, "tools", "pagefast-options")
    readme = os.path.join(args.source, "docs", "OPTIONS.md")
    launcher_src = os.path.join(args.source, "tools", "pagefast-run")

    r = subprocess.run([tool, "--check", readme, launcher_src], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    print(r.stdout + r.stderr)
    check(r.returncode == 0, "docs/OPTIONS.md and tools/pagefast-run carry the table's sections (tools/options/update-docs)")

    section = subprocess.run([tool, "--section", "help"], stdout=subprocess.PIPE, text=True, check=True).stdout
    lines = section.splitlines(keepends=True)
    check(lines[0].strip() == "cat <<'OPTIONS'" and lines[-1].strip() == "OPTIONS", "the help section is a here-document")
    listing = "".join(lines[1:-1])
    help_out = subprocess.run(["bash", os.path.join(args.build, "tools", "pagefast-run"), "--help"],
                              stdout=subprocess.PIPE, text=True).stdout
    check(listing in help_out, "pagefast-run --help prints the table's list of variables and keys")

    rows = subprocess.run([tool], stdout=subprocess.PIPE, text=True, check=True).stdout.splitlines()
    names = {line.split()[0] for line in rows}
    check("PAGEFAST_IPC_DIR" in names and "chunk_size" in names, f"the table lists {len(names)} names")

    # C and C++: getenv only through the table. tools/gpu holds the GPU
    # benchmark programs, whose BENCH_* knobs are theirs, not pagefast's.
    literal = re.compile(r'getenv\(\s*"([A-Za-z_0-9]+)"')
    for top in ("interpose", "policy", "numa", "tools"):
        for root, _, files in os.walk(os.path.join(args.source, top)):
            if os.path.relpath(root, args.source).startswith(os.path.join("tools", "gpu")):
                continue
            for name in files:
                if not name.endswith((".cpp", ".h", ".c", ".cu")):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    found = literal.findall(f.read())
                check(not found, f"{os.path.relpath(path, args.source)}: no getenv(\"...\") literal {found or ''}")

    # Scripts: every PAGEFAST_* variable they read is a row.
    reads = re.compile(r'(?:environ\.get\(\s*|environ\[\s*|\$\{)"?(PAGEFAST_[A-Z_]+)')
    scripts = [launcher_src, os.path.join(args.source, "tools", "pagefast-replay"),
               os.path.join(args.source, "tools", "gpu-check"), os.path.join(args.source, "tools", "gpu-run-all")]
    for root, _, files in os.walk(os.path.join(args.source, "tools", "bench")):
        scripts += [os.path.join(root, f) for f in files if f.endswith(".py")]
    for path in scripts:
        if not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            read = set(reads.findall(f.read()))
        missing = sorted(read - names)
        check(not missing, f"{os.path.relpath(path, args.source)}: every PAGEFAST_* it reads is a row {missing or ''}")

    # The Python package (pagefast's launcher module): it reads the
    # environment through tuples of names, so every PAGEFAST_* name quoted
    # there is a row.
    quoted = re.compile(r'"(PAGEFAST_[A-Z_]+)"')
    package = os.path.join(args.source, "python", "pagefast")
    for name in sorted(os.listdir(package)) if os.path.isdir(package) else []:
        if not name.endswith(".py"):
            continue
        path = os.path.join(package, name)
        with open(path, encoding="utf-8", errors="replace") as f:
            missing = sorted(set(quoted.findall(f.read())) - names)
        check(not missing, f"python/pagefast/{name}: every PAGEFAST_* it names is a row {missing or ''}")

    print(f"{len(FAILURES)} failed checks")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
