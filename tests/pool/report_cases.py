#!/usr/bin/env python3
"""tests/pool/report_cases.py: the memory report (PAGEFAST_CONF
report:exit, PAGEFAST_REPORT, pagefast_report) on the fake driver. Runs
report_preload under LD_PRELOAD=libpagefast.so with a 64 MiB limit and
checks the report's file, mode and content; and that nothing is written
when the report is off (the default).

Usage: report_cases.py --build <build dir>
"""
import os
import re
import stat
import subprocess
import sys
import tempfile

from preload_cases import SKIP, sanitizer_runtimes
from preload_kit import check, failures, run_program

def run(build, args, env):
    return run_program(build, "report_preload", args, env=dict({"FAKECUDA_TOTAL_MEM": "256M"}, **env), timeout=120)


def check_shape(text, label):
    """What every report must show after report_preload's run."""
    check("pagefast memory report" in text, f"{label}: the header line")
    check(re.search(r"^device 0$", text, re.M) is not None, f"{label}: names device 0")
    for name in ("reserved", "mapped", "in use", "idle", "quarantined", "cached", "peak in use", "hits", "growths",
                 "stitches", "releases", "synchronisations", "pass-throughs", "out-of-memory answers"):
        check(re.search(r"^  " + re.escape(name) + r"\s+\S", text, re.M) is not None, f"{label}: figure '{name}'")
    check(re.search(r"^  in use\s+\d+\.\d (MiB|GiB)$", text, re.M) is not None, f"{label}: MiB/GiB, one decimal")
    # The 1000-byte blocks live in a size class with at least one slab.
    row = re.search(r"^\s+(\d+ (?:B|KiB))\s+(\d+)\s+(\d+)\s+(\d+)$", text, re.M)
    check(row is not None and int(row.group(2)) >= 1, f"{label}: a size-class row with slabs")
    check(re.search(r"free granules\s+\d+ in \d+ free blocks", text) is not None, f"{label}: arena occupancy")
    check(re.search(r"^  fragmentation\s+\d+\.\d%", text, re.M) is not None, f"{label}: a fragmentation figure")
    check(re.search(r"largest block, no growth\s+\d+\.\d MiB \((the largest free run|.*stitching)", text)
          is not None, f"{label}: the largest block without growing, and how")
    check(re.search(r"last out-of-memory \(answer \d+\)", text) is not None, f"{label}: the OOM is recorded")
    check(re.search(r"request\s+5\.0 MiB \(5242880 bytes\)", text) is not None, f"{label}: the OOM's request size")
    check(re.search(r"^    limit\s+64\.0 MiB$", text, re.M) is not None, f"{label}: the OOM's limit")
    check(re.search(r"left \(pool's view\)\s+\d+\.\d MiB free in the pool", text) is not None,
          f"{label}: what was left")


def check_file(path, label):
    if not os.path.exists(path):
        check(False, f"{label}: {path} written")
        return ""
    mode = stat.S_IMODE(os.stat(path).st_mode)
    check(mode == 0o600, f"{label}: mode 0600 (got {oct(mode)})")
    with open(path) as f:
        return f.read()


def main():
    build = sys.argv[sys.argv.index("--build") + 1]
    if sanitizer_runtimes(os.path.join(build, "interpose", "libpagefast.so")):
        print("skipped: sanitizer build")
        return SKIP
    with tempfile.TemporaryDirectory() as tmp:
        # (b) report:exit into PAGEFAST_REPORT, %p expanded.
        r = run(build, [], {"PAGEFAST_CONF": "report:exit,limit:64M",
                            "PAGEFAST_REPORT": os.path.join(tmp, "exit-%p.txt")})
        check(r.returncode == 0 and "ok report" in r.stdout, f"report:exit ran ({r.stdout[-300:]} {r.stderr[-300:]})")
        written = [n for n in os.listdir(tmp) if n.startswith("exit-")]
        check(len(written) == 1 and re.fullmatch(r"exit-\d+\.txt", written[0] if written else "") is not None,
              f"report:exit: one file, %p expanded ({written})")
        if written:
            check_shape(check_file(os.path.join(tmp, written[0]), "report:exit"), "report:exit")
        check("pagefast memory report" not in r.stderr, "report:exit with PAGEFAST_REPORT: nothing on stderr")
        # report:exit without PAGEFAST_REPORT: stderr.
        r = run(build, [], {"PAGEFAST_CONF": "report:exit,limit:64M"})
        check_shape(r.stderr, "report:exit to stderr")
        # (c) pagefast_report(path) and pagefast_report(NULL) mid-run.
        mid = os.path.join(tmp, "mid.txt")
        r = run(build, [mid], {"PAGEFAST_CONF": "limit:64M"})
        check(r.returncode == 0 and "ok report" in r.stdout,
              f"pagefast_report ran ({r.stdout[-300:]} {r.stderr[-300:]})")
        check_shape(check_file(mid, "pagefast_report(path)"), "pagefast_report(path)")
        check_shape(r.stderr, "pagefast_report(NULL)")
        # A symbolic link at the path is refused, as for PAGEFAST_STATS.
        target = os.path.join(tmp, "target.txt")
        link = os.path.join(tmp, "link.txt")
        open(target, "w").close()
        os.symlink(target, link)
        r = run(build, [], {"PAGEFAST_CONF": "report:exit,limit:64M", "PAGEFAST_REPORT": link})
        check(os.path.getsize(target) == 0, "report:exit: a symbolic link at PAGEFAST_REPORT is not followed")
        # (d) off by default: nothing written anywhere.
        quiet = os.path.join(tmp, "quiet.txt")
        r = run(build, [], {"PAGEFAST_CONF": "limit:64M", "PAGEFAST_REPORT": quiet})
        check(r.returncode == 0 and "ok report" in r.stdout, f"default run ({r.stdout[-300:]} {r.stderr[-300:]})")
        check(not os.path.exists(quiet), "report off by default: PAGEFAST_REPORT not written")
        check("pagefast memory report" not in r.stderr, "report off by default: nothing on stderr")
        r = run(build, [], {"PAGEFAST_CONF": "report:off,limit:64M", "PAGEFAST_REPORT": quiet})
        check(not os.path.exists(quiet), "report:off: PAGEFAST_REPORT not written")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
