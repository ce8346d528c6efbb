"""The steady-state decode breakdown: where each decode cycle's time goes, per rank.

A decode cycle's *period* runs from its first GPU op to the next cycle's first GPU op on the same
rank (the last cycle of a rank: to its own window end). The cycle table splits it exactly
(integer ns) into the exclusive GPU time of every phase (``period_<phase>_ns``), GPU work of no
phase (``period_other_ns``) and GPU idle (``period_idle_ns``: the GPU waited for the host), and
flags warm-up cycles (``warmup``, with a reason: the first cycle of a rank, a cycle that captured
a CUDA graph, an outlier period, ...). This module reads only those columns:

* :func:`decode_breakdown`: per rank and component (phases, ``other``, ``gpu_idle``) the mean
  (``per_cycle_ns``) and median over the steady-state cycles and the ``share`` of the mean
  period; a rank's components add up to its mean period, its shares to 1.
* :func:`decode_summary`: per rank the steady and warm-up cycle counts, the period, tokens per
  cycle, tokens/s and GPU ms per token, and the GPU work outside decode cycles.
* :func:`outside_cycles`: per rank the GPU busy time outside every cycle period (model load,
  CUDA-graph capture, prefill between cycles) split by phase.
* :func:`decode_per_batch`: where the load visited several batch sizes, per batch size the steady cycles,
  period, tokens per cycle, accepted draft tokens per request and tokens/s (the figures above pool them).
* :func:`headline`: one plain sentence for a chat ("verify is 37% of the decode cycle; ...").

All are pure functions of the cycle table, the phase names, and the phases/totals tables.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER
from analyze.timeline import cycles as cycles_mod, own_cost
from analyze.timeline.cycles import LOST_REASONS

__all__ = ["GPU_IDLE", "ALLREDUCE", "components", "component_column", "has_period_split", "warmup_flags",
           "steady_cycles", "decode_breakdown", "decode_summary", "outside_cycles", "headline",
           "BREAKDOWN_COLUMNS", "SUMMARY_COLUMNS", "OUTSIDE_COLUMNS", "PER_BATCH_COLUMNS", "no_allreduce",
           "decode_per_batch"]

GPU_IDLE = "gpu_idle"
ALLREDUCE = "allreduce"
BREAKDOWN_COLUMNS = ["rank", "component", "per_cycle_ns", "median_ns", "share"]
SUMMARY_COLUMNS = ["rank", "cycles", "steady_cycles", "warmup_cycles", "warmup_reasons", "period_mean_ns",
                   "period_median_ns", "busy_per_cycle_ns", "tokens_per_cycle", "tokens_per_s",
                   "gpu_ms_per_token", "tokens_from_rank", "outside_cycles_busy_ns", "warmup_busy_ns"]
OUTSIDE_COLUMNS = ["rank", "component", "busy_ns"]
PER_BATCH_COLUMNS = ["rank", "batch", "cycles", "period_mean_ns", "period_median_ns", "tokens_per_cycle",
                     "accepted_per_request", "tokens_per_s"]


def components(phase_names: list[str]) -> list[str]:
    """The components of a cycle period, in report order: the phases, ``other``, ``gpu_idle``."""
    return [p for p in phase_names if p != OTHER] + [OTHER, GPU_IDLE]


def component_column(component: str) -> str:
    """The cycle-table column holding ``component``'s share of each period."""
    return "period_idle_ns" if component == GPU_IDLE else f"period_{component}_ns"


def has_period_split(cycles: pd.DataFrame | None, phase_names: list[str]) -> bool:
    """Whether the cycle table carries the period split this view reads."""
    return cycles is not None and len(cycles) > 0 and all(
        component_column(c) in cycles.columns for c in components(phase_names))


def warmup_flags(cycles: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(left out of steady-state figures, reason) per cycle: the one definition,
    :func:`analyze.timeline.cycles.left_out_reasons`."""
    reason = cycles_mod.left_out_reasons(cycles)
    return pd.notna(reason), reason


def steady_cycles(cycles: pd.DataFrame) -> pd.DataFrame:
    """The steady cycles (:func:`analyze.timeline.cycles.steady`)."""
    return cycles_mod.steady(cycles)


def _unsplit(c: pd.DataFrame) -> np.ndarray:
    """Per cycle: a live log's cycle the sampling left without CUDA events (its period is known, its split
    is not): not :func:`analyze.timeline.cycles.timed`."""
    return ~cycles_mod.timed(c)


def _periods(c: pd.DataFrame, comps: list[str]) -> np.ndarray:
    """Each cycle's period (the sum of its components); a live log's untimed cycle its host period
    (``period_ns``); 0 for a cycle without GPU data (NA columns: ``no_gpu_ops``, always warm-up)."""
    split = c[[component_column(x) for x in comps]].to_numpy(dtype="int64", na_value=0).sum(axis=1)
    unsplit = _unsplit(c)
    if not unsplit.any():
        return split
    host = pd.to_numeric(c["period_ns"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    return np.where(unsplit, np.nan_to_num(host), split).astype("int64")


def decode_breakdown(cycles: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """Per rank and component over the rank's steady-state cycles: ``per_cycle_ns`` (mean),
    ``median_ns`` and ``share`` (mean / mean period; a rank's shares add up to 1). Empty when the
    cycle table has no period split or no steady-state cycle."""
    if not has_period_split(cycles, phase_names):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in BREAKDOWN_COLUMNS})
    comps = components(phase_names)
    steady = steady_cycles(cycles)
    rows = []
    for rank, c in steady.groupby("rank", sort=True):
        period_mean = float(_periods(c, comps).mean())
        timed = c[~_unsplit(c)]     # a sampled live log: the phases are the timed cycles', the period every cycle's
        if not len(timed):
            continue
        # a sampled live log: the timed cycles' split carried onto the mean period of all cycles
        scale = cycles_mod.sampled_scale(_periods(c, comps), ~_unsplit(c))
        means = {}
        for comp in comps:
            v = timed[component_column(comp)].to_numpy(dtype="int64")
            means[comp] = (float(v.mean()) * scale, float(np.median(v)) * scale)
        for comp in comps:
            mean, median = means[comp]
            rows.append([int(rank), comp, mean, median, mean / period_mean if period_mean else 0.0])
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in BREAKDOWN_COLUMNS})
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)


def _outside_busy(cycles: pd.DataFrame, totals: pd.DataFrame, comps: list[str]) -> pd.Series:
    """Per rank, GPU busy time outside every cycle period: ``totals.outside_cycles_busy_ns``, else
    busy time minus the busy part of every period."""
    if totals is not None and "outside_cycles_busy_ns" in totals.columns:
        return totals.set_index("rank")["outside_cycles_busy_ns"].astype("int64")
    busy_comps = [x for x in comps if x != GPU_IDLE]
    in_cycles = cycles.assign(_b=cycles[[component_column(x) for x in busy_comps]].sum(axis=1)) \
        .groupby("rank")["_b"].sum()
    busy = totals.set_index("rank")["busy_ns"]
    return (busy - in_cycles.reindex(busy.index).fillna(0)).astype("int64")


def outside_cycles(cycles: pd.DataFrame, phases: pd.DataFrame, totals: pd.DataFrame,
                   phase_names: list[str]) -> pd.DataFrame:
    """Per rank and phase (``other`` included), the exclusive GPU time outside every cycle period
    (the phase's exclusive time minus its part of the periods): what loading, CUDA-graph capture
    and prefill between cycles cost. A rank's rows add up to its ``outside_cycles_busy_ns``."""
    if not has_period_split(cycles, phase_names) or phases is None or phases.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in OUTSIDE_COLUMNS})
    comps = [x for x in components(phase_names) if x != GPU_IDLE]
    in_periods = cycles.groupby("rank")[[component_column(x) for x in comps]].sum()
    excl = phases.pivot_table(index="rank", columns="phase", values="exclusive_ns", aggfunc="sum")
    rows = []
    for rank in excl.index:
        for comp in comps:
            total = int(excl.loc[rank].get(comp, 0) or 0)
            inside = int(in_periods.loc[rank, component_column(comp)]) if rank in in_periods.index else 0
            rows.append([int(rank), comp, total - inside])
    return pd.DataFrame(rows, columns=OUTSIDE_COLUMNS)


def _reason_counts(reasons) -> dict[str, int]:
    """{reason: cycles} of the cycles that have a warm-up reason, the reasons in the order they first
    appear (the steady cycles' missing reasons are dropped first, by one vectorized pass)."""
    reasons = pd.Series(reasons, copy=False)
    out: dict[str, int] = {}
    for r in reasons[reasons.notna()].tolist():
        out[str(r)] = out.get(str(r), 0) + 1
    return out


def decode_summary(cycles: pd.DataFrame, totals: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """Per rank: cycles (all, steady, warm-up and a ``{reason: count}`` dict), the steady-state
    period (mean, median), GPU busy time per cycle, tokens per cycle (accepted draft tokens plus one
    per request), tokens/s (tokens over the sum of periods), GPU ms per token (busy time per
    token: the GPU cost of each token the cycle emits), ``tokens_from_rank`` (the rank whose accept
    marks gave the tokens: every TP rank emits the same tokens, so a rank without marks takes the
    lowest rank's), ``outside_cycles_busy_ns`` and the busy time of the warm-up cycles."""
    if not has_period_split(cycles, phase_names):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in SUMMARY_COLUMNS})
    comps = components(phase_names)
    flag, reason = warmup_flags(cycles)
    period = _periods(cycles, comps)
    idle = cycles[component_column(GPU_IDLE)].to_numpy(dtype="int64", na_value=0)
    busy = np.where(_unsplit(cycles), np.nan, (period - idle).astype("float64"))   # unknown where untimed
    frame = pd.DataFrame({"rank": cycles["rank"].to_numpy(), "warm": flag, "reason": reason, "period": period,
                          "busy": busy,
                          "tokens": pd.to_numeric(cycles.get("tokens", pd.Series(np.nan, index=cycles.index)),
                                                  errors="coerce").astype("float64").to_numpy()})
    outside = _outside_busy(cycles, totals, comps)
    per_rank = {}
    for rank, g in frame.groupby("rank", sort=True):
        s = g[~g["warm"]]
        with_tokens = s[s["tokens"].notna()]
        per_rank[int(rank)] = (g, s, with_tokens)
    ref = next((r for r, (_, _, t) in per_rank.items() if len(t)), None)
    rows = []
    for rank, (g, s, t) in per_rank.items():
        src = rank if len(t) else ref
        tok = per_rank[src][2] if src is not None else None
        tokens_per_cycle = float(tok["tokens"].mean()) if tok is not None and len(tok) else None
        # a sampled live log: the timed cycles' busy time carried onto every cycle's period (the one rule)
        scale = cycles_mod.sampled_scale(s["period"].to_numpy(dtype="float64"), s["busy"].notna().to_numpy())
        busy_per_cycle = float(s["busy"].mean()) * scale if len(s) else None
        period_mean = float(s["period"].mean()) if len(s) else None
        if src == rank and len(t) and t["period"].sum() > 0:
            tps = float(t["tokens"].sum()) * 1e9 / float(t["period"].sum())
            if t["busy"].isna().any():      # a sampled live log: busy per timed cycle (scaled) over tokens per cycle
                t_scale = cycles_mod.sampled_scale(t["period"].to_numpy(dtype="float64"), t["busy"].notna().to_numpy())
                ms_per_token = float(t["busy"].mean()) * t_scale / float(t["tokens"].mean()) / 1e6 \
                    if t["tokens"].mean() and t["busy"].notna().any() else None
            else:
                ms_per_token = float(t["busy"].sum()) / float(t["tokens"].sum()) / 1e6 if t["tokens"].sum() else None
        elif tokens_per_cycle and period_mean:
            tps = tokens_per_cycle * 1e9 / period_mean
            ms_per_token = busy_per_cycle / tokens_per_cycle / 1e6
        else:
            tps = ms_per_token = None
        rows.append([rank, len(g), len(s), int(g["warm"].sum()), _reason_counts(g["reason"]), period_mean,
                     float(np.median(s["period"])) if len(s) else None, busy_per_cycle, tokens_per_cycle, tps,
                     ms_per_token, src, int(outside.get(rank, 0)), int(np.nansum(g.loc[g["warm"], "busy"]))])
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def decode_per_batch(cycles: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """Where the load visited two batch sizes or more (:func:`analyze.timeline.cycles.visited_of`, the rule
    whatif and advise model a batch size by), per visited batch size of the lowest rank's steady cycles (those
    steady on every rank, as whatif counts them): ``cycles``, the period (mean, median; the host's start to next
    start, whatif's wall time of a cycle), ``tokens_per_cycle``,
    ``accepted_per_request`` (accepted draft tokens over requests) and ``tokens_per_s`` (tokens over the sum of
    periods). The breakdown and the headline pool every batch size; these are the figures of each. Empty where
    the load visited one batch size, or none said its requests."""
    empty = pd.DataFrame({c: pd.Series(dtype="object") for c in PER_BATCH_COLUMNS})
    if not has_period_split(cycles, phase_names):
        return empty
    visited = cycles_mod.visited_of(cycles_mod.batch_counts(cycles))
    if len(visited) < 2:
        return empty
    c = cycles_mod.steady(cycles, every_rank=True)
    low = c[c["rank"] == c["rank"].min()]
    # the cycle's wall time as whatif reads it (tools.sides.time_column: start to next start on the host), so that
    # a row is whatif --batch M's profiled cycle; the GPU period where the table has no host period
    period = (pd.to_numeric(low["period_ns"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
              if "period_ns" in low.columns else _periods(low, components(phase_names)).astype("float64"))
    req = pd.to_numeric(low["requests"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    tokens = pd.to_numeric(low["tokens"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    accepted = pd.to_numeric(low["accepted_tokens"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    rows = []
    for batch in visited.index:
        sel = req == batch
        p, t, a = period[sel], tokens[sel], accepted[sel]
        ok = ~np.isnan(p) & ~np.isnan(t)             # a cycle without its period or tokens counts in neither sum
        acc = a[~np.isnan(a)]
        rows.append([int(low["rank"].iloc[0]), int(batch), int(sel.sum()),
                     float(p[~np.isnan(p)].mean()) if (~np.isnan(p)).any() else None,
                     float(np.median(p[~np.isnan(p)])) if (~np.isnan(p)).any() else None,
                     float(t[~np.isnan(t)].mean()) if (~np.isnan(t)).any() else None,
                     float(acc.sum() / (batch * len(acc))) if len(acc) else None,
                     float(t[ok].sum() * 1e9 / p[ok].sum()) if p[ok].sum() > 0 else None])
    return pd.DataFrame(rows, columns=PER_BATCH_COLUMNS)


def no_allreduce(breakdown: pd.DataFrame, ranks: pd.DataFrame) -> bool:
    """One rank (TP 1) and no all-reduce time in its cycles: nothing to say about all-reduce."""
    if ranks is None or len(ranks) != 1:
        return False
    world = ranks["world"].iloc[0] if "world" in ranks.columns else None
    if world is not None and world == world and int(world) > 1:
        return False
    ar = breakdown[breakdown["component"] == ALLREDUCE]
    return ar.empty or float(ar["per_cycle_ns"].abs().sum()) == 0.0


CORE_COMPONENTS = ("draft", "verify", "draft_extend", ALLREDUCE, OTHER, GPU_IDLE)


def shown_components(breakdown: pd.DataFrame, phase_names: list[str], ranks: pd.DataFrame | None = None) -> list[str]:
    """The components worth a column in a report: the core ones, and configured phases with time on
    some rank; all-reduce left out on a single rank without any (TP 1)."""
    tp1 = no_allreduce(breakdown, ranks)
    totals = breakdown.groupby("component", sort=False)["per_cycle_ns"].apply(lambda s: s.abs().sum())
    return [c for c in components(phase_names)
            if (c in CORE_COMPONENTS or totals.get(c, 0) > 0) and not (tp1 and c == ALLREDUCE)]


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 or x == 0 else f"{100 * x:.1f}%"


def pooled(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Per component, the mean over ranks of ``per_cycle_ns`` and its share of the mean period
    (every rank weighs the same)."""
    g = breakdown.groupby("component", sort=False)["per_cycle_ns"].mean()
    total = float(g.sum())
    return pd.DataFrame({"component": g.index, "per_cycle_ns": g.to_numpy(),
                         "share": g.to_numpy() / total if total else 0.0})


def replay_share(cycles: pd.DataFrame | None) -> float | None:
    """A live log's CUDA-graph replays as a share of the cycle: over the steady cycles whose replays were
    timed, the mean replay time (``replay_ns``: the graphs' GPU stream time) / their mean period. None
    without such cycles (an nsys report, eager mode, a log written before the replays were logged). Where
    it is far below the timed phases' share, the phases' time is mostly host time: a host-bound cycle."""
    if cycles is None or "replay_ns" not in cycles.columns:
        return None
    c = steady_cycles(cycles)
    r = pd.to_numeric(c["replay_ns"], errors="coerce")
    ok = r.notna().to_numpy()
    if not ok.any():
        return None
    period = float(pd.to_numeric(c["period_ns"], errors="coerce")[ok].mean())
    return float(r[ok].mean()) / period if period > 0 else None


def own_cost_clause(rows: list) -> str:
    """The headline's clause on what the timing mode cost, from the ``timing_cost`` view's (cost %, basis) rows:
    the range over ranks and batch sizes, and what it counts where that is not all of it."""
    pcts = [p for p, _ in rows]
    lo, hi = min(pcts), max(pcts)
    amount = f"{lo:.1f}%" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}-{hi:.1f}%"
    bases = {b for _, b in rows}
    what = ("the timing mode itself cost" if bases == {own_cost.ALL} else
            "its CUDA events cost" if bases == {own_cost.EVENTS_ONLY} else
            "the shim's own time cost" if bases == {own_cost.HOST_ONLY} else "the timing mode cost, in part,")
    rest = {own_cost.EVENTS_ONLY: "; this log has no shim_ns", own_cost.HOST_ONLY: "; the events' part not separable"}
    return (f"{what} {amount} of tokens/s (its log's own measure, 'What the timing mode costs'"
            + (rest.get(next(iter(bases)), "") if len(bases) == 1 else "") + ")")


def headline(breakdown: pd.DataFrame, summary: pd.DataFrame, ranks: pd.DataFrame | None = None,
             live: bool = False, replays: float | None = None, own_cost_pct: list | None = None,
             batches: list[int] | None = None) -> str | None:
    """One plain sentence: the largest components' shares of the steady-state cycle, GPU idle,
    tokens, the warm-up cycles left out and the GPU work outside decode cycles. None without a
    breakdown. ``live``: the cycles come from a live timing log (run/live.py): the rest of the period
    is "outside the timed phases" (GPU idle, untimed GPU work and host time: the log cannot tell
    them apart), and the sentence says that the kernel tables are absent; ``replays``: the live log's
    :func:`replay_share`, said after the phases (the GPU time of their graph replays); ``own_cost_pct``: the
    live log's own measure of what the timing mode cost, % of tokens/s per rank and batch size (the
    ``timing_cost`` view: (cost %, basis) rows), said last (:func:`own_cost_clause`); ``batches``: the batch
    sizes the load visited where several (:func:`decode_per_batch`), said with the tokens: the figures pool them."""
    if breakdown is None or breakdown.empty:
        return None
    p = pooled(breakdown)
    n_ranks = breakdown["rank"].nunique()
    period_ns = float(p["per_cycle_ns"].sum())
    busy = p[(p["component"] != GPU_IDLE) & (p["per_cycle_ns"] > 0)].sort_values("share", ascending=False)
    idle = float(p.loc[p["component"] == GPU_IDLE, "share"].sum())
    tp1 = no_allreduce(breakdown, ranks)
    parts = []
    idle_first = not len(busy) or idle >= 0.5
    if live:            # the rest of the period: idle GPU, untimed GPU work and host time together
        untimed = "outside the timed phases (GPU idle, untimed GPU work and host time together)"
        if idle_first:
            parts.append(f"{_pct(idle)} of the decode cycle is {untimed}")
            rest_rows = busy
        else:
            top = busy.iloc[0]
            parts.append(f"{top['component']} is {_pct(top['share'])} of the decode cycle")
            parts.append(f"{_pct(idle)} of the cycle is {untimed}")
            rest_rows = busy.iloc[1:]
    elif idle_first:      # a host-bound cycle: the idle time is the finding
        parts.append(f"the GPU is idle {_pct(idle)} of the decode cycle" + (" (host-bound)" if idle >= 0.5 else ""))
        rest_rows = busy
    else:
        top = busy.iloc[0]
        parts.append(f"{top['component']} is {_pct(top['share'])} of the decode cycle")
        parts.append(f"the GPU is idle {_pct(idle)} of it" + (" (host-bound)" if idle >= 0.5 else ""))
        rest_rows = busy.iloc[1:]
    rest = [f"{r.component} {_pct(r.share)}" for r in rest_rows.itertuples()
            if not (tp1 and r.component == ALLREDUCE)]
    if rest:
        parts.append(", ".join(rest))
    if live and replays is not None:
        timed_share = float(busy["share"].sum())
        parts.append(f"their CUDA-graph replays took {_pct(replays)} of the cycle on the GPU"
                     + (" (host-bound: the rest of the phases' time is host time)"
                        if replays < 0.7 * timed_share else ""))
    if tp1:
        parts.append("no all-reduce (one rank, TP 1)")
    steady = int(summary["steady_cycles"].sum()) if len(summary) else 0
    cycle = (f"a cycle takes {period_ns / 1e6:,.3f} ms"
             + (f" (mean of {n_ranks} ranks)" if n_ranks > 1 else "")
             + f" over {steady // max(n_ranks, 1) if n_ranks > 1 else steady} steady-state cycles"
             + (" per rank" if n_ranks > 1 else ""))
    parts.append(cycle)
    first = summary.iloc[0] if len(summary) else None
    if first is not None and first["tokens_per_cycle"] is not None and first["tokens_per_cycle"] == first["tokens_per_cycle"]:
        tok = f"{first['tokens_per_cycle']:.2f} tokens per cycle"
        if first["tokens_per_s"]:
            tok += f", {first['tokens_per_s']:,.0f} tokens/s"
        if first["gpu_ms_per_token"]:
            tok += f", {first['gpu_ms_per_token']:.3f} GPU-ms per token"
        if batches and len(batches) > 1:
            tok += (f" (pooled over the {len(batches)} batch sizes the load visited, "
                    f"{', '.join(map(str, batches[:-1]))} and {batches[-1]} requests: each below)")
        parts.append(tok)
    # cycles whose GPU data was lost (nsys cut its CUDA data off) are no warm-up: counted apart
    lost_codes = LOST_REASONS
    reasons = [dict(d or {}) for d in summary["warmup_reasons"]] if len(summary) and "warmup_reasons" in summary \
        else [{}]
    lost = [sum(int(d.get(k, 0)) for k in lost_codes) for d in reasons]
    outl = [int(d.get(cycles_mod.OUTLIER, 0)) for d in reasons]
    warm = summary["warmup_cycles"].astype(int).tolist() if len(summary) else [0]
    warm = [w - x - o for w, x, o in zip(warm, lost, outl)] if len(warm) == len(lost) else warm

    def count(values, what):
        each = values[0] if len(set(values)) == 1 else None
        n = each if each is not None else sum(values)
        return (f"{n} {what.replace('CYCLE', 'cycle' if n == 1 else 'cycles')}"
                + (" per rank" if n_ranks > 1 and each is not None else " over all ranks" if n_ranks > 1 else "")
                + " left out")

    if sum(warm):
        parts.append(count(warm, "warm-up CYCLE"))
    if sum(outl):
        parts.append(count(outl, f"outlier CYCLE (a period over {cycles_mod.OUTLIER_FACTOR:g}x the median of its "
                                 "batch size)"))
    if sum(lost):
        parts.append(count(lost, "CYCLE whose GPU data was lost (cut off at the end of the capture)"))
    if len(summary):
        outside = float(summary["outside_cycles_busy_ns"].max())
        if outside > 0:
            amount = f"{outside / 1e6:,.1f}" if outside >= 1e6 else f"{outside / 1e6:.3f}"
            parts.append(f"{amount} ms of GPU work outside decode cycles (load, capture, prefill)"
                         + (" on the busiest rank" if n_ranks > 1 else ""))
    if live:
        parts.append("from a live timing log: phase times from CUDA events, periods from the host clock, "
                     "all-reduce inside the phases that ran it, no kernel tables")
    if own_cost_pct:
        parts.append(own_cost_clause(own_cost_pct))
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


# ---- the views (views/registry.py): computed once per analysis, shared by every renderer ----------
from analyze.views.registry import get, view  # noqa: E402  (the pure functions above need no registry)


@view("decode_breakdown", file=4)
def decode_breakdown_view(a) -> pd.DataFrame:
    """:func:`decode_breakdown` of the analysis."""
    return decode_breakdown(a.cycles, a.phase_names)


@view("decode_summary", file=5)
def decode_summary_view(a) -> pd.DataFrame:
    """:func:`decode_summary` of the analysis."""
    return decode_summary(a.cycles, a.totals, a.phase_names)


@view("outside_cycles", file=6)
def outside_cycles_view(a) -> pd.DataFrame:
    """:func:`outside_cycles` of the analysis."""
    return outside_cycles(a.cycles, a.phases, a.totals, a.phase_names)


@view("decode_per_batch", file=10)
def decode_per_batch_view(a) -> pd.DataFrame:
    """:func:`decode_per_batch` of the analysis."""
    return decode_per_batch(a.cycles, a.phase_names)


@view("headline")
def headline_view(a) -> str | None:
    """:func:`headline` from the breakdown, summary and per-batch views."""
    from analyze.run.live import is_live

    live = is_live(a)
    cost = get(a, "timing_cost") if live else None
    per_batch = get(a, "decode_per_batch")
    return headline(get(a, "decode_breakdown"), get(a, "decode_summary"), a.ranks, live=live,
                    replays=replay_share(a.cycles) if live else None,
                    own_cost_pct=list(zip(cost["cost_pct"].astype(float), cost["basis"]))
                    if cost is not None and len(cost) else None,
                    batches=[int(b) for b in per_batch["batch"]] if len(per_batch) else None)
