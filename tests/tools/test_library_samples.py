#!/usr/bin/env python3
"""tests/tools/test_library_samples.py: tools/gpu/library-samples on fake
samples (Python scripts named as the real samples, which behave according to
whether LD_PRELOAD is set), no GPU: timing lines and noise that varies
between runs without pagefast count as the same; a changed result line, a
changed exit status and a hang with pagefast count as differences (more
runs without pagefast tell noise from a difference); a sample
that waives itself, one not built (with the build manifest's reason) and one
needing more GPUs than visible are skipped; pagefast's own log lines are not
output; each variant of a sample's arguments is a row of its own.
Usage: test_library_samples.py TOOL LIBRARY-TO-PRELOAD"""
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
from importlib.machinery import SourceFileLoader

TOOL, PRELOAD = sys.argv[1], sys.argv[2]
failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


HEAD = "#!/usr/bin/env python3\nimport os, random, sys, time, uuid\npf = bool(os.environ.get('LD_PRELOAD'))\n"
FAKES = {
    # timings change every run; pagefast logs to stderr: same
    "simpleCUBLAS": "print('Result 42')\nprint(f'Performance= {random.uniform(1,9):.2f} GFlop/s, "
                    "Time= {random.uniform(1,9):.3f} msec, Size= 131072 Ops')\n"
                    "print(f'^^^^ elapsed = {random.random():10.8f} sec  GFLOPS={random.random()}')\n"
                    "pf and print('pagefast: info: pool on', file=sys.stderr)\n",
    # a line of noise that differs between runs without pagefast: masked, same
    "matrixMulCUBLAS": "print('start')\nprint('token', uuid.uuid4())\nprint('Result = PASS')\n",
    # output whose length varies without pagefast: exit status only, same
    # (a count kept beside it: 1, 2, 3 ... lines on successive runs)
    "conjugateGradientUM": "n = int(open('count').read()) + 1 if os.path.exists('count') else 1\n"
                           "open('count', 'w').write(str(n))\nfor i in range(n): print('iteration', i)\n",
    # noise the first two runs without pagefast agree on (1, 1, then the
    # run count): more runs without pagefast show the line varies: same
    "cuSolverSp_LowlevelQR": "n = int(open('count').read()) + 1 if os.path.exists('count') else 1\n"
                             "open('count', 'w').write(str(n))\nprint('residual', 1 if n <= 2 else n)\n",
    # arguments reach the program, one row per variant: same
    "cuSolverDn_LinearSolver": "print('args', sys.argv[1:])\n",
    # the result changes with pagefast: differ
    "simpleCUFFT": "print('Result', 43 if pf else 42)\n",
    # exit status changes with pagefast: differ
    "MersenneTwisterGP11213": "print('L1 norm: 0')\nsys.exit(1 if pf else 0)\n",
    # hangs with pagefast: differ (timeout)
    "batchCUBLAS": "print('go', flush=True)\npf and time.sleep(60)\n",
    # waives itself both ways: skipped
    "conjugateGradient": "print('Waiving the run')\nsys.exit(2)\n",
    # needs two GPUs: skipped before running
    "simpleCUFFT_MGPU": "print('never run')\n",
}


def main():
    tool = SourceFileLoader("library_samples", TOOL).load_module()
    norm = tool.normalise("Time= 0.317 msec\nGFLOPS=1.5e3\n3.1 GNumbers/s\npagefast: info: x\nresidual = 1e-05  \n")
    check(norm == ["Time= <t> msec", "GFLOPS=<n>", "<r> GNumbers/s", "residual = 1e-05"],
          f"normalisation: {norm}")

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "samples")
        for name, body in FAKES.items():
            os.makedirs(os.path.join(out, name))
            exe = os.path.join(out, name, name)
            with open(exe, "w") as f:
                f.write(HEAD + body)
            os.chmod(exe, os.stat(exe).st_mode | stat.S_IXUSR)
        with open(os.path.join(out, "build-manifest.json"), "w") as f:
            json.dump({"samples": {"cuSolverRf": {"built": False, "reason": "build failed: x"}}}, f)
        only = ",".join(list(FAKES) + ["cuSolverRf"])
        report = os.path.join(d, "report.md")
        cmd = [sys.executable, TOOL, "--run", out, "--lib", PRELOAD, "--only", only, "--gpus", "1",
               "--timeout", "5", "--out", report, "--build", d]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        print(r.stdout)
        check(r.returncode == 1, f"exit status {r.returncode} with differences (want 1)")
        check(r.stdout.strip().endswith("library samples: 7 same, 3 differ, 4 skipped"), "final verdict line")
        text = open(report).read() if os.path.exists(report) else ""
        rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| ([^|]+?) \|.*$", text, re.M)}
        expect = {
            "simpleCUBLAS": "| yes |", "matrixMulCUBLAS": "vary without pagefast",
            "conjugateGradientUM": "exit status compared", "cuSolverSp_LowlevelQR": "differing lines vary", "cuSolverDn_LinearSolver -R=lu": "| yes |",
            "cuSolverDn_LinearSolver -R=qr": "| yes |", "simpleCUFFT": "standard output differs",
            "MersenneTwisterGP11213": "exit status 0 without, 1 with", "batchCUBLAS": "timeout",
            "conjugateGradient": "waived itself", "cuSolverRf": "not built: build failed: x",
            "cuSolverRf -P=symamd": "not built", "simpleCUFFT_MGPU": "needs 2 GPUs, 1 visible",
        }
        for label, part in expect.items():
            check(part in rows.get(label, ""), f"row {label!r} has {part!r}: {rows.get(label)}")
        check("line 1: without: 'Result 42'" in text, "the difference names the first differing line")
        logs = os.listdir(report + ".logs") if os.path.isdir(report + ".logs") else []
        check("simpleCUFFT.with1.txt" in logs and "simpleCUFFT.without2.txt" in logs, f"logs kept: {logs}")

        dry = subprocess.run(cmd[:-4] + ["--dry-run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=60)
        check(dry.returncode == 0 and "would run:" in dry.stdout and "would skip: cuSolverRf" in dry.stdout
              and "Result" not in dry.stdout, "dry run lists and runs nothing")
    print(f"{checks[0] - len(failures)} checks passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
