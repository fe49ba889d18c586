#!/usr/bin/env python3
"""tools/bench/vmm_first_pass.py: where the seed loop's first pass spends
its time with expandable segments, configurations side by side.

  vmm_first_pass.py ROUNDS CONFIG...
  vmm_first_pass.py --split FILE [P10_US]

Each CONFIG is LABEL:ENV[:ARGS], ENV a comma-separated list of VAR=VALUE
(empty for none; LD_PRELOAD=... for pagefast), ARGS extra seed.py
arguments separated by '+', e.g.

  without:  floor::--prewarm  cache:LD_PRELOAD=lib.so,PAGEFAST_CONF=vmm_grow_ahead#0

('#' stands for ':' inside a value; CPUS=LIST, with '/' for ',', runs
the process under `taskset -c LIST`, e.g. CPUS=0/2/4/6 to keep the
program's threads off each other's hyperthread siblings, or
CPUS=percore for the first CPU of each sibling list: the machine's sibling
lists are printed first). Every round runs each configuration
once in a fresh process, in a shuffled order, with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, seed.py --iter-times
--sched and PAGEFAST_STATS=stderr. Prints each process's RESULT, ITER and
SCHED lines and its vmm_clients stats, then per configuration the medians
of first_s, first_host_s, after_empty_cache_s, the ITER fields, the
scheduler's account of the program's thread during the first pass (time
on a CPU and on a run queue, voluntary and involuntary switches) and of
the pagefast-vmm thread, how many processes ended the pass with that
thread on the program's CPU or on a hyperthread sibling of it, and
ahead_waits and ahead_wait_ns.

--split reads such an output again and splits each configuration's
processes by their mode: on the H200 a process runs every call either
fast or about 40% slower, with pagefast or without (docs/BENCHMARKS.md),
which the medians mix. A process whose 10th-percentile call took less
than P10_US (default 10.5) is in the fast mode. Prints the median first
pass per configuration and mode."""
import functools
import json
import os
import random
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_config(spec):
    label, _, rest = spec.partition(":")
    env_s, _, args_s = rest.partition(":")
    env = {}
    for kv in filter(None, env_s.split(",")):
        k, _, v = kv.partition("=")
        env[k] = v.replace("#", ":").replace("/", ",") if k == "CPUS" else v.replace("#", ":")
    return label, env, [a for a in args_s.split("+") if a]


@functools.lru_cache(maxsize=None)
def siblings():
    """The hyperthread sibling lists of this machine's CPUs, distinct (read
    once: every process's placement is checked against them)."""
    out = set()
    base = "/sys/devices/system/cpu"
    for d in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        path = os.path.join(base, d, "topology", "thread_siblings_list")
        if re.match(r"^cpu\d+$", d) and os.path.exists(path):
            with open(path) as f:
                out.add(f.read().strip())
    return sorted(out, key=lambda s: int(re.split(r"[,-]", s)[0]))


def core_of(cpu):
    """The sibling list holding cpu, or None."""
    for sib in siblings():
        for part in sib.split(","):
            lo, _, hi = part.partition("-")
            if int(lo) <= cpu <= int(hi or lo):
                return sib
    return None


def fields(line):
    return {k: float(v) for k, v in (kv.split("=", 1) for kv in line.split()[1:]) if re.match(r"^-?[\d.]+$", v)}


def split(path, p10_us):
    by = {}
    cur = None
    with open(path) as f:
        for line in f:
            if line.startswith("RESULT"):
                cur = fields(line)
                cur["label"] = re.search(r"label=(\S+)", line).group(1)
            elif line.startswith("ITER") and cur is not None:
                mode = "fast" if fields(line)["p10_us"] < p10_us else "slow"
                by.setdefault(cur["label"], {"fast": [], "slow": []})[mode].append(cur["first_s"] * 1000)
                cur = None
    print(f"first pass (ms), processes split at a 10th-percentile call of {p10_us} us:")
    print("| config | fast: processes | median | slow: processes | median |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, modes in by.items():
        cells = []
        for mode in ("fast", "slow"):
            v = modes[mode]
            cells += [str(len(v)), f"{statistics.median(v):.2f}" if v else ""]
        print(f"| {label} | " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--split":
        split(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 10.5)
        return
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    rounds = int(sys.argv[1])
    configs = [parse_config(s) for s in sys.argv[2:]]
    base = {k: v for k, v in os.environ.items() if not k.startswith("PAGEFAST") and k != "LD_PRELOAD"}
    base["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    print("hyperthread siblings: " + " ".join(f"[{s}]" for s in siblings()))
    rng = random.Random(7)
    samples = {label: [] for label, _, _ in configs}
    for _ in range(rounds):
        order = list(configs)
        rng.shuffle(order)
        for label, env, args in order:
            e = dict(base, **{k: v for k, v in env.items() if k != "CPUS"})
            if "LD_PRELOAD" in env:
                e["PAGEFAST_STATS"] = "stderr"
            cpus = env.get("CPUS")
            if cpus == "percore":
                cpus = ",".join(re.split(r"[,-]", sib)[0] for sib in siblings())
            pin = ["taskset", "-c", cpus] if cpus else []
            r = subprocess.run(pin + [sys.executable, os.path.join(HERE, "seed.py"), label, "--iter-times", "--sched"] + args, env=e,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
            got = {}
            for line in r.stdout.splitlines():
                if line.startswith(("RESULT", "ITER", "SCHED")):
                    print(line)
                    got.update(fields(line))
                m = re.search(r"main_cpu_end=(\d+).* worker_cpu=(\d+)", line) if line.startswith("SCHED") else None
                if m:
                    main_cpu, worker_cpu = int(m.group(1)), int(m.group(2))
                    got["worker_same_cpu"] = float(main_cpu == worker_cpu)
                    got["worker_sibling"] = float(main_cpu != worker_cpu and core_of(main_cpu) == core_of(worker_cpu))
            m = re.search(r'"vmm_clients": (\{[^}]*\})', r.stderr)
            if m:
                vmm = json.loads(m.group(1))
                print(f"STATS label={label} " + " ".join(f"{k}={v}" for k, v in vmm.items()))
                got.update({k: float(v) for k, v in vmm.items()})
            if r.returncode != 0:
                print(f"FAILED label={label} rc={r.returncode}: {r.stderr[-500:]}")
            samples[label].append(got)
    keys = ["first_s", "first_host_s", "after_empty_cache_s", "p50_us", "p90_us", "p99_us", "max_us",
            "above_median_ms", "slowest10_above_ms", "slowest100_above_ms", "main_run_ms", "main_wait_ms", "main_vcsw",
            "main_ivcsw", "worker_run_ms", "worker_wait_ms", "ahead_waits", "ahead_wait_ns"]
    counts = ["worker_same_cpu", "worker_sibling"]
    print("\nmedians (first_s etc. in s; *_us per call; *_ms summed over the pass):")
    print("| config | " + " | ".join(keys + counts) + " |")
    print("| --- |" + " ---: |" * len(keys + counts))
    for label, _, _ in configs:
        row = []
        for k in keys:
            vals = [s[k] for s in samples[label] if k in s]
            row.append(f"{statistics.median(vals):.6g}" if vals else "")
        for k in counts:
            vals = [s[k] for s in samples[label] if k in s]
            row.append(f"{int(sum(vals))}/{len(vals)}" if vals else "")
        print(f"| {label} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
