#!/usr/bin/env python3
"""tests/tools/test_sleep_bench.py: tools/gpu/sleep-bench without a GPU: its
arguments, the lines and figures it reports (format, the ratio to the
pinned bandwidth, the checkpoint's GiB/s), the parsing of pagefast's sleep
log lines, and --dry-run (the plan, nothing started or written). With
--build: the cycles part end to end on the fake driver, its workers
preloaded with libpagefast.so and given a fake torch (tests/tools/faketorch:
blocks of 1 MiB from cuMemAlloc): every cycle's contents come back, the
copies' host memory stays page-locked between cycles, trim gives it back.
Usage: test_sleep_bench.py TOOL [--build BUILD]"""
import importlib.machinery
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time

TOOL = os.path.abspath(sys.argv[1])
failures = []
checks = [0]


def check(cond, what):
    checks[0] += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def load():
    loader = importlib.machinery.SourceFileLoader("sleep_bench", TOOL)
    spec = importlib.util.spec_from_loader("sleep_bench", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def exits(sb, argv):
    try:
        sb.parse_args(argv)
    except SystemExit as e:
        return e.code
    return None


def fake_driver_run(build):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.path.join(here, "faketorch"),
               LD_LIBRARY_PATH=os.path.join(build, "tests", "fakecuda"))
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([sys.executable, TOOL, "--build", build, "--out", out, "--gib", "2", "--cycles", "3",
                            "--parts", "cycles", "--block-bytes", str(1 << 20), "--budget", "280"],
                           capture_output=True, text=True, timeout=300, env=env)
        text = r.stdout
        ok_lines = [l for l in text.splitlines() if l.startswith("sleep-bench: cycles: cycle ") and ": ok;" in l]
        check(r.returncode == 0 and len(ok_lines) == 3, "fake driver: 3 cycles, contents back each time (%s %s)" %
              (text[-1500:], r.stderr[-500:]))
        check("sleep-bench: cycles: trim gives the kept host memory back: ok" in text, "fake driver: trim")
        copies = [l for l in text.splitlines() if "copy to host:" in l]
        locked = [int(l.split(" pieces page-locked now")[0].rsplit(" ", 1)[1]) for l in copies]
        check(len(locked) == 3 and locked[0] > 0 and locked[1:] == [0, 0],
              "fake driver: page-locked at the first sleep only, reused after (%s)" % locked)
        check(text.rstrip().endswith("sleep-bench: 4 passed, 0 failed, 0 skipped"), "fake driver: the summary")
        doc = json.load(open(os.path.join(out, "sleep-bench.json")))
        cycles = [rec for rec in doc["records"] if rec["what"].startswith("cycle ")]
        # The live blocks of pagefast's 256 MiB chunk are kept, not the chunk.
        check(len(cycles) == 3 and all(0 < rec["copied_gib"] < 0.25 and rec["ok"] for rec in cycles) and
              len({rec["copied_gib"] for rec in cycles}) == 1,
              "fake driver: the JSON has each cycle, with the live blocks pagefast kept (%s)" %
              [rec["copied_gib"] for rec in cycles])
        # --region: the tensors in a keep region, whose host memory the
        # trim thread page-locks ahead: the first sleep page-locks nothing.
        r = subprocess.run([sys.executable, TOOL, "--build", build, "--out", out, "--gib", "2", "--cycles", "2",
                            "--parts", "cycles", "--block-bytes", str(1 << 20), "--budget", "280", "--region"],
                           capture_output=True, text=True, timeout=300, env=env)
        text = r.stdout
        check("sleep-bench: cycles: host memory page-locked ahead: ok" in text, "fake driver --region: ready ahead")
        copies = [l for l in text.splitlines() if "copy to host:" in l]
        locked = [int(l.split(" pieces page-locked now")[0].rsplit(" ", 1)[1]) for l in copies]
        check(r.returncode == 0 and locked == [0, 0],
              "fake driver --region: no piece page-locked at any sleep (%s %s)" % (locked, text[-1500:]))
        # The fake driver has no checkpoint: the ask-and-answer between the
        # worker and this process still runs, and says so.
        r = subprocess.run([sys.executable, TOOL, "--build", build, "--out", out, "--gib", "1", "--parts",
                            "checkpoint", "--block-bytes", str(1 << 20), "--budget", "120"],
                           capture_output=True, text=True, timeout=150, env=env)
        check(r.returncode == 1 and "sleep-bench: checkpoint: driver checkpoint without pagefast: FAIL; error the "
              "driver has no cuCheckpointProcessLock" in r.stdout and
              "contents after the driver's checkpoint (without pagefast): skipped (checkpoint failed)" in r.stdout,
              "fake driver: no checkpoint in the driver, reported (%s %s)" % (r.stdout[-1000:], r.stderr[-300:]))


def main():
    sb = load()
    check("torch" not in sys.modules, "loading the tool imports no torch (the orchestrator never touches the GPU)")
    a = sb.parse_args([])
    check((a.gib, a.cycles, a.tag_gib, a.parts) == (40, 3, 2, ["cycles", "checkpoint", "tags"]),
          "defaults: 40 GiB, 3 cycles, 2 GiB a tag, every part")
    a = sb.parse_args(["--gib", "4", "--parts", "tags,cycles", "--out", "/x"])
    check(a.gib == 4 and a.parts == ["tags", "cycles"] and a.out == "/x", "--gib, --parts, --out taken")
    sys.stderr = io.StringIO()
    check(exits(sb, ["--parts", "cycles,bogus"]) == 2, "an unknown part is refused")
    check(exits(sb, ["--gib", "0"]) == 2, "--gib 0 is refused")
    check(exits(sb, ["--cycles", "x"]) == 2, "a --cycles that is no number is refused")
    sys.stderr = sys.__stderr__

    rec = {"part": "cycles", "what": "cycle 1 sleep(keep)/wake", "ok": True, "sleep_s": 1.0, "sleep_gibs": 40.0,
           "sleep_vs_pinned_pct": 80.0, "copied_gib": 40.0, "asleep_used_mib": 600}
    line = sb.format_line(rec)
    check(line == "sleep-bench: cycles: cycle 1 sleep(keep)/wake: ok; sleep 1.000 s, sleep 40.0 GiB/s, "
                  "sleep_vs_pinned 80%, copied 40.00 GiB, asleep_used 600 MiB", "a cycle's line: " + line)
    line = sb.format_line({"part": "tags jax", "what": "regions", "skipped": "jax not importable"})
    check(line == "sleep-bench: tags jax: regions: skipped (jax not importable)", "a skipped line: " + line)
    line = sb.format_line({"part": "p", "what": "w", "ok": False, "error": "boom"})
    check(line == "sleep-bench: p: w: FAIL; error boom", "a failed line: " + line)
    line = sb.format_line({"part": "cycles", "what": "pinned", "d2h_gibs": 51.04, "h2d_gibs": 51.1})
    check(line == "sleep-bench: cycles: pinned: d2h 51.0 GiB/s, h2d 51.1 GiB/s", "a figures-only line: " + line)

    recs = sb.cycle_records([{"gib": 40.0, "sleep_s": 1.0, "wake_s": 0.5, "ok": True},
                             {"gib": 40.0, "sleep_s": 0.8, "wake_s": 0.8, "ok": False}], 50.0, 40.0)
    check(abs(recs[0]["sleep_gibs"] - 40.0) < 1e-9 and abs(recs[0]["sleep_vs_pinned_pct"] - 80.0) < 1e-9,
          "sleep GiB/s and its share of the pinned D2H bandwidth")
    check(abs(recs[0]["wake_gibs"] - 80.0) < 1e-9 and abs(recs[0]["wake_vs_pinned_pct"] - 200.0) < 1e-9,
          "wake GiB/s against the pinned H2D bandwidth")
    check(recs[1]["cycle"] == 2 and recs[1]["ok"] is False and abs(recs[1]["sleep_gibs"] - 50.0) < 1e-9,
          "each cycle numbered, its answer kept")
    check(sb.cycle_records([{"gib": 1.0, "sleep_s": 0.0, "wake_s": 1.0, "ok": True}], 0.0, 1.0)[0]["sleep_gibs"] == 0.0,
          "no division by a zero time or bandwidth")

    ck = sb.checkpoint_record({"lock_s": 0.1, "checkpoint_s": 4.0, "restore_s": 2.0, "unlock_s": 0.01,
                               "checkpointed_used_mib": 500}, 40)
    check(ck["checkpoint_gibs"] == 10.0 and ck["restore_gibs"] == 20.0 and ck["checkpointed_used_mib"] == 500
          and "error" not in ck, "the checkpoint's figures and GiB/s")
    ck = sb.checkpoint_record({"lock_s": 0.1, "error": "checkpoint answered 801"}, 40)
    check(ck.get("error") == "checkpoint answered 801" and "checkpoint_gibs" not in ck, "a refused checkpoint")

    log = ["pagefast[463 08:52:03.286]: info: device 0 asleep in 10386 ms: 42 chunks released, 43008 MiB kept in "
           "host memory, 0 MiB idle released, 0 chunks resident; sync and drain 0 ms",
           "pagefast[463 08:52:03.271]: debug: device 0: copy to host: 43008 MiB of 42 chunks in 10370 ms (4.0 GiB/s)",
           "unrelated line"]
    check(sb.kept_mib(log) == 43008, "the MiB kept, from pagefast's sleep line")
    check(sb.kept_mib(log[1:]) is None, "no sleep line: no figure")
    check(sb.copy_lines(log) == ["device 0: copy to host: 43008 MiB of 42 chunks in 10370 ms (4.0 GiB/s)"],
          "the copy threads' line")
    check(sb.released_enough(4000, 1900, 2) and not sb.released_enough(4000, 3000, 2) and
          sb.released_enough(-1, 10, 2), "released memory: enough, too little, unknown")

    report = sb.Report(out=io.StringIO())
    report.add("a", "x", True)
    report.add("a", "y", False)
    report.add("a", "z", skipped="why")
    report.add("a", "figures", d2h_gibs=1.0)
    check(report.counts() == (1, 1, 1) and report.summary() == "sleep-bench: 1 passed, 1 failed, 1 skipped",
          "the summary counts")

    a = sb.parse_args(["--budget", "60"])
    a.started = time.time() - 50
    report = sb.Report(out=io.StringIO())
    sb.run_worker(a, report, "tags", "default")
    check(report.records == [{"part": "tags", "what": "default worker", "skipped": "no time left of --budget 60 s"}],
          "a worker with too little of the budget left is skipped, not started: %s" % report.records)

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        r = subprocess.run([sys.executable, TOOL, "--dry-run", "--gib", "8", "--out", out, "--build", tmp],
                           capture_output=True, text=True, timeout=60)
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(lines) == 4 and all(l.startswith("sleep-bench: plan: ") for l in lines)
              and "8 GiB" in lines[0], "--dry-run prints the plan (%s %s)" % (r.stdout, r.stderr))
        check(not os.path.exists(out), "--dry-run writes nothing")
        r = subprocess.run([sys.executable, TOOL, "--dry-run", "--parts", "checkpoint"], capture_output=True,
                           text=True, timeout=60)
        check("needs the cycles part" in r.stdout, "checkpoint alone says what it lacks")
        r = subprocess.run([sys.executable, TOOL, "--build", tmp, "--out", out], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 2 and "libpagefast.so is missing" in r.stderr, "a build without the library: exit 2")
    if "--build" in sys.argv:
        fake_driver_run(sys.argv[sys.argv.index("--build") + 1])
    print("%d checks, %d failed" % (checks[0], len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
