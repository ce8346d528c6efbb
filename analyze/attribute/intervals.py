"""Interval arithmetic on NumPy arrays of [start, end) nanosecond intervals."""
from __future__ import annotations

import numpy as np


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of intervals (any order, overlaps allowed)."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s = start[order].astype("int64")
    e = end[order].astype("int64")
    reach = np.maximum.accumulate(e)
    prev = np.empty_like(reach)
    prev[0] = s[0]
    prev[1:] = reach[:-1]
    return int(np.maximum(0, e - np.maximum(s, prev)).sum())


def sorted_union_length(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """Union length per group for intervals already sorted by (group, start): no sort, one pass."""
    out = np.zeros(n_groups, dtype="int64")
    if len(start) == 0:
        return out
    runs = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
    if len(runs) <= FEW_GROUPS:
        # few groups (ranks): a plain pass per group, no group-offset temporaries
        bounds = np.r_[runs, len(start)]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            out[int(group[a])] += segment_union_length(start[a:b], end[a:b])
        return out
    g = group.astype("int64", copy=False)
    first = np.r_[True, g[1:] != g[:-1]]
    base = int(start.min())
    span = int(end.max() - base + 1)
    shifted = (end - base) + g * span
    reach = np.maximum.accumulate(shifted) - g * span + base
    prev = np.empty_like(reach)
    prev[1:] = reach[:-1]
    prev[first] = start[first]
    contrib = np.maximum(0, end - np.maximum(start, prev))
    return grouped_sum(g, contrib, n_groups, runs=np.flatnonzero(first))


FEW_GROUPS = 64


def segment_union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Union length of intervals sorted by start (one group)."""
    if len(start) == 0:
        return 0
    reach = np.maximum.accumulate(end)
    lower = np.empty_like(reach)
    lower[0] = start[0]
    np.maximum(start[1:], reach[:-1], out=lower[1:])
    np.subtract(end, lower, out=lower)
    np.maximum(lower, 0, out=lower)
    return int(lower.sum())


def grouped_sum(group: np.ndarray, values: np.ndarray, n_groups: int, runs: np.ndarray | None = None) -> np.ndarray:
    """Exact int64 sum of ``values`` per group id; ``group`` must be non-decreasing (runs = run starts)."""
    out = np.zeros(n_groups, dtype="int64")
    if len(values) == 0:
        return out
    if runs is None:
        runs = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
    out[group[runs]] = np.add.reduceat(values.astype("int64", copy=False), runs)
    return out


def clip(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.clip(start, lo, hi)
    e = np.clip(end, lo, hi)
    return s, e


INT64_MIN = np.iinfo(np.int64).min


def union_step(group: np.ndarray, start: np.ndarray, end: np.ndarray, reach: np.ndarray,
               total: np.ndarray) -> None:
    """Stream intervals into per-group union lengths: ``total[g]`` (union length so far) and
    ``reach[g]`` (largest end so far, INT64_MIN for none) are updated in place.

    The intervals come sorted by (group, start), and every start is at or after every start already
    streamed into its group (chunks in time order): then the part of an interval not yet covered is
    ``end - max(start, running max end)``, so chunk by chunk gives exactly :func:`union_length` of
    all intervals at once."""
    if not len(start):
        return
    first = np.r_[True, group[1:] != group[:-1]]
    runs = np.flatnonzero(first)
    seg = np.cumsum(first) - 1                     # segment index: small, monotone
    base = int(min(start.min(), end.min()))
    span = int(end.max()) - base + 1
    if span * len(runs) < 2 ** 62:
        # running max of end within each segment (segments lifted apart), exclusive of the element
        lifted = (end - base) + seg * span
        within = np.maximum.accumulate(lifted) - seg * span + base
    else:                                          # huge spans: one pass per segment
        within = np.empty_like(end)
        for a, b in zip(runs.tolist(), np.r_[runs[1:], len(end)].tolist()):
            within[a:b] = np.maximum.accumulate(end[a:b])
    prev = np.empty_like(within)
    prev[1:] = within[:-1]
    prev[first] = INT64_MIN
    seed = reach[group]
    np.maximum(prev, seed, out=prev)
    contrib = end - np.maximum(start, prev)
    np.maximum(contrib, 0, out=contrib)
    g = group[runs]
    total[g] += np.add.reduceat(contrib, runs)
    last = np.r_[runs[1:], len(end)] - 1
    reach[g] = np.maximum(reach[g], within[last])
