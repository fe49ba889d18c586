#!/usr/bin/env python3
"""tests/tools/driver_seam.py: every driver call pagefast makes for itself
goes through one seam, interpose/driver.{h,cpp} (its header says what it
covers), and only the seam asks whether the loaded driver has a function.
No other C or C++ source under interpose/ or policy/

  - calls a driver function through the table: `real->cuMemMap(...)`,
    `real_.cuMemCreate (...)`, any cu* name;
  - tests one for null: `!real->cuXxx`, `real->cuXxx &&`, `real->cuXxx ?`,
    `real->cuXxx == nullptr` (or `!=`, `||`);
  - uses one otherwise (`fn = real->cuXxx`), or reaches the table through
    a pointer to member (`real->*fn`).

A program's call the doors forward unchanged is the doors' job, not the
seam's: the macros of interpose/hooks*.{cpp,h} reach the table by the
entry's macro parameter, `real->symbol args` and `!real->symbol`. That form
is allowed there and nowhere else; a cu* name is allowed nowhere, the doors
included. The seam itself must call each function of FUNCTIONS.

usage: driver_seam.py --source DIR
"""
import argparse
import os
import re
import sys

SEAM = {"interpose/driver.h", "interpose/driver.cpp"}
# The doors: the hooks, whose table macros name the entry `symbol`.
DOORS = re.compile(r"^interpose/hooks[\w-]*\.(?:cpp|h)$")
FUNCTIONS = [
    # Virtual memory management.
    "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemAddressReserve",
    "cuMemAddressFree", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
    "cuMemRetainAllocationHandle", "cuMemGetAllocationPropertiesFromHandle", "cuMemGetAllocationGranularity",
    # Contexts, devices, errors.
    "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxSetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2",
    "cuCtxSynchronize", "cuDevicePrimaryCtxGetState", "cuDeviceGetAttribute", "cuDeviceTotalMem_v2",
    "cuDeviceGetPCIBusId", "cuMemGetInfo_v2", "cuGetErrorName",
    # Streams, copies, host memory.
    "cuStreamCreate", "cuStreamSynchronize", "cuStreamDestroy_v2", "cuStreamIsCapturing", "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyHtoDAsync_v2", "cuMemHostAlloc", "cuMemFreeHost",
    "cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemGetAccess",
    # Regions' pitched allocations; the driver's stream-ordered pool.
    "cuMemAllocPitch_v2", "cuMemFree_v2", "cuDeviceGetDefaultMemPool", "cuMemPoolGetAttribute",
]
SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".S")

# A member of the table by a cu* name, through a pointer or a reference;
# the doors' form, by the entry macro's parameter; a pointer to member.
BY_NAME = re.compile(r"(?:->|\.)\s*(cu[A-Z]\w*)\b")
BY_SYMBOL = re.compile(r"(?:->|\.)\s*(symbol)\b")
POINTER_TO_MEMBER = re.compile(r"->\*")
# The object the member is read from (`real`, `b.real`, `real_`), at the
# end of what precedes the member.
OBJECT = re.compile(r"(?:[A-Za-z_]\w*\s*(?:->|\.)\s*)*[A-Za-z_]\w*\s*$")
TESTS_AFTER = ("&&", "||", "?", "==", "!=")
TESTS_BEFORE = ("!", "&&", "||", "==", "!=")


def strip_comments(text):
    """Comments out, strings kept: a comment may name a call."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def kind_of(text, m):
    """What the code does with the member at m: calls, tests for null, reads."""
    after = text[m.end():m.end() + 40].lstrip()
    prefix = text[max(0, m.start() - 200):m.start()]
    obj = OBJECT.search(prefix)
    before = (prefix[:obj.start()] if obj else prefix).rstrip()
    if after.startswith("(") or after.startswith("args"):
        return "calls"
    if after.startswith(TESTS_AFTER) or before.endswith(TESTS_BEFORE) or re.search(r"\bif\s*\($", before):
        return "tests for null"
    return "reads"


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


def file_offenders(rel, text):
    """(line, what) for each use of the table that is not this file's own."""
    found = []
    for m in BY_NAME.finditer(text):
        found.append((line_of(text, m.start()), "%s %s through the table" % (kind_of(text, m), m.group(1))))
    if not DOORS.match(rel):
        # The loader fills the table by `symbol` (an assignment, a read):
        # only a call or a test is the doors' form.
        for m in BY_SYMBOL.finditer(text):
            kind = kind_of(text, m)
            if kind != "reads":
                found.append((line_of(text, m.start()), "%s the table's `symbol` outside the doors" % kind))
    for m in POINTER_TO_MEMBER.finditer(text):
        found.append((line_of(text, m.start()), "reaches the table through a pointer to member"))
    return sorted(found)


def library_sources(source, skip=()):
    """(path relative to source, text with comments out, line numbers kept)
    of every C or C++ source under interpose/ and policy/ but `skip`; also
    the walk of tests/tools/budget_bounds.py."""
    for top in ("interpose", "policy"):
        for root, _, names in os.walk(os.path.join(source, top)):
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, source).replace(os.sep, "/")
                if rel in skip:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    yield rel, strip_comments(f.read())


def offenders(source):
    found = []
    for rel, text in library_sources(source, SEAM):
        for number, what in file_offenders(rel, text):
            found.append("%s:%d: %s" % (rel, number, what))
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    seam_text = ""
    for rel in sorted(SEAM):
        path = os.path.join(args.source, rel)
        if not os.path.isfile(path):
            print("FAIL: no seam at " + rel)
            return 1
        with open(path, encoding="utf-8") as f:
            seam_text += strip_comments(f.read())
    missing = [fn for fn in FUNCTIONS if not re.search(r"->\s*" + fn + r"\s*\(", seam_text)]
    found = offenders(args.source)
    for line in found:
        print("FAIL: outside interpose/driver.{h,cpp}: " + line)
    for fn in missing:
        print("FAIL: the seam does not call " + fn)
    if found or missing:
        return 1
    print("ok: only interpose/driver.{h,cpp} calls the driver or asks what it has (%d functions)" % len(FUNCTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
