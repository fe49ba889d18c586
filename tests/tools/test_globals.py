#!/usr/bin/env python3
"""tests/tools/test_globals.py: the library's mutable objects of static
storage (tools/globals, docs/DESIGN.md "Process state") stay at most
CEILING at namespace scope, with no dynamic initialiser of ours; and the
lister sorts what it reads: the process object at namespace scope, the
stats' per-thread counters thread-local, constants left out, a ceiling one
below the count refused.

Usage: test_globals.py TOOLS_GLOBALS LIBPAGEFAST CEILING
"""
import subprocess
import sys


def main():
    tool, lib, ceiling = sys.argv[1], sys.argv[2], int(sys.argv[3])
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)
            print(f"FAIL: {what}")

    run = subprocess.run([sys.executable, tool, "--lib", lib, "--max-namespace", str(ceiling)],
                         capture_output=True, text=True)
    print(run.stdout)
    check(run.returncode == 0, f"at most {ceiling} namespace-scope objects, no dynamic initialiser ({run.stderr})")
    lists, current = {}, None
    for line in run.stdout.splitlines():
        if not line.startswith(" "):
            current = line.split(":")[0]
            lists[current] = []
        else:
            lists[current].append(line.strip())
    names = {k: set(v) for k, v in lists.items()}
    check("pagefast::pool::g_process" in names.get("namespace-scope", ()), "the process object is listed")
    check("pagefast::stats::detail::t_calls" in names.get("thread-local", ()), "t_calls is thread-local")
    check(not any(n.split("::")[-1].startswith("kEntry") for v in names.values() for n in v),
          "constants are left out")
    check(not any("guard variable" in n or n.startswith(("vtable", "typeinfo")) for v in names.values() for n in v),
          "guard variables, vtables and typeinfo are left out")
    count = len(names.get("namespace-scope", ()))
    below = subprocess.run([sys.executable, tool, "--lib", lib, "--max-namespace", str(count - 1)],
                           capture_output=True, text=True)
    check(below.returncode == 1 and "above the ceiling" in below.stderr, "a ceiling below the count is refused")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
