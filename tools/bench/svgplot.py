#!/usr/bin/env python3
"""tools/bench/svgplot.py: the charts of the benchmarks (tools/bench/run.py)
and of pagefast-replay, line and grouped-bar charts as self-contained SVG
files, with axes, ticks, labels and a legend. Drawn by matplotlib where it
is installed, else by the SVG writer here (Python 3 standard library only:
the GPU machine may have no matplotlib). No fonts, scripts or styles from
outside: the files show as they are on GitHub. The same input writes the
same bytes, either way.

  line_chart(path, title, series, xlabel, ylabel, logx=False, logy=False, xticks_labels=None)
  bar_chart(path, title, categories, series, ylabel, logy=None)

NOTE, when set, is a line under every title (date, commit, data file).
logy=None: a log scale when the positive values span a decade or more
(auto_log), so that no bar that matters is drawn zero high. ENGINE picks
the drawer: "auto" (matplotlib if it imports), "svg" or "matplotlib".

  python3 tools/bench/svgplot.py OUTDIR [svg|matplotlib]   (writes demo-line.svg and demo-bar.svg)
"""
import math
import os
import sys
from xml.sax.saxutils import escape

ENGINE = "auto"  # "auto", "svg" or "matplotlib" (run.py --plot, pagefast-replay --plot)
# A line under every chart's title: where its figures come from (the date,
# the commit and the data file; run.py sets it), so that a chart copied
# alone still says what it shows. "" draws none.
NOTE = ""
ENGINES = ("auto", "svg", "matplotlib")

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
           "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
DASHES = ["", "7 4", "2 3", "9 3 2 3"]  # line styles, with the colours, for lines that lie on one another
FONT = 'font-family="sans-serif"'
PLOT_W, PLOT_H = 560, 320          # the plot area, in px
LEFT, TOP, BOTTOM = 80, 50, 70     # margins around it; the legend is on the right


def esc(s):
    return escape(str(s), {'"': "&quot;"})


def finite(v):
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def compact(v):
    """A short label for a number: 243, 1.27k, 90.4k, 3.76M, 0.0153."""
    if not finite(v):
        return "n/a"
    a = abs(v)
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div * 0.9995:
            return _short(v / div) + suffix
    return _short(v)


def _short(x):
    if x == round(x) and abs(x) < 1e3:
        return str(int(round(x)))
    return f"{x:.3g}"


def auto_log(values):
    """A log scale fits when the positive values span a decade or more: on a
    linear one the smallest would be a tenth of the plot or less (a bar of
    a few pixels, or none)."""
    pos = [v for v in values if finite(v) and v > 0]
    return len(pos) >= 2 and max(pos) >= 10 * min(pos)


def log_ticks(lo, hi):
    """Tick values for a log axis over [lo, hi]: decades, with 2 and 5 (then
    every multiple) added when fewer than three decades fall inside."""
    d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    ticks = []
    for mults in ([1], [1, 2, 5], range(1, 10)):
        ticks = [m * 10.0 ** d for d in range(d0, d1 + 1) for m in mults
                 if lo * (1 - 1e-9) <= m * 10.0 ** d <= hi * (1 + 1e-9)]
        if len(ticks) >= 3:
            break
    return ticks


def linear_ticks(lo, hi, n=5):
    span = hi - lo if hi > lo else abs(hi) or 1.0
    raw = span / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9)
    return [round(i * step, 12) for i in range(first, int(math.floor(hi / step + 1e-9)) + 1)]


class Axis:
    """Maps data values to pixels between p0 and p1 (p1 may be < p0)."""

    def __init__(self, lo, hi, log, p0, p1):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.log, self.p0, self.p1 = lo, hi, log, p0, p1

    def __call__(self, v):
        t = math.log10(v) if self.log else v
        return self.p0 + (t - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)


def data_range(values, log, pad=0.05, zero=False):
    vals = [v for v in values if finite(v) and (v > 0 or not log)]
    if not vals:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(vals), max(vals)
    if log:
        f = 10 ** (max(math.log10(hi / lo), 1.0) * pad)
        return lo / f, hi * f
    if zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    p = (hi - lo) * pad or abs(hi) * pad or 1.0
    return (lo if zero and lo == 0 else lo - p), (hi if zero and hi == 0 else hi + p)


def _f(v):
    return f"{v:.1f}"


def _styled(series):
    """[(name, data[, colour]), ...] -> [(name, data, colour, dash), ...]."""
    return [(s[0], list(s[1]), s[2] if len(s) > 2 and s[2] else COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)])
            for i, s in enumerate(series)]


class Svg:
    def __init__(self, title, width, height):
        self.w, self.h = width, height
        self.out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                    f'viewBox="0 0 {width} {height}" {FONT} font-size="12">',
                    f"<title>{esc(title)}</title>",
                    f'<rect x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
                    f'<text x="{_f(width / 2)}" y="24" text-anchor="middle" font-size="15" '
                    f'font-weight="bold">{esc(title)}</text>']
        if NOTE:
            self.out.append(f'<text x="{_f(width / 2)}" y="41" text-anchor="middle" font-size="11" '
                            f'fill="#555555">{esc(NOTE)}</text>')

    def add(self, s):
        self.out.append(s)

    def text(self, x, y, s, anchor="middle", size=12, extra=""):
        self.add(f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" font-size="{size}"{extra}>{esc(s)}</text>')

    def save(self, path):
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n' + "\n".join(self.out + ["</svg>"]) + "\n")


def _frame(title, names, xlabel, ylabel, plot_w=PLOT_W):
    legend_w = 40 + 7 * max([len(str(n)) for n in names] + [4])
    svg = Svg(title, LEFT + plot_w + 20 + legend_w, TOP + PLOT_H + BOTTOM)
    svg.pw = plot_w
    x0, y0 = LEFT, TOP + PLOT_H
    svg.add(f'<rect x="{x0}" y="{TOP}" width="{plot_w}" height="{PLOT_H}" fill="none" stroke="#333333"/>')
    if xlabel:
        svg.text(x0 + plot_w / 2, y0 + 50, xlabel)
    ty = TOP + PLOT_H / 2
    svg.text(20, ty, ylabel, extra=f' transform="rotate(-90 20 {_f(ty)})"')
    return svg


def _yticks(svg, ax, log):
    lo, hi = (10 ** ax.lo, 10 ** ax.hi) if log else (ax.lo, ax.hi)
    for v in (log_ticks(lo, hi) if log else linear_ticks(lo, hi)):
        y = ax(v)
        svg.add(f'<line x1="{LEFT}" y1="{_f(y)}" x2="{LEFT + svg.pw}" y2="{_f(y)}" stroke="#dddddd"/>')
        svg.add(f'<line x1="{LEFT - 5}" y1="{_f(y)}" x2="{LEFT}" y2="{_f(y)}" stroke="#333333"/>')
        svg.text(LEFT - 8, y + 4, compact(v), anchor="end", size=11)


def _legend(svg, series, kind):
    x = LEFT + svg.pw + 20
    for i, (name, _, c, dash) in enumerate(series):
        y = TOP + 10 + 20 * i
        if kind == "line":
            d = f' stroke-dasharray="{dash}"' if dash else ""
            svg.add(f'<line x1="{x}" y1="{y}" x2="{x + 22}" y2="{y}" stroke="{c}" stroke-width="2"{d}/>')
            svg.add(f'<circle cx="{x + 11}" cy="{y}" r="3" fill="{c}"/>')
        else:
            svg.add(f'<rect x="{x + 4}" y="{y - 6}" width="14" height="12" fill="{c}"/>')
        svg.text(x + 28, y + 4, name, anchor="start")


def line_chart(path, title, series, xlabel, ylabel, logx=False, logy=False, xticks_labels=None):
    """series: [(name, [(x, y), ...][, colour]), ...]. Points with a missing
    or NaN coordinate (or <= 0 on a log axis) are left out and break the
    line. xticks_labels: [(x, label), ...] in place of the computed ticks."""
    def ok(x, y):
        return finite(x) and finite(y) and (x > 0 or not logx) and (y > 0 or not logy)
    if logy is None:
        logy = auto_log([y for s in series for _, y in s[1]])
    if _matplotlib():
        return _mpl_line_chart(path, title, _styled(series), xlabel, ylabel, logx, logy, xticks_labels)
    series = _styled(series)
    pts = [[(x, y) for x, y in s[1] if ok(x, y)] for s in series]
    xs = [p[0] for s in pts for p in s] + [x for x, _ in (xticks_labels or []) if finite(x)]
    ys = [p[1] for s in pts for p in s]
    names = [s[0] for s in series]
    svg = _frame(title, names, xlabel, ylabel)
    ax = Axis(*data_range(xs, logx), logx, LEFT, LEFT + PLOT_W)
    ay = Axis(*data_range(ys, logy), logy, TOP + PLOT_H, TOP)
    _yticks(svg, ay, logy)
    if xticks_labels is not None:
        xt = [(x, lab) for x, lab in xticks_labels if finite(x) and (x > 0 or not logx)]
    else:
        lo, hi = (10 ** ax.lo, 10 ** ax.hi) if logx else (ax.lo, ax.hi)
        xt = [(v, compact(v)) for v in (log_ticks(lo, hi) if logx else linear_ticks(lo, hi))]
    y0 = TOP + PLOT_H
    for v, lab in xt:
        x = ax(v)
        svg.add(f'<line x1="{_f(x)}" y1="{TOP}" x2="{_f(x)}" y2="{y0}" stroke="#eeeeee"/>')
        svg.add(f'<line x1="{_f(x)}" y1="{y0}" x2="{_f(x)}" y2="{y0 + 5}" stroke="#333333"/>')
        svg.text(x, y0 + 19, lab, size=11)
    for name, s, c, dash in series:
        svg.add(f'<g stroke="{c}" fill="{c}"><desc>{esc(name)}</desc>')
        d = f' stroke-dasharray="{dash}"' if dash else ""
        run = []
        for x, y in list(s) + [(None, None)]:
            if ok(x, y):
                run.append((ax(x), ay(y)))
                continue
            if len(run) > 1:
                svg.add(f'<polyline fill="none" stroke-width="2"{d} points="'
                        + " ".join(f"{_f(px)},{_f(py)}" for px, py in run) + '"/>')
            for px, py in run:
                svg.add(f'<circle cx="{_f(px)}" cy="{_f(py)}" r="3"/>')
            run = []
        svg.add("</g>")
    _legend(svg, series, "line")
    svg.save(path)


def _wrap(label, width_px, size=11):
    """Splits a category label into lines that fit width_px (about)."""
    per_line = max(4, int(width_px / (size * 0.6)))
    lines = []
    for part in str(label).split("\n"):
        cur = ""
        for word in part.split():
            if cur and len(cur) + 1 + len(word) > per_line:
                lines.append(cur)
                cur = word
            else:
                cur = f"{cur} {word}" if cur else word
        lines.append(cur)
    return lines


def bar_chart(path, title, categories, series, ylabel, logy=None):
    """Grouped bars: categories [str, ...], series [(name, [value per
    category][, colour]), ...]; a "\n" in a category starts a new line.
    Each bar carries its value; a missing or NaN value draws no bar, only
    "n/a" (and 0 on a log scale, only "0"). logy=None: auto_log."""
    series = _styled(series)
    vals = [v for s in series for v in s[1]]
    if logy is None:
        logy = auto_log(vals)
    if _matplotlib():
        return _mpl_bar_chart(path, title, categories, series, ylabel, logy)
    names = [s[0] for s in series]
    # Wide enough for each bar to carry its value upright (about 34 px a bar).
    plot_w = max(PLOT_W, int(len(categories) * max(1, len(series)) * 34 / 0.8))
    svg = _frame(title, names, "", ylabel, plot_w)
    lo, hi = data_range(vals, logy, pad=0.08, zero=True)
    if logy:
        lo = min(lo, 10 ** math.floor(math.log10(lo * 1.0001)))
    ay = Axis(lo, hi, logy, TOP + PLOT_H, TOP)
    _yticks(svg, ay, logy)
    y0 = TOP + PLOT_H
    slot = plot_w / max(1, len(categories))
    bw = slot * 0.8 / max(1, len(series))
    for j, cat in enumerate(categories):
        for k, line in enumerate(_wrap(cat, slot)):
            svg.text(LEFT + slot * (j + 0.5), y0 + 16 + 13 * k, line, size=11)
    base = ay(lo) if logy else ay(0.0)
    for i, (name, vs, c, _) in enumerate(series):
        svg.add(f'<g fill="{c}"><desc>{esc(name)}</desc>')
        for j, v in enumerate(list(vs)[:len(categories)]):
            x = LEFT + slot * (j + 0.1) + bw * i
            if not finite(v) or (logy and v <= 0):
                label = "0" if finite(v) and v == 0 else "n/a"
                svg.text(x + bw / 2, base - 4, label, size=10, extra=' fill="#888888"')
                continue
            y = ay(v)
            top, h = min(y, base), abs(base - y)
            svg.add(f'<rect x="{_f(x)}" y="{_f(top)}" width="{_f(bw)}" height="{_f(h)}"/>')
            cx, label = x + bw / 2, compact(v)
            if bw >= 7 * len(label):
                svg.text(cx, top - 4, label, size=10, extra=' fill="#222222"')
            else:
                svg.text(cx + 3, top - 4, label, anchor="start", size=10,
                         extra=f' fill="#222222" transform="rotate(-90 {_f(cx + 3)} {_f(top - 4)})"')
        svg.add("</g>")
    _legend(svg, series, "bar")
    svg.save(path)


# ---- matplotlib ---------------------------------------------------------------


def _matplotlib():
    """matplotlib's Figure and SVG canvas when ENGINE lets it draw and it
    imports; None for the SVG writer here."""
    if ENGINE == "svg":
        return None
    try:
        import matplotlib
        from matplotlib.backends.backend_svg import FigureCanvasSVG
        from matplotlib.figure import Figure
    except ImportError:
        if ENGINE == "matplotlib":
            raise
        return None
    return matplotlib, Figure, FigureCanvasSVG


def _mpl_save(fig, path, title):
    matplotlib = _matplotlib()[0]
    # No date and fixed ids: the same input writes the same bytes. Text
    # stays text (searchable, and the tests read it).
    with matplotlib.rc_context({"svg.hashsalt": "pagefast-svgplot", "svg.fonttype": "none"}):
        fig.savefig(path, format="svg", metadata={"Date": None, "Title": str(title)}, bbox_inches="tight")


def _mpl_figure(width_px):
    _, Figure, FigureCanvasSVG = _matplotlib()
    fig = Figure(figsize=(width_px / 100, (PLOT_H + TOP + BOTTOM) / 100), dpi=100)
    FigureCanvasSVG(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _mpl_log_labels(axis):
    """Decades labelled as the SVG writer labels them (1, 10, 100k, 0.01), no
    labels on the minor ticks."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis.set_major_formatter(FuncFormatter(lambda v, _: compact(v)))
    axis.set_minor_formatter(NullFormatter())


def _mpl_dash(dash):
    if not dash:
        return "-"
    parts = [float(p) for p in dash.split()]
    return (0, tuple(parts))


def _mpl_line_chart(path, title, series, xlabel, ylabel, logx, logy, xticks_labels):
    def ok(x, y):
        return finite(x) and finite(y) and (x > 0 or not logx) and (y > 0 or not logy)
    fig, ax = _mpl_figure(LEFT + PLOT_W + 200)
    for name, data, colour, dash in series:
        # A point left out breaks the line there, as in the SVG writer.
        xs = [x if ok(x, y) else float("nan") for x, y in data]
        ys = [y if ok(x, y) else float("nan") for x, y in data]
        ax.plot(xs, ys, color=colour, linestyle=_mpl_dash(dash), linewidth=2, marker="o", markersize=4, label=str(name))
    if logx:
        ax.set_xscale("log")
        _mpl_log_labels(ax.xaxis)
    if logy:
        ax.set_yscale("log")
        _mpl_log_labels(ax.yaxis)
    if xticks_labels is not None:
        xt = [(x, lab) for x, lab in xticks_labels if finite(x) and (x > 0 or not logx)]
        ax.set_xticks([x for x, _ in xt])
        ax.set_xticklabels([lab for _, lab in xt])
        ax.minorticks_off()
    ax.set_title(str(title) + ("\n" + NOTE if NOTE else ""), fontweight="bold")
    ax.set_xlabel(str(xlabel))
    ax.set_ylabel(str(ylabel))
    ax.grid(True, color="#dddddd")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    _mpl_save(fig, path, title)


def _mpl_bar_chart(path, title, categories, series, ylabel, logy):
    vals = [v for s in series for v in s[1]]
    plot_w = max(PLOT_W, int(len(categories) * max(1, len(series)) * 34 / 0.8))
    fig, ax = _mpl_figure(LEFT + plot_w + 200)
    lo, hi = data_range(vals, logy, pad=0.08, zero=True)
    if logy:
        lo = min(lo, 10 ** math.floor(math.log10(lo * 1.0001)))
        ax.set_yscale("log")
        _mpl_log_labels(ax.yaxis)
    ax.set_ylim(lo, hi)
    base = lo if logy else 0.0
    width = 0.8 / max(1, len(series))
    for i, (name, vs, colour, _) in enumerate(series):
        xs = [j - 0.4 + width * (i + 0.5) for j in range(len(categories))]
        vs = list(vs)[:len(categories)] + [None] * (len(categories) - len(vs))
        for x, v in zip(xs, vs):
            if not finite(v) or (logy and v <= 0):
                label = "0" if finite(v) and v == 0 else "n/a"
                ax.text(x, base, label, ha="center", va="bottom", fontsize=8, color="#888888")
                continue
            ax.bar([x], [v - base], width=width, bottom=base, color=colour)
            ax.text(x, v, compact(v), ha="center", va="bottom", fontsize=8, color="#222222",
                    rotation=0 if width * plot_w / max(1, len(categories)) >= 7 * len(compact(v)) else 90)
    ax.set_xticks(list(range(len(categories))))
    ax.set_xticklabels([str(c) for c in categories])
    ax.set_xlim(-0.5, len(categories) - 0.5)
    ax.set_title(str(title) + ("\n" + NOTE if NOTE else ""), fontweight="bold")
    ax.set_ylabel(str(ylabel))
    ax.grid(True, axis="y", color="#dddddd")
    ax.set_axisbelow(True)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=colour, label=str(name)) for name, _, colour, _ in series],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    _mpl_save(fig, path, title)


def main(argv):
    global ENGINE
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] not in ENGINES):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    if len(argv) == 3:
        ENGINE = argv[2]
    out = argv[1]
    os.makedirs(out, exist_ok=True)
    sizes = [512 * 8 ** i for i in range(8)]
    line_chart(os.path.join(out, "demo-line.svg"), "demo: latency by size (log-log)",
               [("flat", [(s, 250.0) for s in sizes]),
                ("growing", [(s, 100 + s / 1e3) for s in sizes]),
                ("with a gap", [(s, 5e4 if i != 3 else float("nan")) for i, s in enumerate(sizes)])],
               "request size", "ns", logx=True, logy=True,
               xticks_labels=[(512, "512 B"), (4096, "4 KiB"), (1 << 20, "1 MiB"), (1 << 30, "1 GiB")])
    bar_chart(os.path.join(out, "demo-bar.svg"), "demo: grouped bars <&>",
              ["one", "two words", "a much longer category name", "two\nlines"],
              [("series A", [1.5, 20.0, 300.0, 7.0]), ("series B", [2.0, float("nan"), 4500.0, 70.0], "#444444")],
              "value", logy=True)
    print(f"wrote {out}/demo-line.svg and {out}/demo-bar.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
