#!/usr/bin/env python3
"""tests/sanitize/sanitize_cases.py: the pool's preload cases (pool_preload
against the fake driver) with libpagefast-asan.so preloaded behind its
sanitizer runtimes, as a user of a sanitizer build would run it. Any
AddressSanitizer or UndefinedBehaviorSanitizer report fails the case.

Usage: sanitize_cases.py --build <build dir> --lib <libpagefast-asan.so>
"""
import os
import re
import subprocess
import sys

CASES = ["reuse", "capture", "sizes", "fork", "threads", "meminfo", "faults", "capi", "devices", "peers"]


# The library leaks on purpose at exit (no driver call in a destructor).
SANITIZER_OPTIONS = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:halt_on_error=1",
                     "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}


def preload(lib):
    """What LD_PRELOAD needs for `lib`: its sanitizer runtimes, then it; None
    (a FAIL line printed) when it does not link AddressSanitizer's."""
    out = subprocess.run(["ldd", lib], capture_output=True, text=True).stdout
    rt = re.findall(r"=> (\S*lib(?:asan|ubsan)\S*)", out)
    if not any("asan" in r for r in rt):
        print(f"FAIL {lib} does not link the AddressSanitizer runtime ({rt})")
        return None
    return rt + [lib]


def main():
    build = sys.argv[sys.argv.index("--build") + 1]
    lib = sys.argv[sys.argv.index("--lib") + 1]
    libs = preload(lib)
    if libs is None:
        return 1
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PAGEFAST") or k.startswith("FAKECUDA") or k == "LD_PRELOAD")}
    env.update(SANITIZER_OPTIONS)
    env.update({"LD_LIBRARY_PATH": os.path.join(build, "tests", "fakecuda"),
                "LD_PRELOAD": " ".join(libs),
                "PAGEFAST_STATS": "stderr"})
    exe = os.path.join(build, "tests", "pool", "pool_preload")
    failures = 0
    for case in CASES:
        e = dict(env)
        if case in ("devices", "peers"):
            e["FAKECUDA_DEVICES"] = "2"
        r = subprocess.run([exe, case], env=e, capture_output=True, text=True, timeout=300)
        report = re.search(r"(AddressSanitizer|runtime error|LeakSanitizer|UndefinedBehaviorSanitizer)", r.stderr)
        m = re.search(r'"cuMemAlloc_v2": (\d+)', r.stderr)
        counted = m is not None and int(m.group(1)) > 0
        ok = r.returncode == 0 and f"ok {case}" in r.stdout and not report and counted
        print(("PASS " if ok else "FAIL ") + f"{case} under asan+ubsan (rc {r.returncode}, pagefast counted "
              f"calls: {counted})")
        if not ok:
            print(r.stdout[-600:])
            print(r.stderr[-2000:])
            failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
