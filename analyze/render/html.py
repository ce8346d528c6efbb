"""A self-contained HTML report: the terminal report's tables plus every figure, in one file.

No server, no external CSS, JavaScript or fonts: styles are inline and figures are inline SVG
(their text stays text, so the page is searchable). Written atomically.

    >>> from analyze import load, html
    >>> a = load("report.sqlite")
    >>> html.tables(a)["phases"]          # the tables of the report, times in ms
    >>> html.write_html(a, "report.html")
"""
from __future__ import annotations

import datetime as _dt
import html as _html
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import views
from analyze.render import plots

__all__ = ["tables", "render_html", "write_html", "TABLE_TITLES"]

MS = 1e6

TABLE_TITLES = {
    "ranks": "Ranks",
    "phases": "Exclusive GPU time per phase and rank (ms): every GPU nanosecond counted once",
    "cross_rank": "Per phase across ranks (ms)",
    "top_kernels": "Top kernels per phase (all ranks)",
    "cycles": "Decode cycles: pooled percentiles over all cycles of all ranks (ms)",
    "skew": "All-reduce skew per rank (ms): wait = time spent before the last rank arrived",
}


def _ms(v):
    if v is None:
        return np.nan
    try:
        f = float(v)
    except (TypeError, ValueError):
        return np.nan
    return f / MS


def _col(frame: pd.DataFrame, *names: str):
    for n in names:
        if n in frame.columns:
            return n
    return None


def tables(a, top: int = 5) -> dict[str, pd.DataFrame]:
    """The report's tables as DataFrames ready to show: times in ms (float), shares in [0, 1].

    ``ranks``, ``phases`` (phase x rank exclusive ms, ``share`` of all ranks' busy time, a ``busy``
    row), ``cross_rank``, ``top_kernels`` (``top`` per phase), ``cycles`` (percentiles) and ``skew``
    (empty when there are no collectives)."""
    out: dict[str, pd.DataFrame] = {}
    totals = a.totals.set_index("rank") if len(a.totals) else pd.DataFrame()
    rows = []
    for r in a.ranks.itertuples():
        t = totals.loc[r.rank] if r.rank in totals.index else None
        rows.append({"rank": int(r.rank), "pid": int(r.pid), "device": getattr(r, "device_ids", ""),
                     "source": getattr(r, "source", ""),
                     "GPU ops": int(t["gpu_ops"]) if t is not None and "gpu_ops" in t else np.nan,
                     "kernel ms": _ms(t["kernel_ns"]) if t is not None else np.nan,
                     "busy ms": _ms(t["busy_ns"]) if t is not None else np.nan,
                     "idle ms": _ms(t["idle_ns"]) if t is not None else np.nan})
    out["ranks"] = pd.DataFrame(rows)

    by_rank = views.get(a, "phase_by_rank")
    frame = by_rank.drop(columns="share") / MS
    frame.columns = [f"rank {r}" for r in frame.columns]
    frame["share"] = by_rank["share"]
    out["phases"] = frame.rename_axis("phase").reset_index()

    cross = views.get(a, "phase_across_ranks")
    if len(cross):
        out["cross_rank"] = pd.DataFrame({
            "phase": cross["phase"], "ranges": cross["ranges"].to_numpy(),
            "CPU ms": cross["cpu_ns"].to_numpy() / MS, "projected ms": cross["projected_ns"].to_numpy() / MS,
            "kernel ms": cross["kernel_ns"].to_numpy() / MS,
            "excl min": cross["exclusive_min_ns"].to_numpy(dtype=float) / MS,
            "excl median": cross["exclusive_median_ns"].to_numpy(dtype=float) / MS,
            "excl max": cross["exclusive_max_ns"].to_numpy(dtype=float) / MS,
            "spread": cross["exclusive_spread_ns"].to_numpy(dtype=float) / MS,
            "max rank": cross["slowest_rank"].to_numpy()})
    else:
        out["cross_rank"] = pd.DataFrame()

    g = views.get(a, "top_kernels", top=top)
    if len(g):
        out["top_kernels"] = pd.DataFrame({"phase": g["phase"], "kernel": g["name"], "count": g["instances"],
                                           "total ms": g["total_ns"] / MS, "mean us": g["mean_ns"] / 1e3,
                                           "share": g["share"]})
    else:
        out["top_kernels"] = pd.DataFrame()

    dist = views.get(a, "cycle_distribution")
    if len(dist):
        out["cycles"] = pd.DataFrame({"figure": dist["figure"], "cycles": dist["cycles"],
                                      **{c.replace("_ns", ""): dist[c].astype(float) / MS
                                         for c in ("mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns")}})
    else:
        out["cycles"] = pd.DataFrame()

    coll = a.collectives
    if coll is not None and len(coll):
        s = views.get(a, "skew")
        last = _col(s, "times_late", "times_last")
        done = s["wait_ns"].astype(float) + s["transfer_ns"].astype(float)
        out["skew"] = pd.DataFrame({
            "rank": s["rank"], "collectives": s["collectives"], "wait": s["wait_ns"].astype(float) / MS,
            "transfer": s["transfer_ns"].astype(float) / MS,
            "wait share": np.where(done > 0, s["wait_ns"].astype(float) / done.where(done > 0, 1), 0.0),
            "arrived last (times)": s[last] if last else np.nan,
            "made others wait": s["late_by_ns"].astype(float) / MS,
            "late in": s["late_phase"].where(s["late_phase"].notna(), "-")})
    else:
        out["skew"] = pd.DataFrame()
    return out


# ------------------------------------------------------------------------------------------------
# HTML

_CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --band:#f6f8fa; --accent:#0969da; }
* { box-sizing: border-box; }
body { font-family: -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif; color: var(--fg);
       margin: 0; background: #fff; font-size: 14px; line-height: 1.45; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 34px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
.sub { color: var(--muted); margin: 0 0 14px; }
nav { background: var(--band); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; margin: 14px 0; }
nav a { color: var(--accent); text-decoration: none; margin-right: 14px; white-space: nowrap; }
.inputs { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; color: var(--muted);
          overflow-wrap: anywhere; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 6px 0 8px; font-size: 13px; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--line); }
th { background: var(--band); text-align: right; font-weight: 600; white-space: nowrap; }
td { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th.l, td.l { text-align: left; }
td.kernel { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; max-width: 560px;
            overflow: hidden; text-overflow: ellipsis; }
tr.total td { font-weight: 600; border-top: 2px solid var(--line); }
tr.first td { border-top: 2px solid var(--line); }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
figure { margin: 14px 0 26px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.notes li { margin: 3px 0; }
.callout { background: #fff8c5; border: 1px solid #d4a72c66; border-radius: 6px; padding: 6px 12px; }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; }
"""

_CAPTIONS = {
    "phases": "Every GPU nanosecond of a rank is counted once: where phases overlap, the phase listed "
              "first in the configuration owns the overlap; `other` is GPU time of no phase.",
    "timeline": "GPU ops of every rank over a window of decode cycles, coloured by phase; light grey is "
                "time the GPU sat idle inside the window.",
    "top_kernels": "Kernels (and memcpy/memset) with the most GPU time per phase, summed over ranks; the "
                   "label is the kernel's share of the phase's kernel time.",
    "cycle_distributions": "Left: the wall time of a decode cycle per rank. Right: exclusive GPU time per "
                           "phase in each cycle (all ranks pooled).",
    "cycle_breakdown": "Per decode cycle of the first rank: GPU time per phase (top) and the cycle's GPU "
                       "window split into busy time and gap (bottom); the slowest cycles are marked.",
    "verify_kernels": "GPU time of each of the top verify kernels in every decode cycle of every rank: a wide "
                      "box or a far outlier is a kernel whose time changes between cycles.",
    "allreduce_wait": "How long each rank waited inside each all-reduce for the last rank to arrive; dots "
                      "mark the rank that arrived last.",
}


def _esc(v) -> str:
    return _html.escape(str(v), quote=True)


def _fmt(v, col: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "-"
    if col in ("share", "wait share"):
        return f"{100 * float(v):.1f}%"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}" if col not in ("rank", "pid", "max rank") else str(int(v))
    if isinstance(v, (float, np.floating)):
        if col in ("cycles", "count", "ranges", "collectives", "GPU ops", "arrived last (times)") \
                and float(v).is_integer():
            return f"{int(v):,}"
        return f"{float(v):,.3f}" if col != "mean us" else f"{float(v):,.1f}"
    return str(v)


def _table_html(frame: pd.DataFrame, *, left: tuple[str, ...] = (), kernel_col: str | None = None,
                total_row: str | None = None, group_col: str | None = None, colors: dict | None = None,
                table_id: str = "") -> str:
    if frame is None or frame.empty:
        return '<p class="sub">no data</p>'
    cols = list(frame.columns)
    short = {}
    if kernel_col is not None:  # twins (same short name) get the word that tells them apart
        names = frame[kernel_col].astype(str).tolist()
        short = dict(zip(names, plots._unique_labels(names, 90)))
    head = "".join(f'<th class="{"l" if c in left or c == kernel_col else ""}">{_esc(c)}</th>' for c in cols)
    body = []
    prev_group = object()
    for row in frame.itertuples(index=False, name=None):
        cls = []
        if total_row is not None and row[0] == total_row:
            cls.append("total")
        if group_col is not None:
            g = row[cols.index(group_col)]
            if g != prev_group and body:
                cls.append("first")
            prev_group = g
        cells = []
        for c, v in zip(cols, row):
            if c == kernel_col:
                cells.append(f'<td class="l kernel" title="{_esc(v)}">{_esc(short.get(str(v)) or plots.short_name(v, 90))}</td>')
            elif c in left:
                sw = ""
                if colors and c == cols[0] and str(v) in colors:
                    sw = f'<span class="swatch" style="background:{colors[str(v)]}"></span>'
                cells.append(f'<td class="l">{sw}{_esc(_fmt(v, c))}</td>')
            else:
                cells.append(f"<td>{_esc(_fmt(v, c))}</td>")
        body.append(f'<tr class="{" ".join(cls)}">' + "".join(cells) + "</tr>")
    tid = f' id="{_esc(table_id)}"' if table_id else ""
    return (f'<div class="scroll"><table{tid}><thead><tr>{head}</tr></thead><tbody>'
            + "\n".join(body) + "</tbody></table></div>")


_SVG_HEAD = re.compile(r"^.*?(<svg\b)", re.S)


def _inline_svg(fig, title: str) -> str:
    svg = plots.to_bytes(fig, "svg").decode("utf-8")
    svg = _SVG_HEAD.sub(r"\1", svg, count=1)  # drop the XML prolog and DOCTYPE
    # scale with the page: keep the viewBox, let CSS size it
    m = re.search(r'<svg\b[^>]*?\swidth="([\d.]+)pt"\s+height="[^"]*"', svg)
    if m:  # let CSS size it (the viewBox keeps the aspect), at most 1.2x its natural size
        natural_px = float(m.group(1)) * 4 / 3
        svg = svg[:m.start()] + re.sub(r'\swidth="[^"]*"\s+height="[^"]*"',
                                       f' style="max-width:{natural_px * 1.2:.0f}px"', m.group(0), count=1) \
            + svg[m.end():]
    svg = svg.replace("<svg", f'<svg role="img" aria-label="{_esc(title)}"', 1)
    return svg


def _figure_html(name: str, fig) -> str:
    label = plots.FIGURES[name][1]
    return (f'<figure id="fig-{name}">{_inline_svg(fig, label)}'
            f"<figcaption><b>{_esc(label)}.</b> {_esc(_CAPTIONS.get(name, ''))}</figcaption></figure>")


def render_html(a, *, top: int = 5, title: str = "specprof report") -> str:
    """The whole report as one HTML string (see :func:`write_html`): each table followed by its
    figures; figures without data are left out and said so under Notes."""
    t = tables(a, top=top)
    colors = plots.phase_colors(a.phase_names)
    figs, fig_notes = plots.figures(a)
    notes = list(a.notes) + [n for n in fig_notes if n not in a.notes]

    def fig(name: str) -> str:
        return _figure_html(name, figs[name]) if name in figs else ""

    sections: list[tuple[str, str, str, str]] = []  # (id, nav label, heading, html)
    sections.append(("phases", "Phases", TABLE_TITLES["phases"],
                     _table_html(t["phases"], left=("phase",), total_row="busy", colors=colors,
                                 table_id="t-phases") + fig("phases")))
    sections.append(("timeline", "Timeline", "Decode-cycle timeline",
                     fig("timeline") or '<p class="sub">no GPU ops</p>'))
    sections.append(("cross-rank", "Across ranks", TABLE_TITLES["cross_rank"],
                     '<p class="sub">ranges, CPU and projected time: over the outermost NVTX ranges of each '
                     'phase; excl min/median/max over ranks; max rank = the rank with the most exclusive '
                     'time.</p>' + _table_html(t["cross_rank"], left=("phase",), colors=colors,
                                               table_id="t-cross-rank")))
    sections.append(("kernels", "Kernels", TABLE_TITLES["top_kernels"],
                     _table_html(t["top_kernels"], left=("phase",), kernel_col="kernel", group_col="phase",
                                 colors=colors, table_id="t-kernels") + fig("top_kernels")))
    cyc_html = _table_html(t["cycles"], left=("figure",), table_id="t-cycles")
    tok = views.get(a, "tokens")
    if tok:
        per = tok.get("tokens_per_cycle") or tok.get("accepted_per_cycle")
        tps = tok.get("tokens_per_s")
        cyc_html += (f'<p class="sub">rank {tok["rank"]}: {tok.get("tokens", 0):.0f} tokens in {tok["cycles"]} '
                     f"cycles" + (f", {per:.2f} per cycle" if per else "")
                     + (f", {tps:,.1f} tokens/s" if tps else "") + "</p>")
    sections.append(("cycles", "Cycles", TABLE_TITLES["cycles"],
                     cyc_html + fig("cycle_distributions") + fig("cycle_breakdown") + fig("verify_kernels")))
    if len(t["skew"]):
        strag = views.get(a, "stragglers")
        n = a.collectives["collective"].nunique()
        extra = (f'<p class="callout">straggler rank(s): <b>{", ".join(map(str, strag))}</b></p>' if strag
                 else '<p class="sub">no straggler: no rank was late noticeably more often than others</p>')
        sections.append(("skew", "All-reduce skew", f"All-reduce skew per rank over {n} collectives (ms)",
                         '<p class="sub">wait = time inside the all-reduce before the last rank arrived; '
                         "made others wait = arrival spread of the collectives the rank arrived last in."
                         "</p>" + _table_html(t["skew"], left=("late in",), table_id="t-skew") + extra
                         + fig("allreduce_wait")))
    else:
        sections.append(("skew", "All-reduce skew", "All-reduce skew",
                         '<p class="sub">no collectives: one rank, or no all-reduce kernels matched the '
                         "allreduce phase's kernel patterns</p>"))
    sections.append(("ranks", "Ranks", TABLE_TITLES["ranks"],
                     _table_html(t["ranks"], left=("device", "source"), table_id="t-ranks")))
    sections.append(("notes", "Notes", "Notes", ('<ul class="notes">' + "".join(f"<li>{_esc(str(n))}</li>" for n in notes)
                                                 + "</ul>") if notes else '<p class="sub">none</p>'))

    inputs = "<br>".join(
        _esc(f"{i['path']}  (nsys {i.get('nsys_version') or '?'}, schema {i.get('schema_version') or '?'}, "
             f"graphs traced: {i.get('cuda_graph_trace') or '-'})") for i in a.inputs)
    n_ranks = len(a.ranks)
    n_cycles = views.get(a, "cycle_counts")["cycle_numbers"]
    nav = "".join(f'<a href="#{sid}">{_esc(label)}</a>' for sid, label, _, _ in sections)
    body = "\n".join(f'<section id="{sid}"><h2>{_esc(h)}</h2>\n{content}</section>'
                     for sid, _, h, content in sections)
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}</title>
<style>{_CSS}</style></head>
<body><main>
<h1>{_esc(title)}</h1>
<p class="sub">GPU time per phase, kernel and rank of a speculative-decoding run: {n_ranks} rank(s),
{n_cycles} decode cycle(s), phases {_esc(", ".join(a.phase_names))}.</p>
<div class="inputs">{inputs}</div>
<nav>{nav}</nav>
{body}
<footer>generated by specprof (analyze-trace --html) on {when}</footer>
</main></body></html>
"""


def write_html(result, path, *, top: int = 5) -> Path:
    """Write the self-contained HTML report to ``path`` atomically; returns the path."""
    from analyze.atomic import atomic_write

    text = render_html(result, top=top)
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)
