#!/usr/bin/env python3
"""tools/bench/run.py: pagefast's benchmarks on a GPU machine, side by side
in one run. Every configuration runs in fresh processes, --repeats times
(default 5), interleaved, and the medians are reported, with the ratios
between allocators measured in this same run. Builds nothing: it runs what
the build folder holds.

  tools/bench/run.py [--build DIR] [--repeats N]
                     [--only alloc,threads,cold,gather,seed,train,overhead,passthrough,big,vmm,jax,hf]
                     [--csv FILE] [--md FILE] [--svg-dir DIR]
  tools/bench/run.py --from-csv FILE [--md FILE] [--svg-dir DIR]

--svg-dir writes SVG charts of what ran (tools/bench/svgplot.py).
--from-csv runs nothing: it reads a CSV that --csv wrote earlier and
writes the tables (--md, and stdout) and the charts (--svg-dir) from it.
"""
import argparse
import csv
import datetime
import math
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def clean_env(env_extra):
    """This process's environment without pagefast's variables, plus env_extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env.update(env_extra)
    return env


DRY_RUN = False  # --dry-run: print each command with its environment instead of running it


def run(argv, env_extra, timeout=300):
    if DRY_RUN:
        print("would run: " + " ".join(f"{k}={v}" for k, v in sorted(env_extra.items())) + " " + " ".join(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")
    env = clean_env(env_extra)
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if r.returncode != 0:
        print(f"FAILED ({r.returncode}): {' '.join(argv)} {env_extra}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def results(stdout):
    return [parse(l) for l in stdout.splitlines() if l.startswith("RESULT")]


class Table:
    def __init__(self):
        self.rows = []  # (bench, config, key, metric, value)

    def add(self, bench, config, key, metric, value):
        self.rows.append((bench, config, key, metric, float(value)))

    def median(self, bench, config, key, metric):
        vals = [v for b, c, k, m, v in self.rows if (b, c, k, m) == (bench, config, key, metric)]
        return statistics.median(vals) if vals else float("nan")


ALLOCATORS = ["cudaMalloc", "cudaMallocAsync", "pagefast", "pagefast-forward"]
EXPANDABLE = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
TORCH_CONFIGS = [
    ("default", {}),
    ("expandable_segments", EXPANDABLE),
    ("cudaMallocAsync backend", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
    ("no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
]
SEED_PASSES = ["first_s", "second_s", "after_empty_cache_s"]
MODELS = ["resnet18", "transformer"]
# --only's names and the bench column of the rows each one writes.
SECTIONS = {"alloc": "pairs", "threads": "threads", "cold": "cold", "gather": "gather", "seed": "seed",
            "train": "train", "overhead": "overhead", "passthrough": "passthrough", "big": "big", "vmm": "vmm",
            "jax": "jax", "hf": "hf", "apart": "apart"}
# What forwarding costs. Every configuration runs the same number
# of pairs (BENCH_REPEATS) in fresh processes, interleaved; the variants
# tell pagefast's own start-up work (NUMA binding, the live-stats thread)
# from the hooks.
PASSTHROUGH_CONFIGS = [
    ("cudaMalloc", {}),
    ("pool:off", {"PAGEFAST_CONF": "pool:off"}),
    ("pool:off numa:off stats:off", {"PAGEFAST_CONF": "pool:off,numa:off,stats:off"}),
    ("PAGEFAST=0", {"PAGEFAST": "0"}),
]
PASSTHROUGH_SIZES = "512,65536,2097152,20971520,268435456,1073741824"
BIG_SIZES = "268435456,536870912,1073741824,2147483648"
# Programs that manage VMM themselves: alloc_bench's expandable-segment
# rounds and PyTorch's expandable segments, without pagefast, with it, and
# with its own-VMM cache off (docs/OWN-VMM.md).
# "with numa:off,stats:off": pagefast's start-up work (the NUMA binding, the
# live-stats thread) apart from the cache, as in the passthrough section.
# "with vmm_grow_ahead:0": the cache without pages made ahead by the
# pagefast-vmm thread (on by default since 2026-12-03).
VMM_LABELS = [("without", {}), ("with", None), ("with vmm_cache:off", {"PAGEFAST_CONF": "vmm_cache:off"}),
              ("with numa:off,stats:off", {"PAGEFAST_CONF": "numa:off,stats:off"}),
              ("with vmm_grow_ahead:0", {"PAGEFAST_CONF": "vmm_grow_ahead:0"})]
# The cost of pagefast's own observability on a pool hit: stats on
# (the default), stats:off, and tracing on.
# The vmm section's seed rows also report first_host_s (the first pass until
# its last launch returned: the program's thread) and a floor: the seed
# without pagefast with PyTorch's allocator warmed first (seed.py
# --prewarm), what the first pass costs when nothing has to grow.
VMM_SEED_METRICS = SEED_PASSES + ["first_host_s"]
# A Hugging Face model (tools/bench/hf_train.py) with expandable segments:
# the program's own VMM calls in a real training loop, an empty_cache in the
# middle; losses must be bit-identical.
HF_LABELS = [("without", {}), ("with", None), ("with vmm_cache:off", {"PAGEFAST_CONF": "vmm_cache:off"}),
             ("with vmm_grow_ahead:0", {"PAGEFAST_CONF": "vmm_grow_ahead:0"})]
HF_METRICS = ["first_step_s", "regrow_step_s", "median_step_s", "peak_reserved_mib"]
OVERHEAD_CONFIGS = ["stats on", "stats off", "trace on"]
# The alloc and the free timed apart (alloc_bench's apart mode): the
# driver's cuMemAlloc_v2/cuMemFree_v2 through the runtime's door, alone and
# under pagefast (a pool hit), and cudaMallocAsync through the runtime.
APART_METRICS = ["alloc_p50_ns", "free_p50_ns", "alloc_p99_ns", "free_p99_ns", "clock_p50_ns",
                 "ctx_get_current_p50_ns", "instructions_per_pair"]
OVERHEAD_SIZES = "512,65536,4194304,67108864"


def p10_of(stdout):
    m = re.search(r"^ITER .*p10_us=([\d.]+)", stdout, re.M)
    return float(m.group(1)) if m else float("nan")


def add_modes(t, moded):
    """On the H200 a process runs every call fast or about 40% slower, with
    pagefast or without (docs/data/first-pass-3c88f9c.txt), and
    the medians mix the two. Splits the seed processes at the widest gap
    between their 10th-percentile call times, if that gap is over 15%,
    and adds first_s per mode (metrics first_s@fast, first_s@slow)."""
    p10s = sorted(p for _, _, p in moded if not math.isnan(p))
    if len(p10s) < 4:
        return
    gap, cut = max((p10s[i + 1] - p10s[i], (p10s[i + 1] + p10s[i]) / 2) for i in range(len(p10s) - 1))
    if gap < 0.15 * p10s[0]:
        return
    for config, first, p10 in moded:
        if not math.isnan(p10):
            t.add("vmm", config, "1000x4MiB", "first_s@fast" if p10 < cut else "first_s@slow", first)
    t.add("vmm", "modes", "1000x4MiB", "p10_cut_us", cut)


def measure(args, t, only):
    lib = os.path.join(args.build, "interpose", "libpagefast.so")
    gpu = os.path.join(args.build, "tools", "gpu")
    bench = os.path.join(gpu, "alloc_bench")
    py = sys.executable
    pf = {"LD_PRELOAD": lib}

    alloc_configs = [
        ("cudaMalloc", [bench, "cudaMalloc"], {}),
        ("cudaMallocAsync", [bench, "cudaMallocAsync"], {}),
        ("pagefast", [bench, "cudaMalloc"],
         dict(pf, BENCH_LABEL="pagefast", **({"PAGEFAST_CONF": args.conf} if args.conf else {}))),
        ("pagefast-forward", [bench, "cudaMalloc"], dict(pf, PAGEFAST_CONF="pool:off", BENCH_LABEL="forward")),
    ]
    assert [c for c, _, _ in alloc_configs] == ALLOCATORS
    # --before LIB: an earlier libpagefast.so, interleaved with this one in
    # the alloc and big sections (a change's cost, measured side by side).
    before = [("pagefast-before", [bench, "cudaMalloc"], {"LD_PRELOAD": args.before, "BENCH_LABEL": "pagefast"})] \
        if args.before else []
    # Each repeat runs the configurations in a fresh random order, so that a
    # drift of the card over the run does not favour one of them.
    rng = random.Random(12345)

    def shuffled(items):
        items = list(items)
        rng.shuffle(items)
        return items

    # Each size warmed for --warm-ms besides its 20 pairs: the measured
    # pairs are the steady state (alloc_bench's BENCH_WARM_MS).
    warm = {"BENCH_WARM_MS": str(args.warm_ms)} if args.warm_ms else {}
    if "alloc" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs + before):
                for res in results(run(argv + ["pairs"], dict(env, **warm)).stdout):
                    t.add("pairs", name, res["bytes"], "p50_ns", res["p50_ns"])
                    t.add("pairs", name, res["bytes"], "p99_ns", res["p99_ns"])

    if "apart" in only:
        configs = [("driver", [bench, "driver"], {}), ("cudaMallocAsync", [bench, "cudaMallocAsync"], {}),
                   ("pagefast", [bench, "driver"],
                    dict(pf, BENCH_LABEL="pagefast", **({"PAGEFAST_CONF": args.conf} if args.conf else {})))]
        if args.before:
            configs.append(("pagefast-before", [bench, "driver"], {"LD_PRELOAD": args.before, "BENCH_LABEL": "pagefast"}))
        for _ in range(args.repeats):
            for name, argv, env in shuffled(configs):
                extra = {"BENCH_REPEATS": "300"} if name == "driver" else {}
                for res in results(run(argv + ["apart"], dict(env, **extra)).stdout):
                    for metric in APART_METRICS:
                        t.add("apart", name, res["bytes"], metric, res[metric])

    if "threads" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs[:3]):
                for res in results(run(argv + ["threads", "16"], env).stdout):
                    t.add("threads", name, "64K", "one", res["one_pairs_per_s"])
                    t.add("threads", name, "64K", "many", res["many_pairs_per_s"])

    if "cold" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs[:3]):
                for res in results(run(argv + ["cold"], env).stdout):
                    t.add("cold", name, "16G", "total_ms", res["total_ms"])

    if "overhead" in only:
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            configs = [
                ("stats on", dict(pf, BENCH_SIZES=OVERHEAD_SIZES)),
                ("stats off", dict(pf, BENCH_SIZES=OVERHEAD_SIZES, PAGEFAST_CONF="stats:off")),
                ("trace on", dict(pf, BENCH_SIZES=OVERHEAD_SIZES, PAGEFAST_TRACE=os.path.join(d, "t.%p.trace"))),
            ]
            for _ in range(args.repeats):
                for name, env in shuffled(configs):
                    for res in results(run([bench, "cudaMalloc", "pairs"], env).stdout):
                        t.add("overhead", name, res["bytes"], "p50_ns", res["p50_ns"])
                        t.add("overhead", name, res["bytes"], "p99_ns", res["p99_ns"])
                for f in os.listdir(d):
                    os.unlink(os.path.join(d, f))

    if "gather" in only:
        for _ in range(args.repeats):
            for name, env in shuffled([("cudaMalloc", {}), ("pagefast", pf)]):
                for res in results(run([os.path.join(gpu, "gather_bench")], env).stdout):
                    t.add("gather", name, "32G", "gloads", res["gloads_per_s"])

    if "seed" in only:
        seed = [py, os.path.join(HERE, "seed.py")]
        for _ in range(args.repeats):
            for name, env in shuffled(TORCH_CONFIGS):
                labels = [("without", {}), ("with", dict(pf, **({"PAGEFAST_CONF": args.conf} if args.conf else {})))]
                if args.before:
                    labels.append(("before", {"LD_PRELOAD": args.before}))
                for label, extra in shuffled(labels):
                    for res in results(run(seed, dict(env, **extra)).stdout):
                        for metric in SEED_PASSES:
                            t.add("seed", f"{name}/{label}", "1000x4MiB", metric, res[metric])

    if "passthrough" in only:
        for _ in range(args.repeats * 2):
            for name, env in shuffled(PASSTHROUGH_CONFIGS):
                e = dict(env, BENCH_SIZES=PASSTHROUGH_SIZES, BENCH_REPEATS="3000", BENCH_LABEL=name.replace(" ", "_"))
                if name != "cudaMalloc":
                    e.update(pf)
                for res in results(run([bench, "cudaMalloc", "pairs"], e).stdout):
                    t.add("passthrough", name, res["bytes"], "p50_ns", res["p50_ns"])

    if "big" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled([alloc_configs[1], alloc_configs[2]] + before):
                e = dict(env, BENCH_SIZES=BIG_SIZES, BENCH_REPEATS="2000", **warm)
                for res in results(run(argv + ["pairs"], e).stdout):
                    t.add("big", name, res["bytes"], "p50_ns", res["p50_ns"])
                    t.add("big", name, res["bytes"], "p99_ns", res["p99_ns"])
                    if "mean_ns" in res:
                        t.add("big", name, res["bytes"], "mean_ns", res["mean_ns"])

    if "vmm" in only:
        moded = []  # (config, first_s, the process's 10th-percentile call in us)
        seed = [py, os.path.join(HERE, "seed.py")]
        for _ in range(args.repeats):
            for label, extra in shuffled(VMM_LABELS):
                env = dict(pf, **extra) if extra is not None else dict(pf)
                if label == "without":
                    env = {}
                for res in results(run([bench, "cudaMalloc", "vmm"], dict(env, BENCH_LABEL=label.replace(" ", "_"))).stdout):
                    t.add("vmm", f"segments/{label}", "16x20MiB", "first_round_ns", res["first_round_ns"])
                    t.add("vmm", f"segments/{label}", "16x20MiB", "p50_round_ns", res["p50_round_ns"])
                out = run(seed + ["--iter-times"], dict(env, **EXPANDABLE)).stdout
                for res in results(out):
                    for metric in VMM_SEED_METRICS:
                        t.add("vmm", f"seed/{label}", "1000x4MiB", metric, res[metric])
                    moded.append((f"seed/{label}", float(res["first_s"]), p10_of(out)))
            out = run(seed + ["--prewarm", "--iter-times"], EXPANDABLE).stdout
            for res in results(out):
                t.add("vmm", "seed/floor", "1000x4MiB", "first_s", res["first_s"])
                moded.append(("seed/floor", float(res["first_s"]), p10_of(out)))
        add_modes(t, moded)

    if "hf" in only:
        hf = [py, os.path.join(HERE, "hf_train.py"), "20", "--empty-cache-at", "9"]
        losses = {}
        for _ in range(args.repeats):
            for label, extra in shuffled(HF_LABELS):
                env = {} if label == "without" else dict(pf, **(extra or {}))
                r = run(hf, dict(env, **EXPANDABLE), timeout=600)
                for res in results(r.stdout):
                    for metric in HF_METRICS:
                        t.add("hf", label, "gpt2", metric, res[metric])
                m = re.search(r"^losses (.*)$", r.stdout, re.M)
                losses.setdefault(label, set()).add(m.group(1) if m else None)
        every = set().union(*losses.values()) if losses else {None}
        t.add("hf", "losses", "gpt2", "identical", 1.0 if len(every) == 1 and None not in every else 0.0)

    if "jax" in only:
        jax = [py, os.path.join(HERE, "jax_loop.py"), "200"]
        sums = {}
        for _ in range(args.repeats):
            for label, env in shuffled([("without", {}), ("with", pf)]):
                r = run(jax, dict(env, XLA_PYTHON_CLIENT_ALLOCATOR="platform"), timeout=600)
                for res in results(r.stdout):
                    t.add("jax", label, "platform", "median_step_s", res["median_step_s"])
                m = re.search(r"^checksum (.*)$", r.stdout, re.M)
                sums.setdefault(label, set()).add(m.group(1) if m else None)
        t.add("jax", "checksums", "platform", "identical", 1.0 if len(sums.get("without", set()) | sums.get("with", set())) == 1 else 0.0)

    if "train" in only:
        losses = {}
        for _ in range(max(1, args.repeats)):
            for model in MODELS:
                for label, env in shuffled([("without", {}), ("with", pf)]):
                    r = run([py, os.path.join(HERE, "train.py"), model, "30"], env, timeout=600)
                    for res in results(r.stdout):
                        t.add("train", f"{model}/{label}", "step", "s", res["median_step_s"])
                    m = re.search(r"^losses (.*)$", r.stdout, re.M)
                    losses.setdefault((model, label), set()).add(m.group(1) if m else None)
        # One row per model, so that the CSV alone can say it again: 1 when
        # every run, with and without pagefast, printed the same losses; -1
        # when the runs without pagefast already differ among themselves
        # (the model is not deterministic: nothing to compare); 0 otherwise.
        for model in MODELS:
            without, with_ = losses.get((model, "without"), set()), losses.get((model, "with"), set())
            if len(without) != 1:
                same = -1.0
            else:
                same = 1.0 if without == with_ else 0.0
            t.add("train", model, "losses", "identical", same)


def tables(t, sections):
    """The Markdown tables of the sections named (--only's names)."""
    md = []
    if "alloc" in sections:
        sizes = sorted({int(k) for b, c, k, m, v in t.rows if b == "pairs"})
        md += ["### alloc+free pair latency (ns; median over processes of per-process p50/p99)", "",
               "| bytes | cudaMalloc p50 | p99 | cudaMallocAsync p50 | p99 | pagefast p50 | p99 | forward-only p50 | "
               "cudaMalloc / pagefast | cudaMallocAsync / pagefast | forward / cudaMalloc |",
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for s in sizes:
            k = str(s)
            m = {c: (t.median("pairs", c, k, "p50_ns"), t.median("pairs", c, k, "p99_ns")) for c in ALLOCATORS}
            md.append(f"| {s} | {m['cudaMalloc'][0]:.0f} | {m['cudaMalloc'][1]:.0f} | {m['cudaMallocAsync'][0]:.0f} | "
                      f"{m['cudaMallocAsync'][1]:.0f} | {m['pagefast'][0]:.0f} | {m['pagefast'][1]:.0f} | "
                      f"{m['pagefast-forward'][0]:.0f} | {m['cudaMalloc'][0] / m['pagefast'][0]:.0f}x | "
                      f"{m['cudaMallocAsync'][0] / m['pagefast'][0]:.1f}x | "
                      f"{m['pagefast-forward'][0] / m['cudaMalloc'][0]:.3f} |")
        md.append("")

    for bench in ("pairs", "big"):
        if not any(b == bench and c == "pagefast-before" for b, c, k, m, v in t.rows):
            continue
        md += [f"### {bench}: this build against --before (ns, median of per-process p50)", "",
               "| bytes | before | now | now / before |", "| ---: | ---: | ---: | ---: |"]
        for k in sorted({int(k) for b, c, k, m, v in t.rows if b == bench and c == "pagefast-before"}):
            b50, n50 = t.median(bench, "pagefast-before", str(k), "p50_ns"), t.median(bench, "pagefast", str(k), "p50_ns")
            md.append(f"| {k} | {b50:.0f} | {n50:.0f} | {n50 / b50:.3f} |")
        md.append("")

    if "apart" in sections:
        configs = [c for c in ("driver", "cudaMallocAsync", "pagefast", "pagefast-before")
                   if any(b == "apart" and cc == c for b, cc, k, m, v in t.rows)]
        md += ["### the alloc and the free timed apart (ns, median of per-process p50; each call between two clock "
               "reads, whose own cost is the clock column; instructions: user-space, per pair, where the kernel "
               "counts them, -1 where not)", "",
               "| bytes | allocator | alloc p50 | free p50 | alloc p99 | free p99 | clock p50 | cuCtxGetCurrent p50 | "
               "instructions per pair |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k in sorted({int(k) for b, c, k, m, v in t.rows if b == "apart"}):
            for c in configs:
                v = [t.median("apart", c, str(k), m) for m in APART_METRICS]
                md.append(f"| {k} | {c} | " + " | ".join(f"{x:.1f}" for x in v) + " |")
        md.append("")

    if "threads" in sections:
        md += ["### 16 threads at once, 64 KiB pairs (pairs/s, medians)", "",
               "| allocator | 1 thread | 16 threads | scale |", "| --- | ---: | ---: | ---: |"]
        for name in ALLOCATORS[:3]:
            one, many = t.median("threads", name, "64K", "one"), t.median("threads", name, "64K", "many")
            md.append(f"| {name} | {one:.0f} | {many:.0f} | {many / one:.2f}x |")
        md.append("")

    if "cold" in sections:
        md += ["### cold growth: 16 GiB in 20 MiB requests, fresh process (ms, median)", "",
               "| allocator | total ms | cudaMalloc / this |", "| --- | ---: | ---: |"]
        base = t.median("cold", "cudaMalloc", "16G", "total_ms")
        for name in ALLOCATORS[:3]:
            v = t.median("cold", name, "16G", "total_ms")
            md.append(f"| {name} | {v:.1f} | {base / v:.1f}x |")
        md.append("")

    if "gather" in sections:
        a, b = t.median("gather", "cudaMalloc", "32G", "gloads"), t.median("gather", "pagefast", "32G", "gloads")
        md += ["### random 4-byte gathers over a 32 GiB buffer (G loads/s, median)", "",
               "| cudaMalloc | pagefast | pagefast / cudaMalloc |", "| ---: | ---: | ---: |",
               f"| {a:.2f} | {b:.2f} | {b / a:.4f} |", ""]

    if "seed" in sections:
        md += ["### seed benchmark: 1000 x torch.randn(1024, 1024) (s, median of fresh processes)", "",
               "| PyTorch allocator | pass | without pagefast | with pagefast | with / without |",
               "| --- | --- | ---: | ---: | ---: |"]
        for name, _ in TORCH_CONFIGS:
            for metric in SEED_PASSES:
                a = t.median("seed", f"{name}/without", "1000x4MiB", metric)
                b = t.median("seed", f"{name}/with", "1000x4MiB", metric)
                md.append(f"| {name} | {metric[:-2]} | {a:.4f} | {b:.4f} | {b / a:.2f} |")
        md.append("")
        if any(c.endswith("/before") for b, c, k, m, v in t.rows if b == "seed"):
            md += ["### seed benchmark: this build against --before (s, median of fresh processes)", "",
                   "| PyTorch allocator | pass | before | now | now / before |", "| --- | --- | ---: | ---: | ---: |"]
            for name, _ in TORCH_CONFIGS:
                for metric in SEED_PASSES:
                    a = t.median("seed", f"{name}/before", "1000x4MiB", metric)
                    b = t.median("seed", f"{name}/with", "1000x4MiB", metric)
                    md.append(f"| {name} | {metric[:-2]} | {a:.4f} | {b:.4f} | {b / a:.3f} |")
            md.append("")

    if "overhead" in sections:
        md += ["### observability cost on a pool hit (pair p50 / p99, ns)", "",
               "| bytes | stats on | stats off | on / off | trace on | trace / stats on |",
               "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for k in sorted({int(k) for b, c, k, m, v in t.rows if b == "overhead"}):
            on = t.median("overhead", "stats on", str(k), "p50_ns")
            off = t.median("overhead", "stats off", str(k), "p50_ns")
            tr = t.median("overhead", "trace on", str(k), "p50_ns")
            on99 = t.median("overhead", "stats on", str(k), "p99_ns")
            off99 = t.median("overhead", "stats off", str(k), "p99_ns")
            tr99 = t.median("overhead", "trace on", str(k), "p99_ns")
            md.append(f"| {k} | {on:.0f} / {on99:.0f} | {off:.0f} / {off99:.0f} | {on / off:.3f} | "
                      f"{tr:.0f} / {tr99:.0f} | {tr / on:.2f} |")
        md.append("")

    if "passthrough" in sections:
        md += ["### pass-through: cudaMalloc pairs, 3000 per process, fresh processes interleaved (p50 ns, median)", "",
               "| bytes | " + " | ".join(c for c, _ in PASSTHROUGH_CONFIGS) + " | " +
               " | ".join(f"{c} / cudaMalloc" for c, _ in PASSTHROUGH_CONFIGS[1:]) + " |",
               "| ---: |" + " ---: |" * (2 * len(PASSTHROUGH_CONFIGS) - 1)]
        for k in sorted({int(k) for b, c, k, m, v in t.rows if b == "passthrough"}):
            m = [t.median("passthrough", c, str(k), "p50_ns") for c, _ in PASSTHROUGH_CONFIGS]
            md.append(f"| {k} | " + " | ".join(f"{v:.0f}" for v in m) + " | " +
                      " | ".join(f"{v / m[0]:.3f}" for v in m[1:]) + " |")
        md.append("")

    if "big" in sections:
        md += ["### big blocks: alloc+free pairs (ns, median of per-process p50 / p99 / the loop's mean per pair)",
               "",
               "| bytes | cudaMallocAsync | pagefast | pagefast / cudaMallocAsync, p50 | mean |",
               "| ---: | ---: | ---: | ---: | ---: |"]
        for k in sorted({int(k) for b, c, k, m, v in t.rows if b == "big"}):
            a50, a99, am = (t.median("big", "cudaMallocAsync", str(k), m) for m in ("p50_ns", "p99_ns", "mean_ns"))
            p50, p99, pm = (t.median("big", "pagefast", str(k), m) for m in ("p50_ns", "p99_ns", "mean_ns"))
            md.append(f"| {k} | {a50:.0f} / {a99:.0f} / {am:.0f} | {p50:.0f} / {p99:.0f} / {pm:.0f} | "
                      f"{p50 / a50:.2f} | {pm / am:.2f} |")
        md.append("")

    if "vmm" in sections:
        md += ["### programs that manage VMM themselves (median of fresh processes)", "",
               "| workload | metric | " + " | ".join(l for l, _ in VMM_LABELS) + " | with / without |",
               "| --- | --- |" + " ---: |" * (len(VMM_LABELS) + 1)]
        for work, key, metrics in [("segments", "16x20MiB", ["first_round_ns", "p50_round_ns"]),
                                   ("seed", "1000x4MiB", VMM_SEED_METRICS)]:
            for metric in metrics:
                v = [t.median("vmm", f"{work}/{l}", key, metric) for l, _ in VMM_LABELS]
                md.append(f"| {work} | {metric} | " + " | ".join(f"{x:.6g}" for x in v) + f" | {v[1] / v[0]:.3f} |")
        cut = t.median("vmm", "modes", "1000x4MiB", "p10_cut_us")
        if not math.isnan(cut):
            md += ["", f"First pass per process mode (a process whose 10th-percentile call took under {cut:.1f} us "
                       f"is fast; with pagefast or without, each process is in one mode), median s "
                       f"(processes):", "",
                   "| mode | " + " | ".join(l for l, _ in VMM_LABELS) + " | floor | with / without |",
                   "| --- |" + " ---: |" * (len(VMM_LABELS) + 2)]
            for mode in ("fast", "slow"):
                cells, v = [], []
                for config in [f"seed/{l}" for l, _ in VMM_LABELS] + ["seed/floor"]:
                    vals = [x for b, c, k, m, x in t.rows if (b, c, m) == ("vmm", config, f"first_s@{mode}")]
                    v.append(statistics.median(vals) if vals else float("nan"))
                    cells.append(f"{v[-1]:.6g} ({len(vals)})" if vals else "")
                md.append(f"| {mode} | " + " | ".join(cells) + f" | {v[1] / v[0]:.3f} |")
        floor = t.median("vmm", "seed/floor", "1000x4MiB", "first_s")
        if not math.isnan(floor):
            first = t.median("vmm", "seed/without", "1000x4MiB", "first_s")
            md += ["", f"Seed floor (without pagefast, PyTorch's allocator warmed first, nothing grows): first pass "
                       f"{floor:.6g} s, {floor / first:.3f} of without's first pass: what the first pass costs when "
                       f"nothing has to grow (the randn kernel's first load included)."]
        md.append("")

    if "hf" in sections:
        md += ["### Hugging Face GPT-2 (random weights), expandable segments, empty_cache after step 9 "
               "(median of fresh processes)", "",
               "| metric | " + " | ".join(l for l, _ in HF_LABELS) + " | with / without |",
               "| --- |" + " ---: |" * (len(HF_LABELS) + 1)]
        for metric in HF_METRICS:
            v = [t.median("hf", l, "gpt2", metric) for l, _ in HF_LABELS]
            md.append(f"| {metric} | " + " | ".join(f"{x:.6g}" for x in v) + f" | {v[1] / v[0]:.3f} |")
        same = t.median("hf", "losses", "gpt2", "identical")
        md += ["", f"Losses bit-identical in every process: {'?' if math.isnan(same) else 'yes' if same == 1 else 'NO'}", ""]

    if "jax" in sections:
        a, b = t.median("jax", "without", "platform", "median_step_s"), t.median("jax", "with", "platform", "median_step_s")
        same = t.median("jax", "checksums", "platform", "identical")
        md += ["### JAX, XLA_PYTHON_CLIENT_ALLOCATOR=platform: allocation-heavy loop (median step, s)", "",
               "| without pagefast | with pagefast | with / without | checksums identical |",
               "| ---: | ---: | ---: | --- |", f"| {a:.6f} | {b:.6f} | {b / a:.3f} | {'yes' if same == 1 else 'NO'} |", ""]

    if "train" in sections:
        md += ["### training steps (median step time, s)", "",
               "| model | without pagefast | with pagefast | with / without | losses bit-identical |",
               "| --- | ---: | ---: | ---: | --- |"]
        for model in MODELS:
            a = t.median("train", f"{model}/without", "step", "s")
            b = t.median("train", f"{model}/with", "step", "s")
            same = t.median("train", model, "losses", "identical")
            same = ("?" if math.isnan(same) else "yes" if same == 1 else
                    "n/a: differ run to run without pagefast" if same < 0 else "NO")
            md.append(f"| {model} | {a:.5f} | {b:.5f} | {b / a:.3f} | {same} |")
        md.append("")
    return md


BYTE_TICKS = [(512, "512 B"), (4 << 10, "4 KiB"), (64 << 10, "64 KiB"), (1 << 20, "1 MiB"), (16 << 20, "16 MiB"),
              (256 << 20, "256 MiB"), (1 << 30, "1 GiB"), (16 << 30, "16 GiB")]


def charts(t, out, engine="auto", note=""):
    """SVG charts of the benchmarks that have rows in t, into out, drawn by
    svgplot (matplotlib where installed, unless engine says "svg"), each
    with `note` (date, commit, data file) under its title; returns the file
    names written."""
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    import svgplot
    svgplot.ENGINE = engine
    svgplot.NOTE = note
    os.makedirs(out, exist_ok=True)
    have = {b for b, c, k, m, v in t.rows}
    written = []

    def path(name):
        written.append(name)
        return os.path.join(out, name)

    if "pairs" in have:
        sizes = sorted({int(k) for b, c, k, m, v in t.rows if b == "pairs"})
        ticks = [(x, lab) for x, lab in BYTE_TICKS if sizes[0] <= x <= sizes[-1]]
        for metric, name in [("p50_ns", "alloc-latency.svg"), ("p99_ns", "alloc-latency-p99.svg")]:
            series = [(c, [(s, t.median("pairs", c, str(s), metric)) for s in sizes]) for c in ALLOCATORS]
            svgplot.line_chart(path(name), f"alloc+free pair latency, {metric[:3]} (median over processes)",
                               series, "request size", f"ns per pair ({metric[:3]})", logx=True, logy=True,
                               xticks_labels=ticks)
    if "threads" in have:
        svgplot.bar_chart(path("threads.svg"), "64 KiB alloc+free pairs from 1 and 16 threads at once",
                          ["1 thread", "16 threads"],
                          [(c, [t.median("threads", c, "64K", m) for m in ["one", "many"]]) for c in ALLOCATORS[:3]],
                          "pairs/s (all threads)", logy=True)
    if "cold" in have:
        svgplot.bar_chart(path("cold.svg"), "cold growth: 16 GiB in 20 MiB requests, fresh process",
                          ["16 GiB in 20 MiB requests"],
                          [(c, [t.median("cold", c, "16G", "total_ms")]) for c in ALLOCATORS[:3]],
                          "total ms (lower is faster)")
    if "seed" in have:
        # One group per PyTorch allocator configuration; one colour per pass,
        # light without pagefast, dark with it.
        colours = {"first_s": ("#aec7e8", "#1f77b4"), "second_s": ("#ffbb78", "#ff7f0e"),
                   "after_empty_cache_s": ("#98df8a", "#2ca02c")}
        series = [(f"{metric[:-2].replace('_', ' ')}, {label} pagefast",
                   [t.median("seed", f"{name}/{label}", "1000x4MiB", metric) * 1e3 for name, _ in TORCH_CONFIGS],
                   colours[metric][i]) for metric in SEED_PASSES for i, label in enumerate(["without", "with"])]
        svgplot.bar_chart(path("seed.svg"), "seed benchmark: 1000 x torch.randn(1024, 1024), time per pass",
                          [name for name, _ in TORCH_CONFIGS], series, "ms per pass (lower is faster)")
    if "train" in have:
        svgplot.bar_chart(path("train.svg"), "training loops: median step time",
                          MODELS,
                          [(f"{label} pagefast", [t.median("train", f"{m}/{label}", "step", "s") * 1e3 for m in MODELS])
                           for label in ["without", "with"]],
                          "ms per step (lower is faster)")
    return written


def csv_note(path):
    """'DATE, commit C, data NAME.csv' for a CSV whose run wrote NAME.md
    beside it (its first line: 'Benchmarks, DATE, commit C, ...'); the
    CSV's name alone otherwise."""
    name = os.path.basename(path)
    try:
        with open(os.path.splitext(path)[0] + ".md") as f:
            first = f.readline().split(", ")
        if len(first) > 2 and first[0] == "Benchmarks" and first[2].startswith("commit "):
            return f"{first[1]}, {first[2]}, data {name}"
    except OSError:
        pass
    return f"data {name}"


def load_csv(path):
    t = Table()
    with open(path, newline="") as f:
        r = csv.reader(f)
        header = next(r, None)
        if header != ["bench", "config", "key", "metric", "value"]:
            raise SystemExit(f"{path}: not a CSV written by run.py --csv (header {header})")
        for row in r:
            if row:
                t.add(*row)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--before", default=None, metavar="LIB",
                    help="an earlier libpagefast.so to run beside this build's in the alloc, big and seed sections")
    ap.add_argument("--conf", default=None, metavar="CONF",
                    help="PAGEFAST_CONF for this build's pagefast configuration in the alloc, threads, cold, big and "
                         "seed sections; with --before set to the same library, a setting against the defaults")
    ap.add_argument("--only", default="alloc,threads,cold,gather,seed,train,overhead")
    ap.add_argument("--warm-ms", type=int, default=100, metavar="MS",
                    help="alloc and big sections: warm each size this long besides its 20 pairs, so that the "
                         "measured pairs are the steady state (0: 20 pairs only, the method before 2026-12-06)")
    ap.add_argument("--dry-run", action="store_true",
                    help="print every command with its environment instead of running it (no GPU needed)")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--md", default=None)
    ap.add_argument("--svg-dir", default=None, help="write SVG charts of what ran into this folder")
    ap.add_argument("--plot", default="auto", choices=["auto", "svg", "matplotlib"],
                    help="who draws the charts: matplotlib where installed (auto), or tools/bench/svgplot.py's own "
                         "SVG writer")
    ap.add_argument("--chart-note", default=None, metavar="TEXT",
                    help="the line under each chart's title (default: the date and commit of the run, or with "
                         "--from-csv those of the .md beside the CSV, and the CSV's name)")
    ap.add_argument("--from-csv", default=None, metavar="FILE",
                    help="run nothing; read the rows from a CSV that --csv wrote and write --md / --svg-dir from it")
    args = ap.parse_args()
    global DRY_RUN
    DRY_RUN = args.dry_run
    only = set(args.only.split(","))
    t = Table()

    if args.from_csv:
        t = load_csv(args.from_csv)
        have = {b for b, c, k, m, v in t.rows}
        sections = {s for s, b in SECTIONS.items() if b in have and s in only}
        counts = {}
        for b, c, k, m, v in t.rows:
            counts[(b, c, k, m)] = counts.get((b, c, k, m), 0) + 1
        note = csv_note(args.from_csv)
        head = [f"Benchmarks regenerated from {os.path.basename(args.from_csv)} by tools/bench/run.py --from-csv "
                f"(up to {max(counts.values(), default=0)} samples per cell; the GPU, commit and command are "
                f"in the header of that run's own --md)", ""]
        # Only the measured sections, in their usual order.
        sections = [s for s in SECTIONS if s in sections]
        if args.csv and os.path.abspath(args.csv) == os.path.abspath(args.from_csv):
            args.csv = None
    else:
        measure(args, t, only)
        if args.dry_run:
            return 0
        sections = [s for s in SECTIONS if s in only]
        commit = os.environ.get("PAGEFAST_COMMIT") or subprocess.run(
            ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True).stdout.strip() or "unknown"
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
        note = f"{datetime.date.today()}, commit {commit}, tools/bench/run.py"
        head = [f"Benchmarks, {datetime.date.today()}, commit {commit}, {smi}, {args.repeats} fresh processes per "
                f"configuration", f"command: tools/bench/run.py --repeats {args.repeats} --only {args.only}"
                f"{' --conf ' + args.conf if args.conf else ''}{' --before ' + args.before if args.before else ''}", ""]
    text = "\n".join(head + tables(t, sections))
    print(text)
    if args.md:
        open(args.md, "w").write(text + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["bench", "config", "key", "metric", "value"])
            w.writerows(t.rows)
    if args.svg_dir:
        written = charts(t, args.svg_dir, args.plot, args.chart_note if args.chart_note is not None else note)
        print(f"charts in {args.svg_dir}: {', '.join(written) or 'none (no rows)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
