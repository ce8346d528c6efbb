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


def segmented_running_max(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """The running max of ``values`` within each segment, a segment starting where ``first`` is
    True (``first[0]`` must be): one ``np.maximum.accumulate`` with the segments lifted apart,
    where the lifted values fit 64 bits; else one pass per segment."""
    if not len(values):
        return values.astype("int64")
    seg = np.cumsum(first) - 1                     # segment index: small, monotone
    base = int(values.min())
    span = int(values.max()) - base + 1
    if (int(seg[-1]) + 1) * span < 2 ** 62:
        lift = seg * span
        return np.maximum.accumulate((values - base) + lift) - lift + base
    out = np.empty(len(values), dtype="int64")     # huge spans: one pass per segment
    runs = np.flatnonzero(first)
    for a, b in zip(runs.tolist(), np.r_[runs[1:], len(values)].tolist()):
        out[a:b] = np.maximum.accumulate(values[a:b])
    return out


FEW_GROUPS = 64      # up to this many groups (ranks), unions walk the groups one by one
# (issue 42, 2026-12-05: whole-array passes for 8 ranks: sglang_k1000000 1.085x wall, 1.117x peak; synth 1.06x, 1.08x)


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
    within = segmented_running_max(end, first)      # running max of end within each group
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


def group_segments(group: np.ndarray) -> list[tuple[int, int, int]]:
    """(group, first, stop) of every run of equal ``group`` values (``group`` sorted or at least in
    runs): the segments :func:`union_step_segments` and per-group sums walk."""
    if not len(group):
        return []
    runs = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
    return list(zip(group[runs].tolist(), runs.tolist(), np.r_[runs[1:], len(group)].tolist()))


def union_step_segments(segments: list[tuple[int, int, int]], group: np.ndarray, start: np.ndarray,
                        end: np.ndarray, reach: np.ndarray, total: np.ndarray, mask: np.ndarray | None = None) -> None:
    """:func:`union_step` of the intervals ``mask`` selects, the arrays sorted by (group, start) and
    cut into ``segments`` (:func:`group_segments`). With few groups (ranks) it walks the segments,
    masking each in place of compressing the whole arrays; with many it is :func:`union_step`."""
    if len(segments) > FEW_GROUPS:
        if mask is None:
            union_step(group, start, end, reach, total)
        else:
            union_step(group[mask], start[mask], end[mask], reach, total)
        return
    for g, a, b in segments:
        s, e = start[a:b], end[a:b]
        if mask is not None:
            m = mask[a:b]
            s, e = s[m], e[m]
        if not len(s):
            continue
        seed = reach[g]
        running = np.maximum.accumulate(e)
        lower = np.empty_like(running)
        lower[0] = seed
        np.maximum(running[:-1], seed, out=lower[1:])
        np.maximum(lower, s, out=lower)
        np.subtract(e, lower, out=lower)
        np.maximum(lower, 0, out=lower)
        total[g] += int(lower.sum())
        reach[g] = max(int(seed), int(running[-1]))


def segment_duration_sums(segments: list[tuple[int, int, int]], start: np.ndarray, end: np.ndarray, n_groups: int,
                          mask: np.ndarray | None = None) -> np.ndarray:
    """:func:`segment_sums` of ``end - start`` without the full-size difference: with few groups
    it is taken one segment at a time (a large report's op arrays are the analysis' peak)."""
    if len(segments) > FEW_GROUPS:
        return segment_sums(segments, end - start, n_groups, mask)
    out = np.zeros(n_groups, dtype="int64")
    for g, a, b in segments:
        d = end[a:b] - start[a:b]
        out[g] += int(d.sum(where=mask[a:b])) if mask is not None else int(d.sum())
    return out


def segment_sums(segments: list[tuple[int, int, int]], values: np.ndarray, n_groups: int,
                 mask: np.ndarray | None = None) -> np.ndarray:
    """Exact int64 sum of ``values`` (where ``mask``) per group, over :func:`group_segments`."""
    out = np.zeros(n_groups, dtype="int64")
    if len(segments) > FEW_GROUPS:
        runs = np.array([a for _, a, _ in segments], dtype="int64")
        groups = np.array([g for g, _, _ in segments], dtype="int64")
        v = values if mask is None else np.where(mask, values, 0)
        np.add.at(out, groups, np.add.reduceat(v.astype("int64", copy=False), runs))
        return out
    for g, a, b in segments:
        out[g] += int(values[a:b].sum(where=mask[a:b])) if mask is not None else int(values[a:b].sum())
    return out
