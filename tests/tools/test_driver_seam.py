#!/usr/bin/env python3
"""tests/tools/test_driver_seam.py: driver_seam.py on small trees of its
own: a clean one passes (the seam's calls, the doors' forms by the entry's
`symbol`, the loader filling the table, a call named in a comment); each
kind of offence, put into a file of its own, fails with its kind named:
a call by a cu* name (through `->` and `.`), each form of a null test, a
plain read, a pointer to member, a call by name in the doors, the doors'
form outside them; and a seam that lacks a function, or is missing.

usage: test_driver_seam.py driver_seam.py
"""
import os
import subprocess
import sys
import tempfile

SEAM_CPP = """// the seam
#include "interpose/driver.h"
%s
"""
DOORS = r"""// interpose/hooks.cpp
#define PF_FORWARD(symbol, args)                      \
  do {                                                \
    const RealDriver* real = real_driver();           \
    if (!real || !real->symbol) return kMissing;      \
    return real->symbol args;                         \
  } while (0)
#define PF_CALL_REAL(symbol, args) (real && real->symbol ? real->symbol args : kMissing)
#define PF_CAPTURE_END(symbol)                                          \
  CUresult symbol(CUstream stream, CUgraph* graph) {                   \
    const CUresult result = real->symbol(stream, graph);               \
    return result;                                                     \
  }
CUresult hook() { return driver::ctx_synchronize(real_driver()); }  // not real->cuCtxSynchronize()
"""
LOADER = r"""// interpose/loader.cpp
#define PF_RESOLVE(symbol, proc, since, until, ptds, pfn, ...) \
  d->symbol = reinterpret_cast<pfn>(sym(handle, #symbol));     \
  d->entry_address[i++] = reinterpret_cast<void*>(d->symbol);
"""
CLEAN = {
    "interpose/hooks.cpp": DOORS,
    "interpose/loader.cpp": LOADER,
    "interpose/pool/glue.cpp": "/* real->cuMemMap(a, b) in a comment */\nint f() { return driver::map(r, 0, 0, 0, 0, 0); }\n",
    "policy/pure.h": "struct S { int cuda_bytes; };\nint g(S s) { return s.cuda_bytes; }\n",
}
# (file, text, what the checker must say about it)
OFFENCES = [
    ("interpose/pool/a.cpp", "void f() { real->cuCtxSynchronize(); }\n", "calls cuCtxSynchronize"),
    ("interpose/ipc/b.cpp", "void f() { real_.cuMemCreate (&h, 1, &p, 0); }\n", "calls cuMemCreate"),
    ("interpose/c.cpp", "void f() { b.real->cuStreamDestroy_v2(s); }\n", "calls cuStreamDestroy_v2"),
    ("interpose/d.cpp", "bool f() { if (!real->cuStreamCreate) return false; return true; }\n",
     "tests for null cuStreamCreate"),
    ("interpose/e.cpp", "bool f() { return ! real->cuMemHostAlloc; }\n", "tests for null cuMemHostAlloc"),
    ("interpose/f.cpp", "bool f() { return real->cuMemFreeHost && x; }\n", "tests for null cuMemFreeHost"),
    ("interpose/g.cpp", "int f() { return real->cuGetErrorName ? 1 : 0; }\n", "tests for null cuGetErrorName"),
    ("interpose/h.cpp", "bool f() { return real->cuMemcpyDtoH_v2 == nullptr; }\n", "tests for null cuMemcpyDtoH_v2"),
    ("interpose/i.cpp", "bool f() { return real_->cuMemcpyHtoD_v2 != nullptr; }\n",
     "tests for null cuMemcpyHtoD_v2"),
    ("policy/j.h", "bool f() { return x || real->cuCtxGetDevice; }\n", "tests for null cuCtxGetDevice"),
    ("interpose/k.cpp", "void f() { if (real->cuCtxSetCurrent) g(); }\n", "tests for null cuCtxSetCurrent"),
    ("interpose/l.cpp", "auto f() { auto fn = real->cuMemGetInfo_v2; return fn; }\n", "reads cuMemGetInfo_v2"),
    ("interpose/m.cpp", "bool f(PFN RealDriver::*fn) { return real->*fn; }\n", "pointer to member"),
    ("interpose/hooks.cpp", DOORS + "CUresult h() { return real->cuMemGetInfo_v2(a, b); }\n",
     "calls cuMemGetInfo_v2"),
    ("interpose/pool/n.cpp", "#define CALL(symbol, args) real->symbol args\n", "calls the table's `symbol`"),
    ("interpose/pool/o.cpp", "#define HAS(symbol) (!real->symbol)\n", "tests for null the table's `symbol`"),
]


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def run(checker, root):
    p = subprocess.run([sys.executable, checker, "--source", root], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def make_tree(root, functions, extra=None):
    calls = "\n".join("CUresult f%d() { return real->%s(); }" % (i, fn) for i, fn in enumerate(functions))
    files = dict(CLEAN)
    files["interpose/driver.cpp"] = SEAM_CPP % calls
    files["interpose/driver.h"] = "inline bool has(const RealDriver* r, F RealDriver::*fn) { return r && r->*fn; }\n"
    files.update(extra or {})
    write(root, files)


def main():
    checker = sys.argv[1]
    sys.dont_write_bytecode = True  # nothing written beside the sources
    sys.path.insert(0, os.path.dirname(os.path.abspath(checker)))
    import driver_seam
    failures = []

    with tempfile.TemporaryDirectory() as root:
        make_tree(root, driver_seam.FUNCTIONS)
        rc, out = run(checker, root)
        if rc != 0 or not out.startswith("ok:"):
            failures.append("the clean tree failed:\n" + out)

    for rel, text, expected in OFFENCES:
        with tempfile.TemporaryDirectory() as root:
            make_tree(root, driver_seam.FUNCTIONS, {rel: text})
            rc, out = run(checker, root)
            if rc != 1 or ("FAIL: outside interpose/driver.{h,cpp}: %s:" % rel) not in out or expected not in out:
                failures.append("%s (%s) not caught as '%s':\n%s" % (rel, text.strip(), expected, out))

    with tempfile.TemporaryDirectory() as root:
        make_tree(root, [fn for fn in driver_seam.FUNCTIONS if fn != "cuStreamIsCapturing"])
        rc, out = run(checker, root)
        if rc != 1 or "the seam does not call cuStreamIsCapturing" not in out:
            failures.append("a seam lacking cuStreamIsCapturing passed:\n" + out)

    with tempfile.TemporaryDirectory() as root:
        write(root, CLEAN)
        rc, out = run(checker, root)
        if rc != 1 or "no seam" not in out:
            failures.append("a tree without the seam passed:\n" + out)

    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("ok: the clean tree passes; %d offences, a seam lacking a function and no seam are caught" % len(OFFENCES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
