"""Views of GPU time per phase: the phase x rank table and the statistics across ranks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER
from analyze.views.registry import get, view


def phase_order(a) -> list[str]:
    """The configured phases, then ``other``: the order every phase table is shown in."""
    return [p for p in a.phase_names if p != OTHER] + [OTHER]


@view("phase_by_rank")
def phase_by_rank(a) -> pd.DataFrame:
    """Exclusive GPU time (ns) per phase (rows, in :func:`phase_order`, then ``busy``) and rank
    (integer columns, every rank of the analysis); ``share``: the phase's part of all ranks' busy
    time (the ``busy`` row: 1, or 0 without busy time). Per rank the phase rows add up to busy."""
    names = phase_order(a)
    ranks = [int(r) for r in a.ranks["rank"]]
    ph = a.phases
    if len(ph):
        pivot = ph.pivot_table(index="phase", columns="rank", values="exclusive_ns", aggfunc="sum")
        pivot = pivot.reindex(index=names, columns=ranks).fillna(0).astype("int64")
    else:
        pivot = pd.DataFrame(0, index=names, columns=ranks, dtype="int64")
    totals = a.totals.set_index("rank") if len(a.totals) else pd.DataFrame({"busy_ns": []})
    busy = totals["busy_ns"].reindex(ranks).fillna(0).astype("int64")
    total_busy = int(busy.sum())
    out = pivot.copy()
    out.loc["busy"] = busy.to_numpy()
    out["share"] = (pivot.sum(axis=1) / total_busy if total_busy else pd.Series(0.0, index=names)).tolist() + \
        [1.0 if total_busy else 0.0]
    out.index.name = "phase"
    out.columns.name = None
    return out


@view("cross_rank", file=1)
def cross_rank(a) -> pd.DataFrame:
    """Per phase, exact statistics over ranks of exclusive and busy time: min/median/max/spread,
    and the rank with the most exclusive time (the table ``--csv`` writes as cross_rank)."""
    return cross_rank_table(a.phases)


def cross_rank_table(phases: pd.DataFrame) -> pd.DataFrame:
    cols = ["phase", "ranks", "exclusive_min_ns", "exclusive_median_ns", "exclusive_max_ns",
            "exclusive_spread_ns", "busy_min_ns", "busy_median_ns", "busy_max_ns", "slowest_rank"]
    if phases.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    rows = []
    for phase, g in phases.groupby("phase", sort=False):
        ex = g["exclusive_ns"].to_numpy(dtype="int64")
        busy = g["busy_ns"].to_numpy(dtype="int64")
        rows.append([phase, len(g), int(ex.min()), float(np.median(ex)), int(ex.max()),
                     int(ex.max() - ex.min()), int(busy.min()), float(np.median(busy)), int(busy.max()),
                     int(g["rank"].to_numpy()[int(np.argmax(ex))])])
    return pd.DataFrame(rows, columns=cols)


@view("phase_across_ranks")
def phase_across_ranks(a) -> pd.DataFrame:
    """Per phase (in :func:`phase_order`): its outermost NVTX ranges summed over ranks
    (``ranges``, ``cpu_ns``, ``projected_ns``), its kernel time, and the cross-rank statistics of
    its exclusive time (:func:`cross_rank`)."""
    cols = ["phase", "ranges", "cpu_ns", "projected_ns", "kernel_ns", "exclusive_min_ns", "exclusive_median_ns",
            "exclusive_max_ns", "exclusive_spread_ns", "slowest_rank"]
    ph = a.phases
    cross = get(a, "cross_rank")
    if ph.empty or cross.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    agg = ph.groupby("phase", sort=False).agg(ranges=("instances", "sum"), cpu_ns=("cpu_ns", "sum"),
                                              projected_ns=("projected_ns", "sum"), kernel_ns=("kernel_ns", "sum"))
    order = [p for p in phase_order(a) if p in set(cross["phase"])]
    out = cross.set_index("phase").reindex(order).join(agg)
    return out.rename_axis("phase").reset_index()[cols]
