"""All-reduce skew as the reports show it: which collectives count as evidence of a straggler, the
skew table, the straggler(s), and why the skew table is left out when it is.

A rank is named a straggler only on evidence from the steady state: collectives that ran before the
first steady-state decode cycle (warm-up: the first cycle of each rank, CUDA-graph capture, ...; the
cycle table's ``warmup`` flags, views/decode.py) are not counted for lateness, nor, in a trace
without decode cycles, the first collective (NCCL's first all-reduce waits for every rank to finish
its set-up: one late first collective says nothing). Wait and transfer totals still sum every
collective.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze import opstore
from analyze.notes import Note
from analyze.timeline import collectives as coll_mod
from analyze.views import decode
from analyze.views.registry import get, view

__all__ = ["steady_start_ns", "evidence_mask", "evidence", "skew_table", "stragglers", "skew_notes"]


def steady_start_ns(cycles: pd.DataFrame | None) -> int | None:
    """When the steady state has begun on every rank: the latest, over ranks, start of the rank's
    first steady-state cycle (analyze.timeline.cycles.steady).
    None without cycles or without a steady-state cycle."""
    if cycles is None or cycles.empty:
        return None
    flag, _ = decode.warmup_flags(cycles)     # no flags: derived by the same rules (first cycle, outliers)
    steady = cycles.loc[~flag, ["rank", "start_ns"]]     # the two columns read (a copy of each)
    if steady.empty:
        return None
    return int(steady.groupby("rank")["start_ns"].min().max())


def evidence_mask(collectives: pd.DataFrame, cycles: pd.DataFrame | None) -> np.ndarray:
    """Per row of ``collectives``, whether its instance counts as straggler evidence: its last
    arrival came at or after :func:`steady_start_ns`; without decode cycles, every instance but
    the first."""
    if collectives is None or collectives.empty:
        return np.zeros(0, dtype=bool)
    last_arrival = collectives.groupby("collective")["start_ns"].transform("max").to_numpy()
    begin = steady_start_ns(cycles)
    if begin is None:
        if cycles is not None and len(cycles):        # cycles, all warm-up: no evidence at all
            return np.zeros(len(collectives), dtype=bool)
        first = collectives["collective"].min()
        return (collectives["collective"] != first).to_numpy()
    return last_arrival >= begin


@view("skew_evidence")
def evidence(a) -> np.ndarray:
    """:func:`evidence_mask` of the analysis' collectives (a view: the skew table, its notes and the
    terminal report's skew section share one)."""
    return evidence_mask(a.collectives, a.cycles)


def skew_table(a) -> pd.DataFrame:
    """:func:`analyze.timeline.collectives.skew_summary` with lateness counted on the evidence."""
    return coll_mod.skew_summary(a.collectives, get(a, "skew_evidence"))


def stragglers(a) -> list[int]:
    """The straggler rank(s), on steady-state evidence only (from the ``skew`` view: made once)."""
    if a.collectives is None or a.collectives.empty:
        return []
    return coll_mod.stragglers_of(get(a, "skew"))


def skew_notes(a) -> list[Note]:
    """Why the skew table is left out (one rank, no collective matched), and a rank that was late
    only in warm-up (named nowhere)."""
    coll = a.collectives
    n_ranks = len(a.ranks)
    if coll is None or coll.empty:
        from analyze.run.live import is_live

        if n_ranks < 2:
            why = "one rank (TP 1): no collective to wait in"
        elif is_live(a):
            why = "a live timing log has no kernels, so no collective to match across ranks"
        else:
            graph_level = _has_graph_launches(a)
            why = (f"no GPU op of the {n_ranks} ranks matched the allreduce phase's kernel patterns (NCCL, custom and "
                   "fused all-reduce kernels; any allreduce time shown is that of the other GPU ops inside its NVTX "
                   "ranges)"
                   + ("; this trace has CUDA graph launches traced at graph level, where kernels inside a replay "
                      "are invisible: profile with --cuda-graph-trace=node" if graph_level else "")
                   + "; --phase 'allreduce=ranges:allreduce;kernels:PATTERN' names other collective kernels")
        return [Note(N.SKEW_SKIPPED, f"no all-reduce skew table: {why}", count=0)]
    ev = get(a, "skew_evidence")
    all_late = coll_mod.skew_summary(coll)
    counted = get(a, "skew")
    only_warm = all_late[(all_late["times_late"] > 0)
                         & (all_late["rank"].map(counted.set_index("rank")["times_late"]).fillna(0) == 0)]
    out = []
    if len(only_warm):
        left = int((~ev).sum() // max(coll["rank"].nunique(), 1))
        out.append(Note(N.STRAGGLER_WARMUP_ONLY, f"rank(s) {', '.join(map(str, only_warm['rank'].tolist()))} arrived "
                        f"last only in warm-up collectives ({left} left out of the straggler evidence): not named a "
                        "straggler", count=int(only_warm["times_late"].sum())))
    return out


def _has_graph_launches(a) -> bool:
    """Whether the analysis' GPU ops hold a CUDA graph launch traced at graph level: the per-op table at
    once where the store holds one (no scan: a scan orders every op by rank and start), else the spilled
    ops of reports analysed in chunks, the first one found ending the scan."""
    store = opstore.of(a)
    frame = store.frame
    if frame is not None or not len(store):
        return frame is not None and "kind" in frame.columns and bool((frame["kind"] == "graph").any())
    return any(bool((f["kind"] == "graph").any()) for f in store.scan(["kind"]))
