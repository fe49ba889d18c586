#!/usr/bin/env python3
"""tests/tools/vmm_seam.py: pagefast's own calls to the driver's virtual
memory management go through one seam, interpose/vmm_driver.{h,cpp}
(its header says what it covers). No other C or C++ source under
interpose/ or policy/ calls one of those driver functions through the
driver table (`real->cuMemMap(...)`, `real_.cuMemCreate (...)`). A
program's call the doors forward unchanged (PF_FORWARD, by the entry
table's symbol) names no function here and is not counted.

usage: vmm_seam.py --source DIR
"""
import argparse
import os
import re
import sys

SEAM = {"interpose/vmm_driver.cpp"}
FUNCTIONS = [
    "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuMemSetAccess", "cuMemAddressReserve",
    "cuMemAddressFree", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle",
    "cuMemRetainAllocationHandle", "cuMemGetAllocationPropertiesFromHandle"
]
# A call through a pointer or a table: `->name(` or `.name(`, spaces allowed.
CALL = re.compile(r"(?:->|\.)\s*(" + "|".join(FUNCTIONS) + r")\s*\(")
SUFFIXES = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".S")


def strip_comments(text):
    """Comments out, strings kept: a comment may name a call."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def offenders(source):
    found = []
    for top in ("interpose", "policy"):
        for root, _, names in os.walk(os.path.join(source, top)):
            for name in sorted(names):
                if not name.endswith(SUFFIXES):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, source).replace(os.sep, "/")
                if rel in SEAM:
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = strip_comments(f.read())
                for number, line in enumerate(text.split("\n"), 1):
                    for m in CALL.finditer(line):
                        found.append("%s:%d: %s" % (rel, number, m.group(1)))
    return found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    seam = os.path.join(args.source, "interpose", "vmm_driver.cpp")
    if not os.path.isfile(seam):
        print("FAIL: no seam at interpose/vmm_driver.cpp")
        return 1
    with open(seam, encoding="utf-8") as f:
        seam_text = strip_comments(f.read())
    missing = [fn for fn in FUNCTIONS if not re.search(r"->\s*" + fn + r"\s*\(", seam_text)]
    found = offenders(args.source)
    for line in found:
        print("FAIL: a direct driver call outside interpose/vmm_driver.cpp: " + line)
    for fn in missing:
        print("FAIL: the seam does not call " + fn)
    if found or missing:
        return 1
    print("ok: only interpose/vmm_driver.cpp calls the driver's VMM functions (%d of them)" % len(FUNCTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
