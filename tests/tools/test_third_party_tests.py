#!/usr/bin/env python3
"""tests/tools/test_third_party_tests.py: tools/gpu/third-party-tests with a
fake Python whose `-m pytest` drives the real plugin (pytest_outcomes.py)
through its hooks, no pytest and no GPU needed. The fake's tests behave
according to whether LD_PRELOAD is set: equal outcomes (passed, failed,
skipped, xfailed, xpassed, a collection error) are the same; a failure, a teardown
error, a crash (SIGSEGV) and a hang with pagefast are differences, and the
tests after the crash and the hang still run (the runner restarts pytest on
the tests not reached). Each difference is run again once a side.
Usage: test_third_party_tests.py TOOL"""
import os
import re
import stat
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


FAKE_PYTHON = """#!%(python)s
import os, signal, sys, time
from types import SimpleNamespace as NS
if sys.argv[1] == "-c":
    exec(sys.argv[2])
    sys.exit(0)
assert sys.argv[1:3] == ["-m", "pytest"], sys.argv
import pytest_outcomes as plugin
pf = bool(os.environ.get("LD_PRELOAD"))
names = ["same_pass", "same_fail", "differ", "crash", "after_crash", "skip", "hang", "xfail", "xpass", "fixture",
         "last"]
items = [NS(nodeid="t.py::test_" + n) for n in names]
plugin.pytest_collectreport(NS(outcome="failed", nodeid="broken.py", longreprtext="E   ImportError: x", longrepr=None))
plugin.pytest_collection_modifyitems(None, NS(), items)
plugin.pytest_collection_finish(NS(items=items))


def report(nodeid, when, outcome, text="", xfail=False, longrepr=None):
    r = NS(nodeid=nodeid, when=when, outcome=outcome, longreprtext=text, longrepr=longrepr)
    if xfail:
        r.wasxfail = ""
    plugin.pytest_runtest_logreport(r)


for item in items:
    n = item.nodeid.split("::test_")[1]
    plugin.pytest_runtest_logstart(item.nodeid, None)
    report(item.nodeid, "setup", "passed")
    if n == "crash" and pf:
        os.kill(os.getpid(), signal.SIGSEGV)
    if n == "hang" and pf:
        time.sleep(60)
    if n == "same_fail" or (n == "differ" and pf):
        report(item.nodeid, "call", "failed", "def test():\\n>       assert pool\\nE   AssertionError: pool\\nt.py:3: error")
    elif n == "skip":
        report(item.nodeid, "call", "skipped", longrepr=("t.py", 1, "Skipped: needs two GPUs"))
    elif n == "xfail":
        report(item.nodeid, "call", "skipped", "", xfail=True)
    elif n == "xpass":
        report(item.nodeid, "call", "passed", "", xfail=True)
    else:
        report(item.nodeid, "call", "passed")
    if n == "fixture" and pf:
        report(item.nodeid, "teardown", "failed", "E   RuntimeError: leaked")
    else:
        report(item.nodeid, "teardown", "passed")
sys.exit(1)
"""


def main():
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "python")
        with open(fake, "w") as f:
            f.write(FAKE_PYTHON % {"python": sys.executable})
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        suite = os.path.join(d, "suite", "tests")
        os.makedirs(suite)
        report = os.path.join(d, "report.md")
        lib = os.path.join(d, "lib.so")  # the fake never loads it; it only looks at LD_PRELOAD
        open(lib, "w").close()
        cmd = [sys.executable, TOOL, "--lib", lib, "--python", fake, "--only", "cupy", "--cupy", suite,
               "--torch", os.path.join(d, "none"), "--timeout", "5", "--out", report]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        print(r.stdout)
        check(r.returncode == 1, f"exit status {r.returncode} with differences (want 1)")
        check(r.stdout.strip().endswith("third-party tests: 8 same, 4 differ"), "final verdict line")
        text = open(report).read() if os.path.exists(report) else ""
        diffs = dict(re.findall(r"^- `([^`]+)`: (.*)$", text, re.M))
        check(set(diffs) == {"t.py::test_differ", "t.py::test_crash", "t.py::test_hang", "t.py::test_fixture"},
              f"differing tests: {sorted(diffs)}")
        check(diffs.get("t.py::test_differ", "").startswith("without passed, with failed (again: without passed; "
                                                             "with failed)"), "a failure, and it again")
        check(diffs.get("t.py::test_crash", "").startswith("without passed, with crashed"), "a crash")
        check(diffs.get("t.py::test_hang", "").startswith("without passed, with timeout"), "a hang")
        check(diffs.get("t.py::test_fixture", "").startswith("without passed, with error"), "a teardown error")
        check("E   AssertionError: pool" in text and "teardown: E   RuntimeError: leaked" in text,
              "the pagefast side's failure lines")
        check("t.py::test_after_crash" not in diffs and "t.py::test_last" not in diffs,
              "tests after the crash and the hang ran")
        check(re.search(r"\| cupy: cuda_tests \| 12 \| 8 \| 4 \|", text) is not None, "the group's row")
        check("skipped 1" in text and "xfailed 1" in text and "xpassed 1" in text and "error 1" in text,
              "outcome tallies")
        check("## Files pytest could not collect" in text and "`broken.py (collection)`: E   ImportError: x" in text,
              "collection errors listed")
        logs = os.listdir(report + ".logs") if os.path.isdir(report + ".logs") else []
        check("cupy-cuda_tests.with.log" in logs, f"logs kept: {logs}")
        dry = subprocess.run(cmd[:-2] + ["--dry-run", "-k", "memory or stream"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60)
        check(dry.returncode == 0 and "would run cupy: cuda_tests:" in dry.stdout and "'not slow'" in dry.stdout
              and "-k 'memory or stream'" in dry.stdout and "t.py" not in dry.stdout, "dry run, with -k")
        # A Python without pytest (here: one that fails at once) is named, not a silent zero.
        r = subprocess.run(cmd[:cmd.index("--python") + 1] + ["/bin/false"] + cmd[cmd.index("--python") + 2:-2],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        check("pytest exit 1 without collecting anything" in r.stdout, "a pytest that never starts")
    print(f"{checks[0] - len(failures)} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
