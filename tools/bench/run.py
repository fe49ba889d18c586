#!/usr/bin/env python3
"""tools/bench/run.py: pagefast's benchmarks on a GPU machine, side by side
in one run. Every configuration runs in fresh processes, --repeats times
(default 5), interleaved, and the medians are reported, with the ratios
between allocators measured in this same run. Builds nothing: it runs what
the build folder holds.

  tools/bench/run.py [--build DIR] [--repeats N] [--only alloc,threads,cold,gather,seed,train]
                     [--csv FILE] [--md FILE]
"""
import argparse
import csv
import datetime
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


def run(argv, env_extra, timeout=300):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env.update(env_extra)
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default="alloc,threads,cold,gather,seed,train")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args()
    lib = os.path.join(args.build, "interpose", "libpagefast.so")
    gpu = os.path.join(args.build, "tools", "gpu")
    bench = os.path.join(gpu, "alloc_bench")
    py = sys.executable
    only = set(args.only.split(","))
    pf = {"LD_PRELOAD": lib}
    t = Table()
    md = []

    alloc_configs = [
        ("cudaMalloc", [bench, "cudaMalloc"], {}),
        ("cudaMallocAsync", [bench, "cudaMallocAsync"], {}),
        ("pagefast", [bench, "cudaMalloc"], dict(pf, BENCH_LABEL="pagefast")),
        ("pagefast-forward", [bench, "cudaMalloc"], dict(pf, PAGEFAST_CONF="pool:off", BENCH_LABEL="forward")),
    ]
    # Each repeat runs the configurations in a fresh random order, so that a
    # drift of the card over the run does not favour one of them.
    rng = random.Random(12345)

    def shuffled(items):
        items = list(items)
        rng.shuffle(items)
        return items

    if "alloc" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs):
                for res in results(run(argv + ["pairs"], env).stdout):
                    t.add("pairs", name, res["bytes"], "p50_ns", res["p50_ns"])
                    t.add("pairs", name, res["bytes"], "p99_ns", res["p99_ns"])
        sizes = sorted({int(k) for b, c, k, m, v in t.rows if b == "pairs"})
        md += ["### alloc+free pair latency (ns; median over processes of per-process p50/p99)", "",
               "| bytes | cudaMalloc p50 | p99 | cudaMallocAsync p50 | p99 | pagefast p50 | p99 | forward-only p50 | "
               "cudaMalloc / pagefast | cudaMallocAsync / pagefast | forward / cudaMalloc |",
               "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for s in sizes:
            k = str(s)
            m = {c: (t.median("pairs", c, k, "p50_ns"), t.median("pairs", c, k, "p99_ns")) for c, _, _ in alloc_configs}
            md.append(f"| {s} | {m['cudaMalloc'][0]:.0f} | {m['cudaMalloc'][1]:.0f} | {m['cudaMallocAsync'][0]:.0f} | "
                      f"{m['cudaMallocAsync'][1]:.0f} | {m['pagefast'][0]:.0f} | {m['pagefast'][1]:.0f} | "
                      f"{m['pagefast-forward'][0]:.0f} | {m['cudaMalloc'][0] / m['pagefast'][0]:.0f}x | "
                      f"{m['cudaMallocAsync'][0] / m['pagefast'][0]:.1f}x | "
                      f"{m['pagefast-forward'][0] / m['cudaMalloc'][0]:.3f} |")
        md.append("")

    if "threads" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs[:3]):
                for res in results(run(argv + ["threads", "16"], env).stdout):
                    t.add("threads", name, "64K", "one", res["one_pairs_per_s"])
                    t.add("threads", name, "64K", "many", res["many_pairs_per_s"])
        md += ["### 16 threads at once, 64 KiB pairs (pairs/s, medians)", "",
               "| allocator | 1 thread | 16 threads | scale |", "| --- | ---: | ---: | ---: |"]
        for name, _, _ in alloc_configs[:3]:
            one, many = t.median("threads", name, "64K", "one"), t.median("threads", name, "64K", "many")
            md.append(f"| {name} | {one:.0f} | {many:.0f} | {many / one:.2f}x |")
        md.append("")

    if "cold" in only:
        for _ in range(args.repeats):
            for name, argv, env in shuffled(alloc_configs[:3]):
                for res in results(run(argv + ["cold"], env).stdout):
                    t.add("cold", name, "16G", "total_ms", res["total_ms"])
        md += ["### cold growth: 16 GiB in 20 MiB requests, fresh process (ms, median)", "",
               "| allocator | total ms | cudaMalloc / this |", "| --- | ---: | ---: |"]
        base = t.median("cold", "cudaMalloc", "16G", "total_ms")
        for name, _, _ in alloc_configs[:3]:
            v = t.median("cold", name, "16G", "total_ms")
            md.append(f"| {name} | {v:.1f} | {base / v:.1f}x |")
        md.append("")

    if "gather" in only:
        for _ in range(args.repeats):
            for name, env in shuffled([("cudaMalloc", {}), ("pagefast", pf)]):
                for res in results(run([os.path.join(gpu, "gather_bench")], env).stdout):
                    t.add("gather", name, "32G", "gloads", res["gloads_per_s"])
        a, b = t.median("gather", "cudaMalloc", "32G", "gloads"), t.median("gather", "pagefast", "32G", "gloads")
        md += ["### random 4-byte gathers over a 32 GiB buffer (G loads/s, median)", "",
               "| cudaMalloc | pagefast | pagefast / cudaMalloc |", "| ---: | ---: | ---: |",
               f"| {a:.2f} | {b:.2f} | {b / a:.4f} |", ""]

    if "seed" in only:
        torch_configs = [
            ("default", {}),
            ("expandable_segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
            ("cudaMallocAsync backend", {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
            ("no caching", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
        ]
        seed = [py, os.path.join(HERE, "seed.py")]
        for _ in range(args.repeats):
            for name, env in shuffled(torch_configs):
                for label, extra in shuffled([("without", {}), ("with", pf)]):
                    for res in results(run(seed, dict(env, **extra)).stdout):
                        for metric in ["first_s", "second_s", "after_empty_cache_s"]:
                            t.add("seed", f"{name}/{label}", "1000x4MiB", metric, res[metric])
        md += ["### seed benchmark: 1000 x torch.randn(1024, 1024) (s, median of fresh processes)", "",
               "| PyTorch allocator | pass | without pagefast | with pagefast | with / without |",
               "| --- | --- | ---: | ---: | ---: |"]
        for name, _ in torch_configs:
            for metric in ["first_s", "second_s", "after_empty_cache_s"]:
                a = t.median("seed", f"{name}/without", "1000x4MiB", metric)
                b = t.median("seed", f"{name}/with", "1000x4MiB", metric)
                md.append(f"| {name} | {metric[:-2]} | {a:.4f} | {b:.4f} | {b / a:.2f} |")
        md.append("")

    if "train" in only:
        losses = {}
        for _ in range(max(1, min(args.repeats, 3))):
            for model in ["resnet18", "transformer"]:
                for label, env in [("without", {}), ("with", pf)]:
                    r = run([py, os.path.join(HERE, "train.py"), model, "30"], env, timeout=600)
                    for res in results(r.stdout):
                        t.add("train", f"{model}/{label}", "step", "s", res["median_step_s"])
                    m = re.search(r"^losses (.*)$", r.stdout, re.M)
                    losses.setdefault((model, label), set()).add(m.group(1) if m else None)
        md += ["### training steps (median step time, s)", "",
               "| model | without pagefast | with pagefast | with / without | losses bit-identical |",
               "| --- | ---: | ---: | ---: | --- |"]
        for model in ["resnet18", "transformer"]:
            a = t.median("train", f"{model}/without", "step", "s")
            b = t.median("train", f"{model}/with", "step", "s")
            same = losses.get((model, "without")) == losses.get((model, "with")) and len(losses.get((model, "with"), ())) == 1
            md.append(f"| {model} | {a:.5f} | {b:.5f} | {b / a:.3f} | {'yes' if same else 'NO'} |")
        md.append("")

    commit = os.environ.get("PAGEFAST_COMMIT") or subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True).stdout.strip() or "unknown"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    head = [f"Benchmarks, {datetime.date.today()}, commit {commit}, {smi}, {args.repeats} fresh processes per configuration",
            f"command: tools/bench/run.py --repeats {args.repeats} --only {args.only}", ""]
    text = "\n".join(head + md)
    print(text)
    if args.md:
        open(args.md, "w").write(text + "\n")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["bench", "config", "key", "metric", "value"])
            w.writerows(t.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
