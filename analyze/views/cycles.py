"""Views of decode cycles: pooled percentiles of the per-cycle figures, tokens per cycle."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER
from analyze.timeline import cycles as cycles_mod, own_cost
from analyze.views.registry import view


@view("cycle_distribution")
def cycle_distribution(a) -> pd.DataFrame:
    """p50/p90/p99 over all cycles with GPU work of all ranks (pooled samples, not medians of medians)."""
    from analyze.run.live import is_live

    return cycle_distribution_table(a.cycles, a.phase_names, window="host window" if is_live(a) else "GPU window")


def cycle_distribution_table(cycles: pd.DataFrame, phase_names: list[str], window: str = "GPU window") -> pd.DataFrame:
    """``window``: the label of ``duration_ns`` (a live log's cycle window is on the host)."""
    cols = ["figure", "cycles", "mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"]
    cycles = cycles_mod.with_gpu(cycles)
    if cycles is None or cycles.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    rows = []
    labels = {"period_ns": "cycle period", "duration_ns": window}
    for fig in ["period_ns", "duration_ns"] + [f"{p}_ns" for p in list(phase_names) + [OTHER]] + ["gap_ns"]:
        if fig not in cycles.columns:
            continue
        v = cycles[fig].to_numpy(dtype="float64", na_value=np.nan)
        known = ~np.isnan(v)
        if known.any() and not known.all():     # a sampled live log: the phases of its timed cycles
            v = v[known]
        rows.append([labels.get(fig, fig[:-3]), len(v), float(v.mean()),
                     *np.percentile(v, [50, 90, 99]).tolist(), float(v.max())])
    return pd.DataFrame(rows, columns=cols)


@view("cycle_counts")
def cycle_counts(a) -> dict:
    """How many decode cycles the analysis holds: ``cycles`` (rows, all ranks) with GPU data (what
    per-cycle figures are drawn from), ``cycle_numbers`` (distinct cycle numbers among them), over
    ``ranks``; ``no_gpu_ops``: cycle ranges after a rank's last recorded GPU op (nsys lost their
    CUDA data); ``warmup``: cycles flagged warm-up for any reason."""
    cyc = a.cycles
    if cyc is None or cyc.empty:
        return {"cycles": 0, "cycle_numbers": 0, "ranks": 0, "no_gpu_ops": 0, "warmup": 0}
    reason = cyc["warmup_reason"] if "warmup_reason" in cyc.columns else pd.Series(None, index=cyc.index)
    lost = (reason == cycles_mod.NO_GPU_OPS).to_numpy(dtype=bool)
    return {"cycles": int((~lost).sum()), "cycle_numbers": int(cyc.loc[~lost, "cycle"].nunique()),
            "ranks": int(cyc["rank"].nunique()), "no_gpu_ops": int(lost.sum()), "warmup": int(reason.notna().sum())}


@view("tokens")
def tokens(a) -> dict | None:
    """Tokens per cycle and tokens/s over the measured cycles (the lowest rank's view: every TP rank
    produces the same tokens)."""
    return tokens_summary(a.cycles)


def tokens_summary(cycles: pd.DataFrame) -> dict | None:
    if cycles is None or cycles.empty or cycles["accepted_tokens"].isna().all():
        return None
    first_rank = cycles["rank"].min()
    c = cycles[(cycles["rank"] == first_rank) & cycles["accepted_tokens"].notna()]
    accepted = float(c["accepted_tokens"].astype("float64").sum())
    tokens = float(c["tokens"].astype("float64").sum())
    wall = float(c["period_ns"].sum())
    return {"rank": int(first_rank), "cycles": int(len(c)), "accepted_tokens": accepted, "tokens": tokens,
            "accepted_per_cycle": accepted / len(c) if len(c) else None,
            "tokens_per_cycle": tokens / len(c) if len(c) else None,
            "tokens_per_s": tokens * 1e9 / wall if wall else None}


@view("timing_cost", file=9, title="What the timing mode costs (live log, steady cycles per rank and batch size; "
                                   "cost_pct: share of tokens/s, 95% interval)")
def timing_cost(a) -> pd.DataFrame:
    """Per rank and batch size of a live timing log: what the shim's timing mode costs, from its own log
    (timeline.own_cost: the timed cycles' extra period, the shim's and the sink's logged time); empty for an
    nsys profile."""
    return own_cost.cost_table(a.cycles)
