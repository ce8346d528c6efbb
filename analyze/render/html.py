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

from analyze import notes as N, views
from analyze.attribute.phases import OTHER
from analyze.render import names as kernel_names, plots, text
from analyze.run.live import SOURCE as LIVE_SOURCE, is_live
from analyze.views import decode, skew

__all__ = ["tables", "render_html", "write_html", "TABLE_TITLES"]

MS = 1e6

TABLE_TITLES = {
    "decode": "Steady-state decode cycle per rank: where each cycle goes",
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
    out["decode"] = decode_table(a)
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


def decode_table(a, figure: str = "mean") -> pd.DataFrame:
    """The steady-state breakdown as shown: one row per rank, per component (``GPU idle`` for
    gpu_idle) ``<component> us`` (``figure``: the mean or the median over the rank's steady-state
    cycles) and ``<component> share`` (of the mean period), and ``cycle period us``. Components that
    are zero on every rank and are not draft/verify/draft_extend/allreduce/other/idle are left out,
    and all-reduce on a single rank (TP 1). Empty without a breakdown."""
    bd = views.get(a, "decode_breakdown")
    if bd.empty:
        return pd.DataFrame()
    sm = views.get(a, "decode_summary").set_index("rank")
    comps = shown_components(a, bd)
    col = "per_cycle_ns" if figure == "mean" else "median_ns"
    rows = []
    for r in sorted(bd["rank"].unique()):
        c = bd[bd["rank"] == r].set_index("component").reindex(comps)
        row = {"rank": int(r)}
        for comp in comps:
            label = "GPU idle" if comp == decode.GPU_IDLE else comp
            row[f"{label} us"] = float(c.loc[comp, col]) / 1e3
            row[f"{label} share"] = float(c.loc[comp, "share"])
        row["cycle period us"] = float(sm.loc[r, "period_mean_ns" if figure == "mean" else "period_median_ns"]) / 1e3
        rows.append(row)
    return pd.DataFrame(rows)


def shown_components(a, bd: pd.DataFrame) -> list[str]:
    """The components worth a column: the core ones, and configured phases with time; all-reduce
    left out on a single rank without any (TP 1)."""
    return decode.shown_components(bd, a.phase_names, a.ranks)


def _decode_display(frame: pd.DataFrame) -> pd.DataFrame:
    """One cell per rank and component: ``us (share)``."""
    comps = [c[:-3] for c in frame.columns if c.endswith(" us") and c != "cycle period us"]
    out = pd.DataFrame({"rank": frame["rank"]})
    for c in comps:
        out[c] = [f"{u:,.1f} ({100 * sh:.1f}%)" for u, sh in zip(frame[f"{c} us"], frame[f"{c} share"])]
    out["cycle period"] = [f"{u:,.1f}" for u in frame["cycle period us"]]
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
.headline { font-size: 16px; line-height: 1.5; padding: 10px 14px; }
.outside { background: var(--band); border-left: 4px solid #8C8C8C; padding: 6px 12px; }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; }
"""

_CAPTIONS = {
    "decode": "Left: the mean steady-state decode cycle of each rank, split into the exclusive GPU time of "
              "each phase, other GPU work and GPU idle (the host-bound part of the cycle). Right: the GPU work "
              "alone, so the phases stay readable when the GPU is idle most of the cycle.",
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
    if col in ("share", "wait share") or col.endswith(" share"):
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
        short = dict(zip(names, kernel_names.display_names(names, 90)))
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
                cells.append(f'<td class="l kernel" title="{_esc(v)}">{_esc(short.get(str(v)) or kernel_names.short_name(v, 90))}</td>')
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


def _attention_html(a) -> str:
    """The notes that change how to read the page (no range is a phase, a phase matched nothing)
    above everything, with the ``--phase`` options of the hint."""
    from analyze import notes as N
    from analyze.views import phase_hints

    out = []
    for note in a.notes:
        code = getattr(note, "code", None)
        if code == N.NVTX_NOT_PHASES:
            fams = phase_hints.range_families(a.ranges)
            rows = "".join(f"<tr><td>{r.projected_ns / MS:,.3f}</td><td>{r.ranges:,}</td>"
                           f'<td class="l"><code>{_esc(r.option)}</code></td></tr>' for r in fams.itertuples())
            out.append(f'<div class="callout"><p>{note.count:,} NVTX ranges, none of them a phase (was the trace made '
                       "without the specprof shim?): every GPU op is <code>other</code>. The ranges with the most GPU "
                       "time, and the option that makes a phase of each:</p><table><thead><tr><th>GPU ms</th>"
                       f'<th>ranges</th><th class="l">option</th></tr></thead><tbody>{rows}</tbody></table></div>')
        elif code == N.PHASE_UNMATCHED:
            out.append(f'<p class="callout">{_esc(note.message)}</p>')
    return "\n".join(out)


def _decode_html(a, frame: pd.DataFrame, colors: dict, figure_html: str = "") -> str:
    """The headline sentence, the breakdown table and the outside-cycles line (the page's first screen)."""
    cycles = a.cycles
    if cycles is None or cycles.empty:
        return '<p class="sub">No decode cycles (no <code>decode_cycle</code> NVTX range): every figure below is for the whole trace.</p>'
    if frame.empty:
        why = ("the cycle table has no period split (period_&lt;phase&gt;_ns, period_idle_ns)"
               if not decode.has_period_split(cycles, a.phase_names) else "every cycle is warm-up")
        return f'<p class="sub">{len(cycles)} decode cycles; no steady-state breakdown: {why}.</p>'
    sm = views.get(a, "decode_summary")
    head = views.get(a, "headline")
    warm = int(sm["warmup_cycles"].sum())
    reasons: dict[str, int] = {}
    for d in sm["warmup_reasons"]:
        for k, v in (d or {}).items():
            reasons[k] = reasons.get(k, 0) + int(v)
    steady = sorted(set(int(x) for x in sm["steady_cycles"]))
    per = f"{steady[0]}" if len(steady) == 1 else f"{steady[0]} to {steady[-1]}"
    sub = (f"Each cell: the mean GPU time per cycle in us over the steady-state cycles of the rank ({per}"
           f"{' per rank' if len(sm) > 1 else ''}), and its share of the mean cycle period; the components add "
           "up to the period (medians below). "
           + (f"Cycles left out: {warm} ({text.reasons_text(reasons)}). " if warm else "")
           + "GPU idle is time inside the cycle when the GPU waited for the host.")
    oc = views.get(a, "outside_cycles")
    outside = []
    for r in sm.itertuples():
        o = oc[(oc["rank"] == r.rank) & (oc["busy_ns"] > 0)].sort_values("busy_ns", ascending=False).head(3)
        parts = ", ".join(f"{x.component} {x.busy_ns / MS:,.3f} ms" for x in o.itertuples())
        outside.append(f"rank {r.rank}: {r.outside_cycles_busy_ns / MS:,.3f} ms" + (f" ({parts})" if parts else ""))
    medians = _decode_display(decode_table(a, "median")).rename(columns={"cycle period": "cycle period"})
    medians = medians.assign(**{c: medians[c].str.replace(r" \(.*\)$", "", regex=True)
                                for c in medians.columns if c != "rank"})
    shown = text.per_batch_display(a)
    per_batch = "" if shown is None else (
        f'<p class="sub">{_esc(shown[0])}</p>'
        + _table_html(pd.DataFrame(shown[1], columns=text.PER_BATCH_HEADERS), table_id="t-decode-per-batch"))
    return (f'<p class="callout headline">{_esc(head)}</p>' + figure_html
            + f'<p class="sub">{_esc(sub)}</p>'
            + _table_html(_decode_display(frame), table_id="t-decode")
            + '<details><summary>medians per rank (us)</summary>' + _table_html(medians, table_id="t-decode-median")
            + "</details>" + per_batch
            + f'<p class="outside"><b>Outside decode cycles</b> (model load, CUDA-graph capture, prefill between '
              f'cycles; not in the figures above): {_esc("; ".join(outside))}.</p>')


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


def render_html(a, *, top: int = 5, title: str = "specprof report", advice: dict | None = None) -> str:
    """The whole report as one HTML string (see :func:`write_html`): each table followed by its
    figures; figures without data are left out and said so under Notes. ``advice``: the
    :meth:`analyze.findings.Advice.to_dict` of ``analyze-trace advise`` (an Advice section)."""
    t = tables(a, top=top)
    colors = plots.phase_colors(a.phase_names)
    figs, fig_notes = plots.figures(a)
    notes = list(a.notes) + [n for n in fig_notes if n not in a.notes]

    def fig(name: str) -> str:
        return _figure_html(name, figs[name]) if name in figs else ""

    sections: list[tuple[str, str, str, str]] = []  # (id, nav label, heading, html)
    sections.append(("decode", "Decode cycle", TABLE_TITLES["decode"],
                     _decode_html(a, t["decode"], colors, fig("decode"))))
    live = is_live(a)
    if live:          # a live timing log: no kernels, no NVTX ranges (run/live.py)
        sections.append(("kernels", "Kernels", "Kernel-level tables",
                         '<p class="sub">absent: a live timing log has no kernels and no NVTX ranges (exclusive '
                         "phase times, the timeline, per-phase figures across ranks, top kernels and the all-reduce "
                         "skew need them); its CUDA-event phase times are in the decode cycle and cycle tables</p>"))
    else:
        sections.append(("phases", "Phases", TABLE_TITLES["phases"] + " (whole trace)",
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
                     f"cycles (every cycle with an accept mark, warm-up included)"
                     + (f", {per:.2f} per cycle" if per else "")
                     + (f", {tps:,.1f} tokens/s over their periods (steady state: the headline)" if tps else "")
                     + "</p>")
    sections.append(("cycles", "Cycles", TABLE_TITLES["cycles"],
                     cyc_html + fig("cycle_distributions") + fig("cycle_breakdown") + fig("verify_kernels")))
    if not live and len(t["skew"]):
        strag = views.get(a, "stragglers")
        n = a.collectives["collective"].nunique()
        extra = (f'<p class="callout">straggler rank(s): <b>{", ".join(map(str, strag))}</b></p>' if strag
                 else '<p class="sub">no straggler: no rank was late noticeably more often than others</p>')
        sections.append(("skew", "All-reduce skew", f"All-reduce skew per rank over {n} collectives (ms)",
                         '<p class="sub">wait = time inside the all-reduce before the last rank arrived; '
                         "made others wait = arrival spread of the collectives the rank arrived last in."
                         "</p>" + _table_html(t["skew"], left=("late in",), table_id="t-skew") + extra
                         + fig("allreduce_wait")))
    elif not live:      # why, as the terminal's note says it (one rank; no kernel matched, and what any time shown is)
        why = next((n.message for n in skew.skew_notes(a) if n.code == N.SKEW_SKIPPED),
                   "no all-reduce skew table")
        sections.append(("skew", "All-reduce skew", "All-reduce skew", f'<p class="sub">{_html.escape(why)}</p>'))
    for info in views.section_views():           # the views registered with a title: a table each
        frame = views.get(a, info.name)
        if isinstance(frame, pd.DataFrame) and len(frame):
            sections.append((info.name.replace("_", "-"), info.title.split(" per ")[0], info.title,
                             _table_html(frame, table_id=f"t-{info.name.replace('_', '-')}")))
    if advice is not None:
        from analyze.render import advice as advice_render

        sections.append(("advice", "Advice", "Advice: what to change, ranked by the cycle time it could save",
                         advice_render.html_fragment(advice)))
    sections.append(("ranks", "Ranks", TABLE_TITLES["ranks"],
                     _table_html(t["ranks"], left=("device", "source"), table_id="t-ranks")))
    sections.append(("notes", "Notes", "Notes", ('<ul class="notes">' + "".join(f"<li>{_esc(str(n))}</li>" for n in notes)
                                                 + "</ul>") if notes else '<p class="sub">none</p>'))

    inputs = "<br>".join(
        _esc(f"{i['path']}  (specprof live timing log, schema {i.get('schema_version') or '?'})"
             if i.get("kind") == LIVE_SOURCE else
             f"{i['path']}  (nsys {i.get('nsys_version') or '?'}, schema {i.get('schema_version') or '?'}, "
             f"graphs traced: {i.get('cuda_graph_trace') or '-'})") for i in a.inputs)
    n_ranks = len(a.ranks)
    n_cycles = views.get(a, "cycle_counts")["cycle_numbers"]
    nav = "".join(f'<a href="#{sid}">{_esc(label)}</a>' for sid, label, _, _ in sections)
    body = "\n".join(f'<section id="{sid}"><h2>{_esc(h)}</h2>\n{content}</section>'
                     for sid, _, h, content in sections)
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    attention = _attention_html(a)
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
{attention}
{body}
<footer>generated by specprof (analyze-trace --html) on {when}</footer>
</main></body></html>
"""


def write_html(result, path, *, top: int = 5, advice: dict | None = None) -> Path:
    """Write the self-contained HTML report to ``path`` atomically; returns the path."""
    from analyze import output_policy
    from analyze.atomic import atomic_write

    page = render_html(result, top=top, advice=advice)
    with output_policy.protect(output_policy.inputs_of(result)), atomic_write(path) as f:
        f.write(page)
    return Path(path)
