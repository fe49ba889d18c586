#!/usr/bin/env python3
"""tools/bench/footprint_compare.py: the footprint measurement, side by
side in one run: PyTorch's training loops (tools/bench/footprint.py) with
its caching off, under cudaMalloc (no pagefast), an earlier libpagefast.so
(--before) and this build's, with PAGEFAST_CONF variants. Every
configuration runs in fresh processes, --repeats times, interleaved in a
fresh random order each round; prints the medians of steps/s, of the
peak memory the process held (NVML, tools/bench/nvml_peak.py, else
nvidia-smi) and of the process's CPU time
per step, their ratios, and each pagefast run's pool syncs (PAGEFAST_STATS
at exit), with the
most the pool itself held (peak_mapped_bytes; the process's peak less
the pool's is what the context and pass-throughs took).

  footprint_compare.py --build DIR [--before LIB] [--models resnet18,gpt2]
                       [--steps N] [--repeats R] [--conf "slack:500us;slack:10ms"]
                       [--growth-logs DIR]

--growth-logs DIR: pagefast runs log at debug level into
DIR/MODEL-CONFIG-RUN.log: one line per growth of the pool, with where its
idle memory was (docs/POOL.md "Stats").
"""
import argparse
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(model, steps, env_extra, log_path=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env.update(env_extra)
    stats_path = f"/tmp/footprint-compare-stats-{os.getpid()}.json"
    if "LD_PRELOAD" in env:
        env["PAGEFAST_STATS"] = stats_path  # the pool's figures at exit (docs/STATS.md)
        if log_path:
            env["PAGEFAST_LOG"] = "debug"
            env["PAGEFAST_LOG_FILE"] = log_path
    if os.path.exists(stats_path):
        os.unlink(stats_path)
    r = subprocess.run([sys.executable, os.path.join(HERE, "footprint.py"), "train", model, str(steps)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    m = re.search(r"([\d.]+) steps/s, peak held (\d+) MiB", r.stdout)
    c = re.search(r"cpu ([\d.]+) ms/step", r.stdout)
    if r.returncode != 0 or not m:
        print(f"FAILED {model} {env_extra}: rc {r.returncode}\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}")
        return None
    losses = next((l for l in r.stdout.splitlines() if l.startswith("losses")), "")
    source = re.search(r"peak held \d+ MiB \(([^,)]*)", r.stdout)
    syncs = ""
    if os.path.exists(stats_path):
        text = open(stats_path).read()
        total = re.search(r'"synchronizations": (\d+)', text)
        pool_peak = re.search(r'"peak_mapped_bytes": (\d+)', text)
        if total:
            syncs = total.group(1)
        if pool_peak:
            syncs += f", pool peak {int(pool_peak.group(1)) >> 20} MiB"
        os.unlink(stats_path)
    return (float(m.group(1)), int(m.group(2)), losses, float(c.group(1)) if c else float("nan"), syncs,
            source.group(1) if source else "?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--before", default=None, metavar="LIB")
    ap.add_argument("--models", default="resnet18,gpt2")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--conf", default="", help="extra PAGEFAST_CONF variants of this build, separated by ;")
    ap.add_argument("--growth-logs", default=None, metavar="DIR",
                    help="pagefast runs log at debug level (one line per growth) into DIR")
    args = ap.parse_args()
    lib = os.path.abspath(os.path.join(args.build, "interpose", "libpagefast.so"))
    configs = [("cudaMalloc", {})]
    if args.before:
        configs.append(("pagefast before", {"LD_PRELOAD": os.path.abspath(args.before)}))
    configs.append(("pagefast", {"LD_PRELOAD": lib}))
    for c in [c for c in args.conf.split(";") if c]:
        configs.append((f"pagefast {c}", {"LD_PRELOAD": lib, "PAGEFAST_CONF": c}))
    rng = random.Random(7)
    for model in args.models.split(","):
        got = {name: [] for name, _ in configs}
        losses = {name: set() for name, _ in configs}
        cpu = {name: [] for name, _ in configs}
        syncs = {name: [] for name, _ in configs}
        sources = set()
        for _ in range(args.repeats):
            order = list(configs)
            rng.shuffle(order)
            for name, env in order:
                log_path = None
                if args.growth_logs and "LD_PRELOAD" in env:
                    os.makedirs(args.growth_logs, exist_ok=True)
                    tag = re.sub(r"[^A-Za-z0-9_.:-]+", "_", name)
                    log_path = os.path.join(args.growth_logs, f"{model}-{tag}-{len(got[name])}.log")
                r = run(model, args.steps, env, log_path)
                if r:
                    got[name].append(r[:2])
                    losses[name].add(r[2])
                    cpu[name].append(r[3])
                    syncs[name].append(r[4])
                    sources.add(r[5])
        print(f"## {model}, PyTorch caching off, {args.steps} steps, {args.repeats} processes each (medians); "
              f"peak held sampled by {', '.join(sorted(sources)) or 'nothing'}")
        print("| allocator | steps/s | peak held MiB | steps/s vs cudaMalloc | held vs cudaMalloc | "
              "CPU ms/step | runs | losses |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
        base = got["cudaMalloc"]
        bs = statistics.median(s for s, _ in base) if base else float("nan")
        bh = statistics.median(h for _, h in base) if base else float("nan")
        ref = losses["cudaMalloc"]
        for name, _ in configs:
            if not got[name]:
                print(f"| {name} | failed | | | | | 0 | |")
                continue
            s = statistics.median(x for x, _ in got[name])
            h = statistics.median(y for _, y in got[name])
            same = "same as cudaMalloc" if losses[name] == ref and len(ref) == 1 else \
                ("differ" if len(ref) == 1 else "cudaMalloc runs disagree")
            c = statistics.median(cpu[name])
            print(f"| {name} | {s:.2f} | {h:.0f} | {s / bs:.3f} | {h / bh:.3f} | {c:.1f} | {len(got[name])} | {same} |")
            print(f"raw {model} {name}: " + " ".join(f"{x:.2f}/{y}" for x, y in got[name]) +
                  ("; pool syncs " + ", ".join(syncs[name]) if any(syncs[name]) else ""))
        print()


if __name__ == "__main__":
    main()
