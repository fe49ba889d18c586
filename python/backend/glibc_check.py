#!/usr/bin/env python3
"""python/backend/glibc_check.py: fails when a shipped binary needs more than
the glibc 2.28 baseline (docs/PACKAGING.md): a symbol version newer than
GLIBC_2.28, any libstdc++/libgcc_s version (the C++ runtime is linked in),
or a DT_NEEDED library outside glibc's own.

    glibc_check.py BINARY...              every binary must pass
    glibc_check.py --must-fail BINARY     the check must reject this one

Reads `readelf --dyn-syms` and `readelf -d` (binutils). Exit 0 on success."""
import re
import subprocess
import sys

BASELINE = (2, 28)
ALLOWED_NEEDED = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1",
                  "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}
# "pthread_create@GLIBC_2.34 (2)" in readelf's symbol column.
SYMBOL = re.compile(r"\s(\S+?)@@?(GLIBC|GLIBCXX|CXXABI|GCC)_([0-9][0-9.]*)\b")


def problems(path):
    found = []
    # readelf reads any architecture's ELF (objdump -T only the host's).
    dyn = subprocess.run(["readelf", "-W", "--dyn-syms", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    if dyn.returncode != 0 or "Symbol table" not in dyn.stdout:
        return ["readelf --dyn-syms failed: " + dyn.stderr.strip()]
    for line in dyn.stdout.splitlines():
        m = SYMBOL.search(line)
        if not m:
            continue
        name, family, text = m.group(1), m.group(2), m.group(3)
        number = tuple(int(x) for x in text.split(".") if x)
        if family == "GLIBC" and number > BASELINE:
            found.append("%s needs GLIBC_%s" % (name, text))
        elif family != "GLIBC":
            found.append("%s needs %s_%s (C++ runtime not linked in)" % (name, family, text))
    dyn = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True)
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn.stdout):
        if lib not in ALLOWED_NEEDED:
            found.append("DT_NEEDED %s is not part of glibc" % lib)
    return found


def main(argv):
    if len(argv) == 2 and argv[0] == "--must-fail":
        found = problems(argv[1])
        if not found:
            print("FAIL: the check accepted %s, which should need more than GLIBC_2.28" % argv[1])
            return 1
        print("ok: the check rejects %s (%s)" % (argv[1], found[0]))
        return 0
    failed = 0
    for path in argv:
        found = problems(path)
        for p in found:
            print("%s: %s" % (path, p))
        if found:
            failed += 1
        else:
            print("ok: %s needs nothing newer than GLIBC_%d.%d" % (path, *BASELINE))
    return 1 if failed or not argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
