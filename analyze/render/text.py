"""The terminal report: fits 120 columns for eight ranks."""
from __future__ import annotations

import math
import textwrap

from analyze import views

WIDTH = 120


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


def table(headers: list[str], rows: list[list], align: str | None = None) -> list[str]:
    """Plain fixed-width table; align: one 'l'/'r' per column (default: first left, rest right)."""
    align = align or ("l" + "r" * (len(headers) - 1))
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def fmt(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)).rstrip()

    line = "  ".join("-" * w for w in widths)
    return [fmt(headers), line] + [fmt(r) for r in cells]


def render(result, top: int = 5, max_ranks: int = 8) -> str:
    out: list[str] = []
    out.append("specprof: GPU time per phase, kernel and rank")
    shown_inputs = result.inputs if len(result.inputs) <= 3 else result.inputs[:2]
    for inp in shown_inputs:
        out.append(clip(f"  input {clip_left(inp['path'], 56)}  (nsys {inp.get('nsys_version') or '?'}, schema "
                        f"{inp.get('schema_version') or '?'}, graphs traced: {inp.get('cuda_graph_trace') or '-'})",
                        WIDTH))
    if len(shown_inputs) < len(result.inputs):
        out.append(f"  ... and {len(result.inputs) - len(shown_inputs)} more inputs (one per rank)")
    out.append("")
    ranks = result.ranks
    out.append("Ranks")
    out += table(["rank", "pid", "device", "source", "offset ms", "GPU ops", "kernel ms", "busy ms",
                  "idle ms"],
                 [[r.rank, r.pid, r.device_ids, r.source, ms(r.offset_ns), t.gpu_ops, ms(t.kernel_ns),
                   ms(t.busy_ns), ms(t.idle_ns)]
                  for r, t in zip(ranks.itertuples(), result.totals.itertuples())])
    out.append("")

    rank_ids = list(ranks["rank"])
    shown = rank_ids[:max_ranks]
    out.append("Exclusive GPU time per phase (ms): every GPU nanosecond counted once" +
               ("" if len(rank_ids) <= max_ranks else f" (first {max_ranks} ranks)"))
    by_rank = views.get(result, "phase_by_rank")
    rows = [[name] + [ms(by_rank.at[name, r]) for r in shown] + [pct(by_rank.at[name, "share"])]
            for name in by_rank.index]
    out += table(["phase"] + [f"rank {r}" for r in shown] + ["share"], rows)
    out.append("")

    out.append("Per phase across ranks (ms; instances and CPU time of the phase's outermost NVTX ranges)")
    out += table(["phase", "ranges", "CPU", "projected", "kernel", "excl min", "excl median", "excl max",
                  "spread", "max rank"],
                 [[c.phase, int(c.ranges), ms(c.cpu_ns), ms(c.projected_ns), ms(c.kernel_ns), ms(c.exclusive_min_ns),
                   ms(c.exclusive_median_ns), ms(c.exclusive_max_ns), ms(c.exclusive_spread_ns), int(c.slowest_rank)]
                  for c in views.get(result, "phase_across_ranks").itertuples()])
    out.append("")

    top_k = views.get(result, "top_kernels", top=top)
    if len(result.kernels):
        out.append("Top kernels per phase (all ranks; exclusive phase of each op)")
        out += table(["phase", "kernel", "count", "total ms", "mean us", "share"],
                     [[r.phase, clip(r.name, 66), r.instances, ms(r.total_ns), us(r.mean_ns), pct(r.share)]
                      for r in top_k.itertuples()], "llrrrr")
        out.append("")

    cycles = result.cycles
    if len(cycles):
        n = views.get(result, "cycle_counts")
        lost = f"; {n['no_gpu_ops']} more without GPU data" if n["no_gpu_ops"] else ""
        out.append(f"Decode cycles: {n['cycles']} (over {n['ranks']} ranks{lost}), pooled percentiles (ms)")
        dist = views.get(result, "cycle_distribution")
        out += table(["figure", "mean", "p50", "p90", "p99", "max"],
                     [[r.figure, ms(r.mean_ns), ms(r.p50_ns), ms(r.p90_ns), ms(r.p99_ns), ms(r.max_ns)]
                      for r in dist.itertuples()])
        tok = views.get(result, "tokens")
        if tok:
            out.append(f"tokens (rank {tok['rank']}): {tok['tokens']:.0f} in {tok['cycles']} cycles = "
                       f"{tok['tokens_per_cycle']:.2f} per cycle ({tok['accepted_per_cycle']:.2f} accepted draft + "
                       f"bonus), {tok['tokens_per_s']:.1f} tokens/s")
        out.append("")

    coll = result.collectives
    if len(coll):
        n = coll["collective"].nunique()
        out.append(f"All-reduce skew over {n} collectives (ms): wait = before the last rank arrived")
        s = views.get(result, "skew")
        out += table(["rank", "collectives", "wait", "transfer", "wait share", "late (times)", "made others wait",
                      "late after"],
                     [[r.rank, r.collectives, ms(r.wait_ns), ms(r.transfer_ns),
                       pct(r.wait_ns / (r.wait_ns + r.transfer_ns) if (r.wait_ns + r.transfer_ns) else 0),
                       r.times_late, ms(r.late_by_ns), r.late_phase if isinstance(r.late_phase, str) else "-"]
                      for r in s.itertuples()])
        strag = views.get(result, "stragglers")
        if strag:
            out.append(f"straggler rank(s): {', '.join(map(str, strag))}")
        out.append("")

    if len(result.alignment) > 1:
        out.append("Clock alignment of separate reports")
        out += table(["input", "method", "UTC offset ms", "applied ms", "residual us"],
                     [[clip(r.input, 50), r.method, ms(r.utc_offset_ns), ms(r.offset_ns),
                       us(r.residual_ns) if r.residual_ns is not None and r.residual_ns == r.residual_ns else "-"]
                      for r in result.alignment.itertuples()], "llrrr")
        out.append("")
    for note in result.notes:       # wrapped, not clipped: a note is read whole
        out += textwrap.wrap(f"note: {note!s}", WIDTH, subsequent_indent="      ", break_on_hyphens=False) or ["note:"]
    return "\n".join(line[:WIDTH] for line in out).rstrip() + "\n"
