"""Launch gaps: the GPU idle between consecutive ops inside decode cycles, what advise's host-bound
and draft_extend rules cite (gaps above :data:`LAUNCH_GAP_NS` per cycle, the median gap, the share
of the ops that are CUDA graph nodes or graph launches).

An op counts when its launching call lies inside a ``decode_cycle`` range and its start falls in a
steady cycle's GPU window on its rank (:func:`cycle_at`); per (rank, cycle), in start order, the gap
before an op is its start minus the latest end so far, at least 0 (ops that start together give 0
in either order, so ties need no order). The figures are sums, counts and a median, kept in
:class:`GapStats` so that they add up over parts: a rank at a time (advise over the per-op table),
or chunk by chunk (:class:`GapStream`, the map step of a report analysed in chunks, which keeps no
per-op table) and report by report; the median is exact (a count per gap below
:data:`SMALL_GAP_NS` ns, the larger gaps kept as values).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyze.attribute import intervals

LAUNCH_GAP_NS = 5_000           # a gap longer than this is a launch gap (host time between ops)
SMALL_GAP_NS = 1 << 16          # gaps below this are counted per value, larger ones kept


def graph_marks(is_graph_launch: np.ndarray, is_graph_node: np.ndarray) -> np.ndarray:
    """Per op (int8), 0-2: one for a CUDA graph node, one for a graph launch (what the graph-ops
    share counts)."""
    return is_graph_launch.astype("int8") + is_graph_node


def rank_windows(cycles: pd.DataFrame) -> list[tuple]:
    """Per rank of ``cycles``: (rank, cycle ids, GPU window starts, window ends), sorted by start."""
    out = []
    for r, c in cycles.groupby("rank"):
        c = c.sort_values("start_ns")
        out.append((r, c["cycle"].to_numpy(dtype="int64"), c["start_ns"].to_numpy(dtype="int64"),
                    c["end_ns"].to_numpy(dtype="int64")))
    return out


def cycle_at(start: np.ndarray, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per start, the id of the last window (sorted by start ``lo``) starting at or before it, if
    its end ``hi`` is not before the start; else -1."""
    pos = np.searchsorted(lo, start, side="right") - 1
    ok = (pos >= 0) & (start <= hi[np.clip(pos, 0, None)])
    return np.where(ok, ids[np.clip(pos, 0, None)], -1)


def gaps_in_group_order(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per group (rows ordered by group code, then start), the gap before each op but the group's
    first: its start minus the latest end so far in the group, at least 0, as float64."""
    new = np.r_[True, g[1:] != g[:-1]]
    reach = intervals.segmented_running_max(e, new)     # the latest end so far in the group
    same = ~new[1:]
    return np.maximum(s[1:][same] - reach[:-1][same], 0).astype("float64")


@dataclass
class GapStats:
    """The launch-gap figures' parts, added up over ranks, chunks and reports."""

    ops: int = 0                    # ops in steady cycles
    graph_marks: int = 0            # of them, graph nodes plus graph launches (an op may count twice)
    launch_gaps: int = 0            # gaps > LAUNCH_GAP_NS
    launch_gap_ns: float = 0.0      # their sum (whole ns: exact in float64)
    # every gap, for the median: a count per value below SMALL_GAP_NS, the larger gaps themselves
    small_counts: np.ndarray = field(default_factory=lambda: np.zeros(SMALL_GAP_NS, dtype="int64"))
    large_gaps: list = field(default_factory=list)

    def add(self, gaps: np.ndarray, ops: int, graph_marks: int) -> None:
        """``ops`` more ops (``graph_marks`` marks among them) and their ``gaps`` (float64 ns)."""
        self.ops += int(ops)
        self.graph_marks += int(graph_marks)
        launch = gaps[gaps > LAUNCH_GAP_NS]
        self.launch_gaps += len(launch)
        self.launch_gap_ns += float(launch.sum())
        small = gaps < SMALL_GAP_NS
        counts = np.bincount(gaps[small].astype("int64"))     # up to the largest small gap: no 64k array
        self.small_counts[:len(counts)] += counts
        if not small.all():
            self.large_gaps.append(gaps[~small])

    def merge(self, other: "GapStats") -> "GapStats":
        """``other``'s ops and gaps added to these (in place); returns self."""
        self.ops += other.ops
        self.graph_marks += other.graph_marks
        self.launch_gaps += other.launch_gaps
        self.launch_gap_ns += other.launch_gap_ns
        self.small_counts += other.small_counts
        self.large_gaps += other.large_gaps
        return self

    def median_ns(self) -> float:
        """The median of every gap added (``np.median`` of them all), 0.0 without gaps."""
        n_small = int(self.small_counts.sum())
        large = np.sort(np.concatenate(self.large_gaps)) if self.large_gaps else np.zeros(0, dtype="float64")
        n = n_small + len(large)
        if not n:
            return 0.0
        cum = np.cumsum(self.small_counts)

        def kth(k: int) -> float:
            return float(np.searchsorted(cum, k, side="right")) if k < n_small else float(large[k - n_small])

        return (kth((n - 1) // 2) + kth(n // 2)) / 2

    def figures(self, n_cycles: int) -> dict:
        """advise's evidence: launch gaps and their time per cycle (``n_cycles``: the steady cycles'
        rows, all ranks), the median gap, the graph ops' share, ops per cycle; {} without ops."""
        if not self.ops:
            return {}
        n = max(n_cycles, 1)
        return {"launch_gaps_per_cycle": self.launch_gaps / n, "launch_gap_per_cycle_ns": self.launch_gap_ns / n,
                "median_gap_ns": self.median_ns(), "graph_ops_share": self.graph_marks / self.ops,
                "ops_per_cycle": self.ops / n}


class GapStream:
    """:class:`GapStats` of ops fed a rank at a time in start order, chunk by chunk (a rank's chunks
    in time order): per rank the cycle and the latest end of the last op fed are carried over, so a
    cycle split between chunks gives the gaps it gives whole."""

    def __init__(self, cycles: pd.DataFrame):
        self.windows = {int(r): (ids, lo, hi) for r, ids, lo, hi in rank_windows(cycles)}
        self.carry: dict[int, tuple[int, int]] = {}     # rank -> (cycle of its last op, latest end in it)
        self.stats = GapStats()

    def feed(self, rank: int, start: np.ndarray, end: np.ndarray, graph_marks: np.ndarray) -> None:
        """Ops of ``rank`` launched inside cycle ranges, in start order, later than any fed before
        on the rank; ``graph_marks``: per op 0-2 (a graph node, a graph launch)."""
        w = self.windows.get(int(rank))
        if w is None or not len(start):
            return
        cycle = cycle_at(start, *w)
        kept = np.flatnonzero(cycle >= 0)
        if not len(kept):
            return
        g, s, e = cycle[kept], start[kept], end[kept]
        carry = self.carry.get(int(rank))
        if carry is not None:              # the last op fed, as a zero-length op at its group's reach
            g, s, e = np.r_[carry[0], g], np.r_[carry[1], s], np.r_[carry[1], e]
        self.stats.add(gaps_in_group_order(g, s, e), len(kept), int(graph_marks[kept].sum()))
        last = g[-1]
        tail = len(g) - int(np.argmax(g[::-1] != last)) if (g != last).any() else 0
        self.carry[int(rank)] = (int(last), int(e[tail:].max()))
