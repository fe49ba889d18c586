#!/usr/bin/env python3
"""tests/sanitize/ipc_sanitize.py: one CUDA IPC case of tests/interpose
(ipc_safety_cases.py or ipc_cost_cases.py) with libpagefast-asan.so
preloaded behind its sanitizer runtimes into the exporter and the importer
(CASES_PRELOAD), as a user of a sanitizer build would run it. A sanitizer
report ends the process that made it (halt_on_error), which fails the case;
a report in the case's own output fails it too.

Usage: ipc_sanitize.py SCRIPT CASE --build <build dir> --lib <libpagefast-asan.so>
"""
import os
import re
import subprocess
import sys

from sanitize_cases import SANITIZER_OPTIONS, preload


def main():
    script, case = sys.argv[1], sys.argv[2]
    build = sys.argv[sys.argv.index("--build") + 1]
    lib = sys.argv[sys.argv.index("--lib") + 1]
    libs = preload(lib)
    if libs is None:
        return 1
    env = dict(os.environ, CASES_PRELOAD=" ".join(libs), **SANITIZER_OPTIONS)
    run = subprocess.run([sys.executable, script, case, "--build", build], env=env, capture_output=True, text=True,
                         timeout=600)
    out = run.stdout + run.stderr
    report = re.search(r"(AddressSanitizer|runtime error|UndefinedBehaviorSanitizer)", out)
    print(out[-3000:])
    ok = run.returncode == 0 and not report
    print(("PASS " if ok else "FAIL ") + f"{case} under asan+ubsan (rc {run.returncode})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
