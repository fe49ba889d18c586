#!/usr/bin/env python3
"""tests/tools/test_svgplot.py: the benchmark and replay charts, on a CPU.
Checks tools/bench/svgplot.py's own SVG writer (ticks, NaN points,
escaping, same bytes for the same input, a log scale where values span
decades so that no bar is drawn zero high), tools/bench/run.py --from-csv
on a small synthetic CSV (which charts and tables come out, and that they
parse as XML), and the same charts drawn by matplotlib where a Python here
has it (skipped otherwise).

  python3 tests/tools/test_svgplot.py [case ...]   (no case: all)
"""
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "tools", "bench")
sys.path.insert(0, BENCH)
import svgplot  # noqa: E402

svgplot.ENGINE = "svg"  # the cases below check the SVG writer; case_matplotlib the other

NS = "{http://www.w3.org/2000/svg}"
ALLOCATORS = ["cudaMalloc", "cudaMallocAsync", "pagefast", "pagefast-forward"]


def texts(path):
    """The SVG's <title> and the strings of all its <text> elements."""
    root = ET.parse(path).getroot()
    assert root.tag == NS + "svg", root.tag
    title = root.find(NS + "title")
    return (title.text if title is not None else None), ["".join(e.itertext()) for e in root.iter(NS + "text")]


def synthetic_csv(path, benches):
    rows = []
    sizes = [512, 4096, 65536, 1 << 20, 64 << 20, 1 << 30]
    for rep in range(3):
        if "pairs" in benches:
            for c, base in zip(ALLOCATORS, [90000, 1300, 240, 89000]):
                for i, s in enumerate(sizes):
                    rows.append(("pairs", c, s, "p50_ns", base * (1 + 0.1 * i) + rep))
                    rows.append(("pairs", c, s, "p99_ns", base * (1.3 + 0.1 * i) + rep))
        if "threads" in benches:
            for c, one, many in [("cudaMalloc", 11581, 93556), ("cudaMallocAsync", 953472, 445288),
                                 ("pagefast", 3758445, 8891868)]:
                rows.append(("threads", c, "64K", "one", one + rep))
                rows.append(("threads", c, "64K", "many", many + rep))
        if "cold" in benches:
            for c, v in [("cudaMalloc", 67.2), ("cudaMallocAsync", 33.5), ("pagefast", 5.8)]:
                rows.append(("cold", c, "16G", "total_ms", v + rep * 0.1))
        if "seed" in benches:
            for name in ["default", "expandable_segments", "cudaMallocAsync backend", "no caching"]:
                for label, f in [("without", 1.0), ("with", 0.5)]:
                    for m, v in [("first_s", 0.03), ("second_s", 0.012), ("after_empty_cache_s", 0.024)]:
                        rows.append(("seed", f"{name}/{label}", "1000x4MiB", m, v * f))
        if "apart" in benches:
            for c, base in [("driver", 60000), ("cudaMallocAsync", 330), ("pagefast", 45)]:
                for s in (512, 1 << 30):
                    for m, f in [("alloc_p50_ns", 1.0), ("free_p50_ns", 1.1), ("alloc_p99_ns", 3.0), ("free_p99_ns", 3.1),
                                 ("clock_p50_ns", 0.0), ("ctx_get_current_p50_ns", 0.0), ("instructions_per_pair", 0.0)]:
                        v = {"clock_p50_ns": 20 + rep, "ctx_get_current_p50_ns": 8, "instructions_per_pair": -1}.get(m)
                        rows.append(("apart", c, s, m, v if v is not None else base * f + rep))
        if "train" in benches and rep < 2:
            for model, v in [("resnet18", 0.01596), ("transformer", 0.02959)]:
                rows.append(("train", f"{model}/without", "step", "s", v))
                rows.append(("train", f"{model}/with", "step", "s", v * 1.001))
    if "train" in benches:
        rows.append(("train", "resnet18", "losses", "identical", 1.0))
        rows.append(("train", "transformer", "losses", "identical", 0.0))
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bench", "config", "key", "metric", "value"])
        w.writerows((b, c, k, m, float(v)) for b, c, k, m, v in rows)


def from_csv(tmp, benches, extra=(), python=sys.executable, plot="svg"):
    src = os.path.join(tmp, "BENCH.csv")
    synthetic_csv(src, benches)
    out = os.path.join(tmp, "charts")
    md = os.path.join(tmp, "BENCH.md")
    r = subprocess.run([python, os.path.join(BENCH, "run.py"), "--from-csv", src, "--svg-dir", out,
                        "--md", md, "--plot", plot, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    return out, open(md).read(), r.stdout


def case_from_csv_all():
    with tempfile.TemporaryDirectory() as tmp:
        out, md, _ = from_csv(tmp, {"pairs", "threads", "cold", "seed", "train"})
        want = {"alloc-latency.svg": ALLOCATORS, "alloc-latency-p99.svg": ALLOCATORS,
                "threads.svg": ALLOCATORS[:3], "cold.svg": ALLOCATORS[:3],
                "seed.svg": ["default", "no caching", "first, without pagefast", "after empty cache, with pagefast"],
                "train.svg": ["without pagefast", "with pagefast"]}
        assert sorted(os.listdir(out)) == sorted(want), os.listdir(out)
        for name, series in want.items():
            title, strings = texts(os.path.join(out, name))
            assert title and title in strings, (name, title)
            for s in series:
                assert s in strings, (name, s, strings)
        _, strings = texts(os.path.join(out, "alloc-latency.svg"))
        for lab in ["512 B", "4 KiB", "1 MiB", "1 GiB"]:
            assert lab in strings, (lab, strings)
        # The tables come back too, the losses row included.
        for head in ["### alloc+free pair latency", "### 16 threads at once", "### cold growth",
                     "### seed benchmark", "### training steps"]:
            assert head in md, head
        assert "### random 4-byte gathers" not in md
        assert "| resnet18 | 0.01596 | 0.01598 | 1.001 | yes |" in md, md
        assert "| transformer |" in md and "| NO |" in md
        assert "| cudaMalloc | 11582 | 93557 | 8.08x |" in md, md


def case_from_csv_some():
    with tempfile.TemporaryDirectory() as tmp:
        out, md, stdout = from_csv(tmp, {"cold"})
        assert os.listdir(out) == ["cold.svg"], os.listdir(out)
        assert "### cold growth" in md and "### alloc+free" not in md
        assert "cold.svg" in stdout


def case_from_csv_same_bytes():
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        out_a, md_a, _ = from_csv(a, {"pairs", "seed"})
        out_b, md_b, _ = from_csv(b, {"pairs", "seed"})
        for name in os.listdir(out_a):
            assert open(os.path.join(out_a, name), "rb").read() == open(os.path.join(out_b, name), "rb").read(), name
        assert md_a == md_b


def case_apart_table():
    # alloc_bench's apart mode through run.py: one row per size and allocator,
    # the medians of the repeats, the ones that did not run left out.
    with tempfile.TemporaryDirectory() as tmp:
        _, md, _ = from_csv(tmp, {"apart"}, extra=["--only", "apart"])
        assert "### the alloc and the free timed apart" in md, md
        assert "| 512 | pagefast | 46.0 | 50.5 | 136.0 | 140.5 | 21.0 | 8.0 | -1.0 |" in md, md
        assert "| 1073741824 | driver | 60001.0 | 66001.0 |" in md, md
        assert "pagefast-before" not in md


def case_log_ticks():
    assert svgplot.log_ticks(1, 1e6) == [1, 10, 100, 1e3, 1e4, 1e5, 1e6]
    assert svgplot.log_ticks(200, 1.3e5) == [1e3, 1e4, 1e5]
    # Less than a decade: 2 and 5 come in, then every multiple.
    assert svgplot.log_ticks(15, 120) == [20, 50, 100]
    assert svgplot.log_ticks(240, 530) == [300, 400, 500]
    assert svgplot.linear_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert [svgplot.compact(v) for v in [243, 1265.0, 90412, 3758445, 0.0153, 1e9, float("nan")]] == \
        ["243", "1.26k", "90.4k", "3.76M", "0.0153", "1G", "n/a"]


def case_nan_skipped():
    with tempfile.TemporaryDirectory() as tmp:
        p = os.path.join(tmp, "l.svg")
        pts = [(1, 1.0), (10, float("nan")), (100, 100.0), (1000, 1000.0), (None, 5.0), (0, 3.0)]
        svgplot.line_chart(p, "nan", [("s", pts)], "x", "y", logx=True, logy=True)
        root = ET.parse(p).getroot()
        circles = list(root.iter(NS + "circle"))
        assert len(circles) == 3 + 1, len(circles)  # three points and the legend's marker
        lines = list(root.iter(NS + "polyline"))
        assert len(lines) == 1 and len(lines[0].get("points").split()) == 2, [e.get("points") for e in lines]
        for e in root.iter():
            for v in e.attrib.values():
                assert "nan" not in v.lower() and "inf" not in v.lower(), (e.tag, v)
        b = os.path.join(tmp, "b.svg")
        svgplot.bar_chart(b, "bars", ["x", "y"], [("s", [float("nan"), 2.0])], "v", logy=True)
        rects = [e for e in ET.parse(b).getroot().iter(NS + "rect") if e.get("fill") is None]
        assert len(rects) == 1, len(rects)  # one bar; background, frame and legend have their own fill


def case_escape_and_same_bytes():
    with tempfile.TemporaryDirectory() as tmp:
        title = 'a <b> & "c"'
        outs = []
        for n in range(2):
            p = os.path.join(tmp, f"{n}.svg")
            svgplot.bar_chart(p, title, ["x & y", "<z>"], [("s<1>", [1.0, 2.5]), ("t&", [3.0, 4e6])], "v")
            outs.append(open(p, "rb").read())
        assert outs[0] == outs[1]
        t, strings = texts(os.path.join(tmp, "0.svg"))
        assert t == title and "s<1>" in strings and "t&" in strings and "x & y" in strings
        for v in ["1", "2.5", "3", "4M"]:  # the bars' value labels
            assert v in strings, (v, strings)
        assert b"<script" not in outs[0] and b"@import" not in outs[0] and b"href" not in outs[0]


def bar_heights(path):
    """The heights of the bars of an SVG-writer bar chart (its <rect>s
    without a fill of their own: background, frame and legend have one)."""
    return [float(e.get("height")) for e in ET.parse(path).getroot().iter(NS + "rect") if e.get("fill") is None]


def case_auto_log():
    assert svgplot.auto_log([1.0, 0.0075]) and svgplot.auto_log([67.2, 5.8])
    assert not svgplot.auto_log([1.0, 2.2]) and not svgplot.auto_log([1.0, float("nan"), 0.0])
    with tempfile.TemporaryDirectory() as tmp:
        # pagefast-replay's chart: time and peak memory as ratios to
        # cudaMalloc. Time spans decades: on a linear axis pagefast's bar
        # was under a pixel high.
        p = os.path.join(tmp, "replay.svg")
        svgplot.bar_chart(p, "Trace replay", ["cudaMalloc", "pagefast"],
                          [("time allocating", [1.0, 0.0075]), ("peak reserved", [1.0, 2.2])],
                          "ratio to cudaMalloc (lower is better)")
        heights = bar_heights(p)
        assert len(heights) == 4 and min(heights) >= 20, heights  # every bar a visible height
        _, strings = texts(p)
        for tick in ["0.01", "0.1", "1"]:  # decades on the value axis
            assert tick in strings, (tick, strings)
        assert "ratio to cudaMalloc (lower is better)" in strings and "cudaMalloc" in strings
        assert "7.5m" in strings or "0.0075" in strings, strings  # the bar's own value
        # Values within a decade stay linear: ticks from 0, bars in proportion.
        p = os.path.join(tmp, "linear.svg")
        svgplot.bar_chart(p, "linear", ["a", "b"], [("s", [1.0, 2.2])], "v")
        heights = bar_heights(p)
        _, strings = texts(p)
        assert "0" in strings and abs(heights[1] / heights[0] - 2.2) < 0.01, (heights, strings)
        # A zero on a log scale says 0, not n/a.
        p = os.path.join(tmp, "zero.svg")
        svgplot.bar_chart(p, "zero", ["a", "b", "c"], [("s", [0.0, 1.0, 100.0])], "v")
        _, strings = texts(p)
        assert len(bar_heights(p)) == 2 and "0" in strings and "n/a" not in strings, strings


def matplotlib_python():
    """A Python here that imports matplotlib (Debian's python3-matplotlib
    serves /usr/bin/python3), or None."""
    for candidate in [sys.executable, "/usr/bin/python3"]:
        if os.path.exists(candidate) and subprocess.run(
                [candidate, "-c", "import matplotlib.backends.backend_svg"], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL).returncode == 0:
            return candidate
    return None


def case_matplotlib():
    python = matplotlib_python()
    if not python:
        print("skipped matplotlib: no Python here imports it (the SVG writer draws instead)")
        return
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        out_a, _, _ = from_csv(a, {"pairs", "cold", "seed"}, python=python, plot="matplotlib")
        out_b, _, _ = from_csv(b, {"pairs", "cold", "seed"}, python=python, plot="matplotlib")
        assert sorted(os.listdir(out_a)) == ["alloc-latency-p99.svg", "alloc-latency.svg", "cold.svg", "seed.svg"]
        for name in os.listdir(out_a):
            data = open(os.path.join(out_a, name), "rb").read()
            assert b"matplotlib" in data, name  # drawn by it, not by the SVG writer
            assert data == open(os.path.join(out_b, name), "rb").read(), name  # same bytes
            assert b"<script" not in data and b"@import" not in data, name
        title, strings = texts(os.path.join(out_a, "alloc-latency.svg"))
        assert title and title.startswith("alloc+free pair latency"), title
        for lab in ["512 B", "1 GiB", "request size", "pagefast", "cudaMalloc"]:
            assert any(lab == s.strip() for s in strings), (lab, strings)
        # cold: 67.2 against 5.8 ms spans a decade: a log axis, its decades
        # labelled, and every bar carrying its value.
        _, strings = texts(os.path.join(out_a, "cold.svg"))
        words = [s.strip() for s in strings]
        for want in ["1", "10", "67.3", "5.9", "total ms (lower is faster)", "16 GiB in 20 MiB requests"]:
            assert want in words, (want, words)


def case_demo():
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, os.path.join(BENCH, "svgplot.py"), tmp], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        for name in ["demo-line.svg", "demo-bar.svg"]:
            texts(os.path.join(tmp, name))


def case_chart_note():
    """Each chart says under its title where its figures come from: the
    date and commit of the .md beside the CSV and the CSV's name, or
    --chart-note; and every chart in docs/charts names a date and a
    commit."""
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "BENCH.md"), "w") as f:
            f.write("Benchmarks, 2026-01-02, commit abc1234, a GPU, 3 fresh processes per configuration\n")
        src = os.path.join(tmp, "BENCH.csv")
        synthetic_csv(src, ["cold"])
        out = os.path.join(tmp, "charts")
        r = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--from-csv", src, "--svg-dir", out,
                            "--plot", "svg"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        _, strings = texts(os.path.join(out, "cold.svg"))
        assert "2026-01-02, commit abc1234, data BENCH.csv" in strings, strings
        r = subprocess.run([sys.executable, os.path.join(BENCH, "run.py"), "--from-csv", src, "--svg-dir", out,
                            "--plot", "svg", "--chart-note", "from somewhere"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0 and "from somewhere" in texts(os.path.join(out, "cold.svg"))[1], r.stdout
    charts = os.path.join(ROOT, "docs", "charts")
    for name in sorted(os.listdir(charts)):
        _, strings = texts(os.path.join(charts, name))
        assert any(re.search(r"\d{4}-\d\d-\d\d, commit [0-9a-f]{7}", t) for t in strings), (name, strings[:3])


CASES = {n[5:]: f for n, f in sorted(globals().items()) if n.startswith("case_")}


def main(argv):
    names = argv[1:] or list(CASES)
    failed = 0
    for n in names:
        try:
            CASES[n]()
            print(f"ok {n}")
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"FAIL {n}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
