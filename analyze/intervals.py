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


def grouped_union_length(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """Union length per group id (0..n_groups-1) in one vectorised pass."""
    out = np.zeros(n_groups, dtype="int64")
    if len(start) == 0:
        return out
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order].astype("int64"), end[order].astype("int64")
    first = np.r_[True, g[1:] != g[:-1]]
    # running max of ends that restarts at each group: offset each group far apart
    span = int(e.max() - s.min() + 1)
    base = int(s.min())
    shifted = (e - base) + g.astype("int64") * span
    reach = np.maximum.accumulate(shifted) - g.astype("int64") * span + base
    prev = np.empty_like(reach)
    prev[1:] = reach[:-1]
    prev[first] = s[first]
    contrib = np.maximum(0, e - np.maximum(s, prev))
    np.add.at(out, g, contrib)
    return out


def clip(start: np.ndarray, end: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    s = np.clip(start, lo, hi)
    e = np.clip(end, lo, hi)
    return s, e
