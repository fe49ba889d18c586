"""tests/tools/promcheck.py: a strict check of Prometheus's text exposition
format (version 0.0.4), written for the tests so that they need no package
beyond Python's standard library (prometheus_client's parser is used beside
it where it is installed: tests/tools/cases.py)."""
import re

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
LABELS = r"\{(?:[a-zA-Z_][a-zA-Z0-9_]*=" + LABEL_VALUE + r"(?:,[a-zA-Z_][a-zA-Z0-9_]*=" + LABEL_VALUE + r")*)?\}"
VALUE = r"(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?Inf|NaN)"


def strict_parse(text):
    """The text exposition format 0.0.4, strictly: every family has one
    HELP and one TYPE line before its samples, names are valid, samples
    belong to the family just declared, label values are escaped, no label
    set repeats, counters end in _total. Returns {family: (type, help,
    [(labels dict, value)])}; raises ValueError naming the line."""
    families, current = {}, None
    seen_series = set()
    if text and not text.endswith("\n"):
        raise ValueError("the text does not end in a newline")
    # Only "\n" ends a line (a label value may hold "\r" or U+2028 as is).
    for n, line in enumerate(text[:-1].split("\n") if text else [], 1):
        if not line:
            continue
        m = re.fullmatch(r"# HELP (" + NAME + r") (.*)", line)
        if m:
            name = m.group(1)
            if name in families:
                raise ValueError(f"line {n}: {name} declared twice")
            if re.search(r"\\[^\\n]", m.group(2)):
                raise ValueError(f"line {n}: bad escape in HELP")
            families[name] = [None, m.group(2), []]
            current = name
            continue
        m = re.fullmatch(r"# TYPE (" + NAME + r") (counter|gauge|histogram|summary|untyped)", line)
        if m:
            if m.group(1) != current or families[current][0] is not None or families[current][2]:
                raise ValueError(f"line {n}: TYPE of {m.group(1)} not right after its HELP")
            families[current][0] = m.group(2)
            continue
        if line.startswith("#"):
            raise ValueError(f"line {n}: unexpected comment {line!r}")
        m = re.fullmatch("(" + NAME + ")(" + LABELS + ")? (" + VALUE + ")", line)
        if not m:
            raise ValueError(f"line {n}: not a sample: {line!r}")
        name, labels, value = m.group(1), m.group(2) or "{}", m.group(3)
        if name != current or families[current][0] is None:
            raise ValueError(f"line {n}: sample of {name} outside its family")
        if (name, labels) in seen_series:
            raise ValueError(f"line {n}: series repeated")
        seen_series.add((name, labels))
        pairs = re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)=("(?:[^"\\]|\\.)*")', labels)
        label_dict = {k: re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n" else e.group(1), v[1:-1])
                      for k, v in pairs}
        families[name][2].append((label_dict, float(value)))
    for name, (kind, _, _) in families.items():
        if kind is None:
            raise ValueError(f"{name} has no TYPE")
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"counter {name} does not end in _total")
    return {k: tuple(v) for k, v in families.items()}


def check_tags(families):
    """The per-tag families (docs/STATS.md "Tags"): every pagefast_tag_*
    series names its tag and a policy of keep or discard, bytes are
    gauges, sleeps and wakes counters; one series per process, tag and
    policy. Raises ValueError naming the family."""
    for name, (kind, _, samples) in families.items():
        if not name.startswith("pagefast_tag_"):
            continue
        want = "counter" if name.endswith("_total") else "gauge"
        if kind != want:
            raise ValueError(f"{name} is a {kind}, not a {want}")
        keys = set()
        for labels, value in samples:
            if not labels.get("tag") or labels.get("policy") not in ("keep", "discard"):
                raise ValueError(f"{name}: a series without a tag or with policy {labels.get('policy')!r}")
            key = (labels.get("pid"), labels.get("pidns"), labels["tag"], labels["policy"])
            if key in keys:
                raise ValueError(f"{name}: tag {labels['tag']} ({labels['policy']}) twice for one process")
            keys.add(key)
            if value < 0:
                raise ValueError(f"{name}: negative {value}")
