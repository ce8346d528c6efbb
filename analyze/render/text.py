"""The terminal report. Its first screen answers the question the tool is for: where each
steady-state decode cycle goes, per rank (views/decode.py), in one sentence and one table; the GPU
work outside decode cycles (load, capture, prefill) is a line of its own. The whole-trace tables
follow. Lines fit the terminal (``COLUMNS``, else the terminal's width, else 120): tables too wide
are split into blocks of columns, kernel names are shortened without two kernels printing the same
(render/names.py), notes are wrapped, never cut.
"""
from __future__ import annotations

import math
import shutil
import re
import textwrap

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze import views
from analyze.attribute.phases import OTHER
from analyze.timeline.cycles import LOST, LOST_REASONS, OUTLIER, OUTLIER_FACTOR, WARMUP
from analyze.render import names as kernel_names
from analyze.run.live import SOURCE as LIVE_SOURCE, is_live
from analyze.views import decode, phase_hints

WIDTH = 120            # when the width cannot be read (not a terminal, no COLUMNS)
MIN_WIDTH, MAX_WIDTH = 60, 400
# notes shown at the top of the report (they change how to read everything below), not at the end
TOP_NOTES = (N.NVTX_NOT_PHASES, N.PHASE_UNMATCHED)
WARMUP_WORDS = {"first": "first", "capture": "CUDA-graph capture", "graph_capture": "CUDA-graph capture",
                "outlier": "outlier period",
                "no_gpu_ops": "no GPU ops recorded", "truncated": "CUDA data cut off"}


def terminal_width() -> int:
    """``COLUMNS`` when set, else the terminal's width, else :data:`WIDTH`; within 60..400."""
    cols = shutil.get_terminal_size((WIDTH, 24)).columns
    return max(MIN_WIDTH, min(MAX_WIDTH, int(cols)))


def _missing(value) -> bool:
    """None, NaN or pd.NA (a scalar a table shows as "-")."""
    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


def ms(ns) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    return f"{ns / 1e6:,.3f}"


def us(ns) -> str:
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    return f"{ns / 1e3:,.1f}"


def pct(x) -> str:
    return f"{100 * x:5.1f}%"


def clip(text: str, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def clip_left(text: str, n: int) -> str:
    """Keep the end of a long path (the file name matters most)."""
    text = str(text)
    if len(text) <= n:
        return text
    tail = text[-(n - 1):]
    cut = tail.find("/")
    return "…" + (tail[cut:] if 0 <= cut < len(tail) - 1 else tail)


def _one_table(headers, cells, align) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def fmt(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)).rstrip()

    return [fmt(headers), "  ".join("-" * w for w in widths)] + [fmt(r) for r in cells]


def table(headers: list[str], rows: list[list], align: str | None = None, width: int | None = None,
          keep: int = 1) -> list[str]:
    """Plain fixed-width table; align: one 'l'/'r' per column (default: first left, rest right).
    Wider than ``width``: the columns after the first ``keep`` are split into blocks that fit, each
    printed as a table of its own under the previous one (nothing is cut)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    cells = [[str(c) for c in r] for r in rows]
    lines = _one_table(headers, cells, align)
    if width is None or max(map(len, lines)) <= width or len(headers) <= keep + 1:
        return lines
    col_w = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    base = sum(col_w[:keep]) + 2 * keep
    blocks, cur, used = [], [], base
    for i in range(keep, len(headers)):
        if cur and used + col_w[i] + 2 > width:
            blocks.append(cur)
            cur, used = [], base
        cur.append(i)
        used += col_w[i] + 2
    blocks.append(cur)
    out: list[str] = []
    for b in blocks:
        idx = list(range(keep)) + b
        out += ([""] if out else []) + _one_table([headers[i] for i in idx], [[r[i] for i in idx] for r in cells],
                                                   "".join(align[i] for i in idx))
    return out


_QUOTED = re.compile(r"(?<![\w'])'[^'\n]*'(?![\w'])")     # 'a quoted argument', not an apostrophe
_NBSP = "\u00a0"


def wrap(text: str, width: int, indent: str = "", first: str = "") -> list[str]:
    """``text`` wrapped to ``width``; a single-quoted span (a command-line argument to copy, e.g. a
    --phase hint) is never broken inside (a line may exceed the width to keep it whole)."""
    held = _QUOTED.sub(lambda m: m.group(0).replace(" ", _NBSP), first + text)
    lines = textwrap.wrap(held, width, subsequent_indent=indent or " " * len(first),
                          break_on_hyphens=False, break_long_words=False) or [first.rstrip()]
    return [line.replace(_NBSP, " ") for line in lines]


# ---------------------------------------------------------------------------------------------
# the first screen: the steady-state decode breakdown


def _label(component: str, live: bool = False) -> str:
    """A component's row label (a live log's rest of the period is not only GPU idle: run/live.py)."""
    if component == decode.GPU_IDLE:
        return "outside timed" if live else "GPU idle"
    return component


def reasons_text(counts: dict) -> str:
    """Why cycles were left out, in words, never the raw codes: 'first 1, no GPU ops recorded 48'."""
    return ", ".join(f"{WARMUP_WORDS.get(k, k)} {v}" for k, v in counts.items())


def left_out_text(counts: dict) -> str:
    """Cycles left out of steady-state figures per state (timeline.cycles.left_out_counts), in words:
    '1 warm-up cycle, 6 outlier cycles (a period over 5x the median of their batch size)'."""
    words = {WARMUP: ("warm-up", ""), LOST: ("lost", " (no GPU data)"),
             OUTLIER: ("outlier", f" (a period over {OUTLIER_FACTOR:g}x the median of its batch size)")}
    parts = []
    for state, (noun, why) in words.items():
        n = int(counts.get(state, 0))
        if n:
            parts.append(f"{n} {noun} cycle{'s' if n != 1 else ''}{why}")
    return ", ".join(parts)


def _merged_reasons(summary_frame: pd.DataFrame) -> dict:
    out: dict[str, int] = {}
    for d in summary_frame["warmup_reasons"]:
        for k, v in (d or {}).items():
            out[k] = out.get(k, 0) + int(v)
    return out


def _per_rank_text(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def decode_section(result, width: int, max_ranks: int = 8) -> list[str]:
    """The headline sentence, the per-rank breakdown table and the outside-cycles line(s)."""
    cycles = result.cycles
    if cycles is None or cycles.empty:
        return ["No decode cycles (no `decode_cycle` NVTX range): every figure below is for the whole trace."]
    if not decode.has_period_split(cycles, result.phase_names):
        return [f"Decode cycles: {len(cycles)}; the steady-state breakdown needs the cycle table's period split "
                "(period_<phase>_ns, period_idle_ns), which this analysis lacks."]
    bd = views.get(result, "decode_breakdown")
    sm = views.get(result, "decode_summary")
    if bd.empty:
        return [f"Decode cycles: {len(cycles)}, every one of them warm-up ({reasons_text(_merged_reasons(sm))}): "
                "no steady state to break down."]
    out = wrap(views.get(result, "headline"), width)
    out.append("")
    tp1 = decode.no_allreduce(bd, result.ranks)
    ranks = sorted(bd["rank"].unique().tolist())
    shown = ranks[:max_ranks]
    comps = decode.shown_components(bd, result.phase_names, result.ranks)
    cell = bd.set_index(["rank", "component"])
    srow = sm.set_index("rank")
    period = {r: float(srow.loc[r, "period_mean_ns"]) for r in ranks}
    period_med = {r: float(srow.loc[r, "period_median_ns"]) for r in ranks}
    big = max(period.values()) >= 10e6
    unit, fmt = ("ms", ms) if big else ("us", us)

    # per rank and figure (mean, median, share): one cell per component, then the period
    values = {}
    for r in ranks:
        c = cell.loc[r].reindex(comps)
        values[r] = {"mean": [fmt(v) for v in c["per_cycle_ns"]] + [fmt(period[r])],
                     "median": [fmt(v) for v in c["median_ns"]] + [fmt(period_med[r])],
                     "share": [pct(v) for v in c["share"]] + [pct(1.0)]}
    tokens = [("tokens / cycle", "tokens_per_cycle", "{:.2f}"), ("tokens / s", "tokens_per_s", "{:,.0f}"),
              ("GPU ms / token", "gpu_ms_per_token", "{:.3f}")]
    token_rows = [t for t in tokens if sm[t[1]].notna().any()]
    live = is_live(result)
    labels = [_label(c, live) for c in comps] + ["cycle period"] + [t[0] for t in token_rows]
    pooled = decode.pooled(bd[bd["rank"].isin(shown)]).set_index("component")["share"]
    pooled_col = [pct(pooled.get(c, 0.0)) for c in comps] + [pct(1.0)] + [""] * len(token_rows)

    def token_cell(r, col, f):
        v = srow.loc[r, col]
        return f.format(v) if v is not None and v == v else "-"

    chosen = None
    for layout in (("mean", "median", "share"), ("mean", "share"), ("mean",)):
        pooled_share = len(layout) == 1 and len(shown) > 1
        headers = ["component"] + [f"{'r' + str(r) + ' ' if len(shown) > 1 else ''}{w}" for r in shown
                                   for w in layout] + (["share"] if pooled_share else [])
        rows = []
        for i, lbl in enumerate(labels):
            row = [lbl]
            for r in shown:
                if i <= len(comps):
                    row += [values[r][w][i] for w in layout]
                else:
                    _, col, f = token_rows[i - len(comps) - 1]
                    row += [token_cell(r, col, f)] + [""] * (len(layout) - 1)
            rows.append(row + ([pooled_col[i]] if pooled_share else []))
        chosen = (headers, rows)
        if max(map(len, _one_table(headers, rows, "l" + "r" * (len(headers) - 1)))) <= width:
            break
    headers, rows = chosen
    steady = sm["steady_cycles"].tolist()
    warm = sm["warmup_cycles"].tolist()
    per_rank = [dict(d or {}) for d in sm["warmup_reasons"]]
    same = all(d == per_rank[0] for d in per_rank)
    reasons = reasons_text(per_rank[0]) if same else reasons_text(_merged_reasons(sm)) + " over all ranks"
    title = (f"Steady-state decode cycle per rank ({unit} per cycle"
             + ("; rN = rank N" if len(shown) > 1 else "") + f"; {_per_rank_text(steady)} cycles"
             + (" per rank" if len(ranks) > 1 else "") + ", mean" + (" and median" if "median" in " ".join(headers)
                                                                     else "") + "; share of the mean period"
             + (f"; {'left out' if any(k in LOST_REASONS for d in per_rank for k in d) else 'warm-up left out'}"
                f": {_per_rank_text(warm)}" + (" per rank" if len(ranks) > 1 else "")
                + f" ({reasons})" if sum(warm) else "")
             + ("; TP 1: no all-reduce" if tp1 else "")
             + (f"; first {max_ranks} of {len(ranks)} ranks" if len(ranks) > len(shown) else "") + ")")
    out += wrap(title, width)
    out += table(headers, rows, width=width)
    if "median" not in " ".join(headers) and len(shown) > 1:
        out.append("(medians per rank: --json decode_breakdown, --html)")
    out += per_batch_lines(result, width)
    out += outside_lines(result, sm, width)
    return out


PER_BATCH_HEADERS = ["batch", "cycles", "period us", "median us", "tokens / cycle", "accepted / request", "tokens / s"]


def per_batch_display(result) -> tuple[str, list[list[str]]] | None:
    """(caption, rows under :data:`PER_BATCH_HEADERS`) of the ``decode_per_batch`` view, None where it is empty (one
    batch size visited): what the terminal report and the HTML page show of it."""
    pb = views.get(result, "decode_per_batch")
    if not len(pb):
        return None

    def fmt(v, f):
        return "-" if v is None or v != v else f(v)

    caption = (f"Per batch size (the {len(pb)} batch sizes the load visited, requests per cycle; steady cycles"
               + (f" of rank {int(pb['rank'].iloc[0])}" if len(result.ranks) > 1 else "")
               + "; the table above pools them)")
    rows = [[str(r.batch), f"{r.cycles:,}", fmt(r.period_mean_ns, us), fmt(r.period_median_ns, us),
             fmt(r.tokens_per_cycle, "{:.2f}".format), fmt(r.accepted_per_request, "{:.3f}".format),
             fmt(r.tokens_per_s, "{:,.0f}".format)] for r in pb.itertuples()]
    return caption, rows


def per_batch_lines(result, width: int) -> list[str]:
    """The steady cycles per batch size the load visited (:func:`per_batch_display`), where several: the table
    above pools them."""
    shown = per_batch_display(result)
    if shown is None:
        return []
    caption, rows = shown
    return [""] + wrap(caption, width) + table(PER_BATCH_HEADERS, rows, width=width) + [""]


def outside_lines(result, sm: pd.DataFrame, width: int) -> list[str]:
    """The GPU work outside every decode cycle period, per rank (or its range over ranks)."""
    oc = views.get(result, "outside_cycles")
    busy = sm.set_index("rank")["outside_cycles_busy_ns"]
    warm_busy = sm.set_index("rank")["warmup_busy_ns"]
    warm_n = sm.set_index("rank")["warmup_cycles"]

    def parts(rank) -> str:
        o = oc[(oc["rank"] == rank) & (oc["busy_ns"] > 0)].sort_values("busy_ns", ascending=False)
        return ", ".join(f"{r.component} {ms(r.busy_ns)} ms" for r in o.head(3).itertuples())

    lines = []
    if is_live(result):          # a live log times the decode cycles only
        text = "Outside decode cycles: not measured (a live timing log times the decode cycles only)"
        if warm_n.sum():
            text += (f"; warm-up cycles: {int(warm_n.sum())}{' over all ranks' if len(busy) > 1 else ''}, "
                     f"{ms(warm_busy.sum())} ms in timed phases")
        return wrap(text + ".", width)
    if not (busy > 0).any():
        text = "Outside decode cycles: no GPU work (every GPU op of every rank ran inside a decode cycle)"
        if warm_n.sum():
            text += (f"; warm-up cycles: {int(warm_n.sum())}{' over all ranks' if len(busy) > 1 else ''}, "
                     f"{ms(warm_busy.sum())} ms of GPU work")
        return wrap(text + ".", width)
    if len(busy) <= 2:
        for rank in busy.index:
            p = parts(rank)
            text = (f"Outside decode cycles{' on rank ' + str(rank) if len(busy) > 1 else ''}: {ms(busy[rank])} ms "
                    f"of GPU work (model load, CUDA-graph capture, prefill between cycles){': ' + p if p else ''}; "
                    f"not in the cycle figures above")
            if warm_n[rank]:
                text += f"; warm-up cycles: {int(warm_n[rank])}, {ms(warm_busy[rank])} ms of GPU work"
            lines += wrap(text + ".", width)
    else:
        top = int(busy.idxmax())
        p = parts(top)
        lo, hi = ms(busy.min()), ms(busy.max())
        span, where = (lo, "on each rank") if lo == hi else (f"{lo} to {hi}", f"most on rank {top}")
        text = (f"Outside decode cycles: {span} ms of GPU work per rank (model load, CUDA-graph capture, prefill "
                f"between cycles; {where}{': ' + p if p else ''}); not in the cycle figures above")
        if warm_n.sum():
            text += f"; warm-up cycles: {int(warm_n.sum())} over all ranks, {ms(warm_busy.sum())} ms of GPU work"
        lines += wrap(text + ".", width)
    return lines


# ---------------------------------------------------------------------------------------------
# the whole report


def hint_lines(result, width: int) -> list[str]:
    """The notes that change how to read the report, first; with the range families when no NVTX
    range is a phase."""
    out: list[str] = []
    top = [n for n in result.notes if getattr(n, "code", None) in TOP_NOTES]
    for note in top:
        if note.code == N.NVTX_NOT_PHASES:
            out += wrap(f"{note.count} NVTX ranges, none of them a phase (was the trace made without the specprof "
                         "shim?): every GPU op is `other`. The ranges with the most GPU time, and the option that "
                         "makes a phase of each:", width)
            fams = phase_hints.range_families(result.ranges)
            cells = [(ms(r.projected_ns), f"{r.ranges:,}", r.option) for r in fams.itertuples()]
            w_ms = max([len(c[0]) for c in cells] + [1])
            w_n = max([len(c[1]) for c in cells] + [1])
            for t, n, option in cells:      # one line each (wrapped by _fit when too long)
                out.append(f"  {t:>{w_ms}} ms  {n:>{w_n}} ranges  {option}")
        else:
            out += wrap(note.message, width, indent="  ")
    return out + ([""] if out else [])


def render(result, top: int = 5, max_ranks: int = 8, width: int | None = None, demo: bool = False,
           written: list[str] | None = None, advice: dict | None = None) -> str:
    """The report as text, ``width`` columns (default :func:`terminal_width`). ``demo``: say that
    this is the bundled demo trace; ``written``: the files this run wrote, listed at the end;
    ``advice``: analyze-trace advise's findings (``Advice.to_dict()``), shown as the Advice section."""
    width = terminal_width() if width is None else max(int(width), 40)
    out: list[str] = []
    out.append("specprof: where each decode cycle goes, per phase, kernel and rank")
    shown_inputs = result.inputs if len(result.inputs) <= 3 else result.inputs[:2]
    for inp in shown_inputs:
        path = f"  input {clip_left(inp['path'], width - 8)}"
        meta = (f"(specprof live timing log, schema {inp.get('schema_version') or '?'}, {inp.get('files', 0)} "
                f"file(s))" if inp.get("kind") == LIVE_SOURCE else
                f"(nsys {inp.get('nsys_version') or '?'}, schema {inp.get('schema_version') or '?'}, graphs "
                f"traced: {inp.get('cuda_graph_trace') or '-'})")
        out += [f"{path}  {meta}"] if len(path) + 2 + len(meta) <= width else [path, clip(f"        {meta}", width)]
    if len(shown_inputs) < len(result.inputs):
        out.append(f"  ... and {len(result.inputs) - len(shown_inputs)} more inputs (one per rank)")
    for note in (n for n in result.notes if getattr(n, "code", None) == N.SKIPPED_INPUT):   # also among the notes
        out.append(clip(f"  left out {clip_left(note.input or '?', width // 2)} (see its note below)", width))
    if demo:
        out += wrap("demo: no report was given, so this is specprof's bundled trace (a real H200 run); analyze "
                     "yours with `analyze-trace REPORT.sqlite` or `analyze-trace DIR/`", width, indent="    ",
                     first="  ")
    out.append("")
    out += hint_lines(result, width)
    out += decode_section(result, width, max_ranks)
    out.append("")
    out.append("Whole trace (decode cycles, set-up and everything between)")
    out.append("")

    ranks = result.ranks
    out.append("Ranks")
    out += table(["rank", "pid", "device", "source", "offset ms", "GPU ops", "kernel ms", "busy ms", "idle ms"],
                 [[r.rank, r.pid, "-" if _missing(r.device_ids) else r.device_ids, r.source, ms(r.offset_ns),
                   t.gpu_ops, ms(t.kernel_ns),
                   ms(t.busy_ns), ms(t.idle_ns)]
                  for r, t in zip(ranks.itertuples(), result.totals.itertuples())], width=width)
    out.append("")

    if is_live(result):
        out += wrap("Kernels, exclusive phase times, NVTX ranges and collectives: absent (a live timing log has no "
                    "kernels and no NVTX ranges; its phase times are in the cycle figures)", width)
        out.append("")
    else:
        out += _phase_tables(result, ranks, top, max_ranks, width)

    cycles = result.cycles
    if len(cycles):
        n = views.get(result, "cycle_counts")
        lost = f"; {n['no_gpu_ops']} more without GPU data" if n["no_gpu_ops"] else ""
        out.append(f"Decode cycles: {n['cycles']} (over {n['ranks']} rank{'' if n['ranks'] == 1 else 's'}, warm-up "
                   f"included{lost}), pooled "
                   "percentiles (ms)")
        dist = views.get(result, "cycle_distribution")
        out += table(["figure", "mean", "p50", "p90", "p99", "max"],
                     [[r.figure, ms(r.mean_ns), ms(r.p50_ns), ms(r.p90_ns), ms(r.p99_ns), ms(r.max_ns)]
                      for r in dist.itertuples()], width=width)
        tok = views.get(result, "tokens")
        if tok:
            out += wrap(f"tokens (rank {tok['rank']}, every cycle with an accept mark, warm-up included): "
                         f"{tok['tokens']:.0f} in {tok['cycles']} cycles = "
                         f"{tok['tokens_per_cycle']:.2f} per cycle ({tok['accepted_per_cycle']:.2f} accepted draft + "
                         f"bonus), {tok['tokens_per_s']:.1f} tokens/s over their periods (steady state: the headline)",
                         width)
        out.append("")

    out += skew_lines(result, width)
    out += section_lines(result, width)

    if len(result.alignment) > 1:
        out.append("Clock alignment of separate reports")
        out += table(["input", "method", "UTC offset ms", "applied ms", "residual us"],
                     [[clip_left(r.input, max(20, width - 60)), r.method, ms(r.utc_offset_ns), ms(r.offset_ns),
                       us(r.residual_ns) if r.residual_ns is not None and r.residual_ns == r.residual_ns else "-"]
                      for r in result.alignment.itertuples()], "llrrr", width=width)
        out.append("")
    if advice is not None:          # analyze-trace advise's findings (Advice.to_dict())
        from analyze.render import advice as advice_render

        out += advice_render.text_lines(advice, width=width) + [""]
    for note in result.notes:       # wrapped, not clipped: a note is read whole
        if getattr(note, "code", None) in TOP_NOTES:
            continue
        out += wrap(f"note: {note!s}", width, indent="      ")
    if written:
        out.append("")
        out.append("wrote:")
        out += [f"  {p}" for p in written]
    return "\n".join(_fit(out, width)).rstrip() + "\n"


def _phase_tables(result, ranks, top: int, max_ranks: int, width: int) -> list[str]:
    """The whole-trace tables that need kernels: exclusive GPU time per phase and rank, the phases
    across ranks, the top kernels."""
    out: list[str] = []
    rank_ids = list(ranks["rank"])
    shown = rank_ids[:max_ranks]
    out.append("Exclusive GPU time per phase (ms): every GPU nanosecond counted once" +
               ("" if len(rank_ids) <= max_ranks else f" (first {max_ranks} ranks)"))
    by_rank = views.get(result, "phase_by_rank")
    rows = [[name] + [ms(by_rank.at[name, r]) for r in shown] + [pct(by_rank.at[name, "share"])]
            for name in by_rank.index]
    out += table(["phase"] + [f"rank {r}" for r in shown] + ["share"], rows, width=width)
    out.append("")

    out.append("Per phase across ranks (ms; instances and CPU time of the phase's outermost NVTX ranges)")
    out += table(["phase", "ranges", "CPU", "projected", "kernel", "excl min", "excl median", "excl max",
                  "spread", "max rank"],
                 [[c.phase, int(c.ranges), ms(c.cpu_ns), ms(c.projected_ns), ms(c.kernel_ns), ms(c.exclusive_min_ns),
                   ms(c.exclusive_median_ns), ms(c.exclusive_max_ns), ms(c.exclusive_spread_ns), int(c.slowest_rank)]
                  for c in views.get(result, "phase_across_ranks").itertuples()], width=width)
    out.append("")

    out += kernel_lines(result, top, width)
    return out


def _fit(lines: list[str], width: int) -> list[str]:
    """Lines longer than ``width`` (titles, long names in a hint) wrapped onto indented lines."""
    out = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
        else:
            lead = len(line) - len(line.lstrip())
            out += wrap(line.strip(), width, indent=" " * (lead + 2), first=" " * lead)
    return out


def kernel_lines(result, top: int, width: int) -> list[str]:
    """Top kernels per phase; the kernel column takes the width the others leave, and no two
    different kernels print the same (render/names.py)."""
    if not len(result.kernels):
        return []
    sel = views.get(result, "top_kernels", top=top)
    if not len(sel):
        return []
    cells = [[r.phase, "", str(r.instances), ms(r.total_ns), us(r.mean_ns), pct(r.share)]
             for r in sel.itertuples()]
    headers = ["phase", "kernel", "count", "total ms", "mean us", "share"]
    fixed = sum(max([len(headers[i])] + [len(c[i]) for c in cells]) for i in (0, 2, 3, 4, 5)) + 2 * 5
    labels = kernel_names.display_names(sel["name"].tolist(), max(24, width - fixed))
    for c, lbl in zip(cells, labels):
        c[1] = lbl
    out = ["Top kernels per phase (all ranks; exclusive phase of each op)"]
    out += table(headers, cells, "llrrrr")
    return out + [""]


def cell(v) -> str:
    """One value of a generic table: integers with thousands separators, floats with one decimal
    (two below 10), missing as '-'."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.2f}" if abs(v) < 10 else f"{float(v):,.1f}"
    return str(v)


def section_lines(result, width: int) -> list[str]:
    """The views registered with a title (views.section_views): each a titled table, when it has rows."""
    out = []
    for info in views.section_views():
        frame = views.get(result, info.name)
        if not isinstance(frame, pd.DataFrame) or frame.empty:
            continue
        out.append(info.title)
        out += table(list(frame.columns), [[cell(v) for v in row] for row in frame.itertuples(index=False)],
                     width=width)
        out.append("")
    return out


def skew_lines(result, width: int) -> list[str]:
    coll = result.collectives
    if not len(coll):
        return []
    n = coll["collective"].nunique()
    evidence = views.get(result, "skew_evidence")
    n_warm = n - coll.loc[evidence, "collective"].nunique()
    out = [f"All-reduce skew over {n} collectives (ms): wait = before the last rank arrived"
           + (f"; late (times) counts the {n - n_warm} after warm-up" if n_warm else "")]
    s = views.get(result, "skew")
    out += table(["rank", "collectives", "wait", "transfer", "wait share", "late (times)", "made others wait",
                  "late after"],
                 [[r.rank, r.collectives, ms(r.wait_ns), ms(r.transfer_ns),
                   pct(r.wait_ns / (r.wait_ns + r.transfer_ns) if (r.wait_ns + r.transfer_ns) else 0),
                   r.times_late, ms(r.late_by_ns), r.late_phase if isinstance(r.late_phase, str) else "-"]
                  for r in s.itertuples()], width=width)
    strag = views.get(result, "stragglers")
    if strag:
        times = s.set_index("rank")["times_late"]
        out.append(f"straggler rank(s): {', '.join(map(str, strag))} (last to arrive in "
                   f"{', '.join(str(int(times[r])) for r in strag)} significantly skewed collective(s) after warm-up)")
    return out + [""]
