"""All-reduce skew: per collective instance and rank, arrival, wait and transfer.

The n-th collective kernel of every rank is one collective instance. The last rank to arrive
(latest kernel start) sets when data can move: a rank that arrived earlier waits
``arrival_lag = last_start - start`` (capped at its kernel's duration); the rest is transfer.
``phase`` is the phase of the GPU work that ran just before the collective on that rank: for the
last arriving rank, the phase that made it late.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER
from analyze.timeline.cycles import cycle_at, steady

COLUMNS = ["collective", "rank", "name", "start_ns", "end_ns", "duration_ns", "arrival_lag_ns",
           "wait_ns", "transfer_ns", "phase", "last_arrival"]


# the map step's share of the collective table: the collective ops of one report in (rank, start)
# order, with the phase of the op just before each on its rank (``allreduce`` when that op is a
# collective too, ``other`` for a rank's first op)
COLLECTIVE_OP_COLUMNS = ["rank", "name", "start_ns", "end_ns", "prev_phase"]


def collective_ops_of_parts(parts: list[tuple], rank_of_group: np.ndarray, phase_names: list[str],
                            texts: np.ndarray) -> pd.DataFrame | None:
    """The map step's collective ops (:data:`COLLECTIVE_OP_COLUMNS`, in (rank, start) order) from its
    per-chunk parts: (process code, name code, start, end, phase code of the op before (< 0: none),
    whether that op is a collective) arrays each; ``rank_of_group``: per process code, its rank;
    ``phase_names``: what the phase codes stand for. None without collectives."""
    if not parts:
        return None
    grp, name_c, c_start, c_end, c_prev, c_prev_coll = (np.concatenate(col) for col in zip(*parts))
    rank_of = rank_of_group[grp]
    order = np.lexsort((c_start, rank_of))
    prev_code = c_prev[order]
    lookup = np.array(list(phase_names) + [OTHER], dtype=object)
    prev = lookup[np.where(prev_code < 0, len(phase_names), prev_code)]
    prev[c_prev_coll[order]] = "allreduce"
    prev[prev_code < 0] = OTHER
    return pd.DataFrame({"rank": rank_of[order], "name": pd.Series(texts[name_c[order]], dtype=object),
                         "start_ns": c_start[order], "end_ns": c_end[order],
                         "prev_phase": pd.Series(prev, dtype=object)})[COLLECTIVE_OP_COLUMNS]


def collective_table_from(coll: pd.DataFrame) -> pd.DataFrame:
    """The reduce step: collective ops of every rank (COLLECTIVE_OP_COLUMNS, from the map step:
    run/mapstep.py, with the phase of the op before each on its rank; any report order,
    each rank's rows in start order) -> one row per (collective instance, rank). The i-th collective
    of every rank is instance i (as many instances as the rank with the fewest); built on arrays in
    (instance, rank) order: millions of ops at scale, no sorted copies of the frame."""
    if coll is None or coll.empty or "prev_phase" not in coll.columns:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    rank = coll["rank"].to_numpy(dtype="int64")
    start = coll["start_ns"].to_numpy(dtype="int64")
    order = np.lexsort((start, rank))                   # stable by (rank, start)
    rank_sorted = rank[order]
    first = np.r_[0, np.flatnonzero(rank_sorted[1:] != rank_sorted[:-1]) + 1]
    if len(first) < 2:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    ranks = rank_sorted[first]
    n = int(np.diff(np.r_[first, len(rank_sorted)]).min())
    del rank_sorted
    # row (instance i, rank j) = the i-th op of rank j: instance-major, ranks ascending
    pick = order[(first[None, :] + np.arange(n)[:, None]).ravel()]
    del order
    start = start[pick]
    end = coll["end_ns"].to_numpy(dtype="int64")[pick]
    lag = (start.reshape(n, len(ranks)).max(axis=1, keepdims=True) - start.reshape(n, len(ranks))).ravel()
    duration = end - start
    wait = np.minimum(lag, duration)
    return pd.DataFrame({
        "collective": np.repeat(np.arange(n, dtype="int64"), len(ranks)), "rank": np.tile(ranks, n),
        # object columns of the few distinct strings (pandas 3 would copy every name into a str column)
        "name": pd.Series(coll["name"].to_numpy(dtype=object)[pick], dtype=object, copy=False),
        "start_ns": start, "end_ns": end,
        "duration_ns": duration, "arrival_lag_ns": lag, "wait_ns": wait, "transfer_ns": duration - wait,
        "phase": pd.Series(coll["prev_phase"].to_numpy(dtype=object)[pick], dtype=object, copy=False),
        "last_arrival": lag == 0,
    }, copy=False)


SIGNIFICANT_SPREAD = 5.0      # a collective is "late" when its arrival spread exceeds 5x the median
MIN_SPREAD_NS = 1_000


LATE_COLUMNS = ["collective", "rank", "arrival_lag_ns", "last_arrival", "phase"]


def late_collectives(collectives: pd.DataFrame) -> pd.DataFrame:
    """The last-arriving row of every collective whose arrival spread is significant: more than
    ``SIGNIFICANT_SPREAD`` times the median spread (and over 1 us). Column ``spread_ns``."""
    spread = collectives.groupby("collective")["arrival_lag_ns"].max()
    threshold = max(SIGNIFICANT_SPREAD * float(spread.median()), MIN_SPREAD_NS)
    late = collectives[collectives["last_arrival"]].copy()
    late["spread_ns"] = late["collective"].map(spread)
    return late[late["spread_ns"] > threshold]


def skew_summary(collectives: pd.DataFrame, evidence=None) -> pd.DataFrame:
    """Per rank: collectives, total wait and transfer, how often it arrived last in a significantly
    skewed collective (``times_late``), how long the others waited for it then (``late_by_ns``),
    and the phase that ran just before on it (what made it late). ``evidence``: a boolean mask over
    the rows, the collectives that count for lateness (e.g. none of the warm-up; views/skew.py);
    wait and transfer always sum every collective."""
    cols = ["rank", "collectives", "wait_ns", "transfer_ns", "times_late", "late_by_ns", "late_phase"]
    if collectives.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    g = collectives.groupby("rank")
    summary = pd.DataFrame({"collectives": g.size(), "wait_ns": g["wait_ns"].sum(),
                            "transfer_ns": g["transfer_ns"].sum()})
    counted = collectives[LATE_COLUMNS]              # what lateness reads: the filters copy these only
    if evidence is not None:
        counted = counted[np.asarray(evidence, dtype=bool)]
    late = late_collectives(counted) if len(counted) else counted.assign(spread_ns=pd.Series(dtype="int64"))
    summary["times_late"] = late.groupby("rank").size().reindex(summary.index).fillna(0).astype(int)
    summary["late_by_ns"] = late.groupby("rank")["spread_ns"].sum().reindex(summary.index).fillna(0) \
        .astype("int64")
    phase = late.groupby("rank")["phase"].agg(lambda s: s.value_counts().index[0]) if len(late) else pd.Series()
    summary["late_phase"] = phase.reindex(summary.index)
    return summary.reset_index()[cols]


def stragglers(collectives: pd.DataFrame, evidence=None) -> list[int]:
    """Ranks that arrived last in the most significantly skewed collectives (ties included), among
    the ``evidence`` rows when given (see :func:`skew_summary`)."""
    return stragglers_of(skew_summary(collectives, evidence))


def stragglers_of(summary: pd.DataFrame) -> list[int]:
    """:func:`stragglers` from a :func:`skew_summary` already made."""
    if summary.empty or summary["times_late"].max() <= 0:
        return []
    return [int(r) for r in summary.loc[summary["times_late"] == summary["times_late"].max(), "rank"]]


BYTES_COLUMNS = ["rank", "cycles", "collectives_per_cycle", "bytes_per_cycle", "message_bytes_min",
                 "message_bytes_max"]


def bytes_per_cycle(sized: pd.DataFrame, ranks: pd.DataFrame, cycles: pd.DataFrame) -> pd.DataFrame:
    """Per rank over its steady decode cycles (timeline.cycles.steady): NCCL collectives and message
    bytes per cycle, and the smallest and largest message. ``sized``: NCCL ranges with a message size
    (read/nccl_payloads.py: global_tid, start_ns, message_bytes, input); a range belongs to its
    process's rank (``ranks``: global_pid, input) and to the steady cycle whose host range
    [cpu_start_ns, cpu_end_ns] holds its start on that rank. A rank with no sized range in its steady
    cycles has no row (under CUDA graphs NCCL's host calls happen at capture only); empty without sizes
    or cycles."""
    empty = pd.DataFrame({c: pd.Series(dtype="float64" if "per_cycle" in c else "int64") for c in BYTES_COLUMNS})
    if sized is None or sized.empty or cycles is None or cycles.empty or ranks is None or ranks.empty:
        return empty
    key = ranks.assign(input=ranks["input"].astype(str))[["global_pid", "input", "rank"]]
    s = sized.assign(global_pid=sized["global_tid"].to_numpy(dtype="int64") & ~np.int64(0xFFFFFF),
                     input=sized["input"].astype(str))
    s = s.merge(key, on=["global_pid", "input"], how="inner")
    st = steady(cycles)
    rows = []
    for rank, c in st.groupby("rank", sort=True):
        mine = s[s["rank"] == rank]
        c = c.sort_values(["cpu_start_ns", "cycle"], kind="stable")
        inside = cycle_at(mine["start_ns"].to_numpy(dtype="int64"), c["cycle"].to_numpy(dtype="int64"),
                          c["cpu_start_ns"].to_numpy(dtype="int64"), c["cpu_end_ns"].to_numpy(dtype="int64")) >= 0
        b = mine["message_bytes"].to_numpy(dtype="int64")[inside]
        if not len(b):      # no sized range in its steady cycles (e.g. NCCL calls captured in CUDA graphs,
            continue        # seen only at capture): not measured, not zero
        n = len(c)
        rows.append([int(rank), n, len(b) / n, float(b.sum()) / n, int(b.min()), int(b.max())])
    out = pd.DataFrame(rows, columns=BYTES_COLUMNS)
    return out.astype({"message_bytes_min": "Int64", "message_bytes_max": "Int64"})
