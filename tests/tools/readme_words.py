#!/usr/bin/env python3
"""tests/tools/readme_words.py: README.md stays short and shows only what
was shown. At most 200 lines; no absolute it cannot show; every row of its
results table that is not "not measured" names its machine (an H100 or an H200),
a date and a commit that docs/BENCHMARKS.md or docs/GPU-CHECK.md name, and
links a section that exists; the rest say "not measured". Its documents
table lists docs/SLEEP.md and docs/GLOSSARY.md; it has the section for
vLLM, SGLang and RL frameworks and says that the NUMA binding is
unmeasured on multi-node hardware. docs/GLOSSARY.md explains the words a
user meets.

usage: readme_words.py --source DIR
"""
import os
import re
import sys

FAILURES = []


def check(condition, what):
    print(("ok: " if condition else "FAIL: ") + what)
    if not condition:
        FAILURES.append(what)


def slug(heading):
    """The anchor GitHub makes of a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def main():
    source = sys.argv[sys.argv.index("--source") + 1]

    def read(*parts):
        with open(os.path.join(source, *parts)) as f:
            return f.read()

    readme = read("README.md")
    lines = readme.splitlines()
    check(len(lines) <= 200, "README.md is at most 200 lines (%d)" % len(lines))
    for absolute in ("never crash", "hangs or corrupts", "never hangs", "never corrupts"):
        check(absolute not in readme.lower(), "README.md does not say %r" % absolute)

    evidence = read("docs", "BENCHMARKS.md") + read("docs", "GPU-CHECK.md")
    anchors = {}
    for name in ("BENCHMARKS.md", "GPU-CHECK.md"):
        anchors[name] = {slug(h) for h in re.findall(r"^#+ (.*)$", read("docs", name), re.M)}

    start = [i for i, l in enumerate(lines) if l.startswith("| workload |")]
    check(len(start) == 1, "README.md has one results table")
    rows = []
    for l in lines[start[0] + 2:] if start else []:
        if not l.startswith("|"):
            break
        rows.append(l)
    check(len(rows) >= 10, "the results table has its rows (%d)" % len(rows))
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        what, result, where = cells[0], cells[1], cells[2] if len(cells) > 2 else ""
        if result.startswith("not measured"):
            continue
        check(re.match(r"(H100|H200), 2026-\d\d-\d\d, [0-9a-f]{7}", where) is not None,
              "%s: names its machine, date and commit (%r)" % (what, where[:40]))
        for commit in re.findall(r"\b[0-9a-f]{7}\b", where):
            check(commit in evidence, "%s: commit %s is one docs/BENCHMARKS.md or GPU-CHECK.md names" % (what, commit))
        for doc, anchor in re.findall(r"\(docs/(BENCHMARKS\.md|GPU-CHECK\.md)#([\w-]+)\)", where):
            check(anchor in anchors[doc], "%s: docs/%s#%s exists" % (what, doc, anchor))
    for row in [r for r in rows if "sleep" in r.lower()]:
        check("H100" in row, "the sleep rows give the newest figures, the H100's (%s)" % row[:50])

    docs_table = readme[readme.find("## Documents"):]
    for doc in ("docs/SLEEP.md", "docs/GLOSSARY.md"):
        check(doc in docs_table, "the documents table lists %s" % doc)
    check("## vLLM, SGLang and RL frameworks" in readme, "a section for vLLM, SGLang and RL frameworks")
    for words in ("pagefast-run -- vllm serve", "pagefast-run --tms -- python -m sglang.launch_server", "LD_PRELOAD",
                  "PYTHONPATH", "OpenRLHF", "verl", "slime"):
        check(words in readme, "the section says %r" % words)
    check("unmeasured on real multi-node hardware" in " ".join(readme.split()),
          "the NUMA binding is said to be unmeasured")

    glossary = read("docs", "GLOSSARY.md")
    for term in ("seed loop", "RESERVED", "rank test", "vmm_grow_ahead", "idle_share", "reserve", "partly asleep",
                 "pass-through", "active", "off"):
        check("**%s" % term in glossary, "docs/GLOSSARY.md explains %r" % term)
    print("%d failed checks" % len(FAILURES))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
