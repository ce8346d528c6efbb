"""Launch gaps: the GPU idle between consecutive ops inside decode cycles, what advise's host-bound
and draft_extend rules cite (gaps above :data:`LAUNCH_GAP_NS` per cycle, the median gap, the share
of the ops that are CUDA graph nodes or graph launches): the one definition, whichever way the ops
come.

An op counts when its launching call lies inside a ``decode_cycle`` range and its start falls in a
steady cycle's GPU window on its rank (``analyze.timeline.cycles.cycle_at``: the one op -> cycle rule); per (rank, cycle), in start order, the gap
before an op is its start minus the latest end so far, at least 0 (ops that start together give 0
in either order, so ties need no order). The figures are sums, counts and a median, kept in
:class:`GapStats` so that they add up over parts: from a per-op table a rank at a time
(:func:`stats_from_op_table`), or chunk by chunk (:class:`GapStream`: the spilled ops of a report
analysed in chunks, which keeps no per-op table), and report by report (:func:`stats_of_store`, what
advise reads, takes the one or the other as the op store holds them); the median is exact (a count per gap below
:data:`SMALL_GAP_NS` ns, the larger gaps kept as values).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

from analyze.attribute import attribution, intervals
from analyze.timeline.cycles import cycle_at, cycle_of_arrays, rank_windows  # noqa: F401 (op -> cycle)

LAUNCH_GAP_NS = 5_000           # a gap longer than this is a launch gap (host time between ops)
SMALL_GAP_NS = 1 << 16          # gaps below this are counted per value, larger ones kept


def graph_marks(is_graph_launch: np.ndarray, is_graph_node: np.ndarray) -> np.ndarray:
    """Per op (int8), 0-2: one for a CUDA graph node, one for a graph launch (what the graph-ops
    share counts)."""
    return is_graph_launch.astype("int8") + is_graph_node


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


def stats_from_op_table(ops: pd.DataFrame | None, cycles: pd.DataFrame) -> GapStats:
    """:class:`GapStats` of a per-op table's ops in ``cycles`` (the steady cycles), a rank at a time."""
    stats = GapStats()
    if ops is None or ops.empty or "cycle_range" not in ops.columns or cycles.empty:
        return stats
    inside = ops["cycle_range"].to_numpy() >= 0
    rank = ops["rank"].to_numpy()                                  # its own integer type (int32)
    if rank.dtype.kind not in "iu":
        rank = rank.astype("int64")
    start = ops["start_ns"].to_numpy(dtype="int64")                # the columns, not copies of them
    end = ops["end_ns"].to_numpy(dtype="int64")
    pieces = cycle_gaps_in_start_order(rank, start, end, cycles, keep=inside)
    if pieces is None:                        # cycle ids not in start order on some rank: sort by cycle
        at = np.flatnonzero(inside)
        rank, start = rank[at].astype("int64"), start[at]
        cycle = cycle_of_arrays(rank, start, cycles)
        keep = np.flatnonzero(cycle >= 0)
        pieces = [(at[keep], op_gaps(rank[keep], cycle[keep], start[keep], end[at[keep]]))]
    del rank, start, end, inside
    graph = op_graph_marks(ops)
    for rows, gaps in pieces:                 # a rank at a time: no full-size rows or gaps
        stats.add(gaps, len(rows), int(graph[rows].sum()) if graph is not None else 0)
    return stats


def stats_of_store(ops, cycles: pd.DataFrame) -> GapStats:
    """:class:`GapStats` of the ops of an op store (:mod:`analyze.opstore`) in ``cycles`` (the steady
    cycles): its per-op table at once where it is held in memory (:func:`stats_from_op_table`), else
    a rank at a time, part by part in time order (:class:`GapStream`: bounded memory)."""
    frame = ops.frame
    if frame is not None:
        return stats_from_op_table(frame, cycles)
    stream = GapStream(cycles)
    if not stream.windows:
        return stream.stats
    for part in ops.scan(["rank", "start_ns", "end_ns", "kind", "graph_node"], ranks=sorted(stream.windows),
                         in_cycles=True):
        stream.feed(int(part["rank"].iloc[0]), part["start_ns"].to_numpy(), part["end_ns"].to_numpy(),
                    graph_marks((part["kind"] == "graph").to_numpy(), part["graph_node"].to_numpy()))
    return stream.stats


def op_graph_marks(ops: pd.DataFrame) -> np.ndarray | None:
    """Per op, launch_gaps.graph_marks from the per-op table's columns; None when it has neither."""
    if "graph_node_id" not in ops.columns and "kind" not in ops.columns:
        return None
    node = ops["graph_node_id"].notna().to_numpy() if "graph_node_id" in ops.columns else np.zeros(len(ops), bool)
    launch = (ops["kind"] == "graph").to_numpy() if "kind" in ops.columns else np.zeros(len(ops), bool)
    return graph_marks(launch, node)


def cycle_gaps_in_start_order(rank: np.ndarray, start: np.ndarray, end: np.ndarray, cycles: pd.DataFrame,
                              keep: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]] | None:
    """:func:`cycle_of_arrays`, then :func:`op_gaps` of the rows in a cycle, with one sort by (rank,
    start) instead of a sort by (rank, cycle, start), a rank at a time: per rank with cycles, in
    rank order, (its rows in a cycle, as positions in the arrays given, in start order; their
    gaps). Concatenated, equal element for element to op_gaps'. Where a rank's cycles sorted by
    start have increasing ids, a row's cycle never goes back as its start grows, so the (rank,
    start) order of the rows in a cycle is op_gaps' (rank, cycle, start) order, ties kept in the
    order given by both; within a rank the group is the cycle. After the one sort each rank's
    temporaries are made from its slice (an eighth of the rows' on 8 ranks: at 10M ops full-size
    ones cost more in fresh pages than in arithmetic). ``keep``: where given, only the rows it
    marks count (the others sort after every rank's, so the arrays need not be gathered first).
    None where some rank's ids do not increase, or the ranks span 2**62 or more (the caller then
    takes the two functions). The ranks are integers of any width (the per-op table's are int32)."""
    if not len(start) or cycles.empty:
        return iter(())
    r_lo = int(rank.min())
    span = int(rank.max()) - r_lo
    if span >= 2 ** 62:                             # rank - r_lo would wrap (no real trace's ranks)
        return None
    per_rank = rank_windows(cycles)                     # as cycle_of_arrays sorts them
    if any((ids[1:] <= ids[:-1]).any() for _, ids, _, _ in per_rank):   # before any sort of the ops
        return None
    # in the ranks' own integer type (int32) where the span and one code past it fit, else in int64
    code = rank - r_lo if span < np.iinfo(rank.dtype).max else rank.astype("int64") - r_lo
    if keep is not None:
        np.copyto(code, span + 1, where=~keep)          # rows left out: after every rank
    order = attribution.sort_order(code, start)
    # the ranks with rows (a code past the span would be the left-out rows')
    with_rows = [(r - r_lo, *w) for r, *w in per_rank if 0 <= r - r_lo <= span]
    return _gaps_of_each_rank(order, code[order], with_rows, start, end)


def _gaps_of_each_rank(order: np.ndarray, code_sorted: np.ndarray, per_rank: list[tuple], start: np.ndarray,
                       end: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for code, ids, lo, hi in per_rank:
        code = np.int64(code)                            # compared with the codes' type, whatever it is
        a, b = int(np.searchsorted(code_sorted, code, side="left")), int(np.searchsorted(code_sorted, code, side="right"))
        at = order[a:b]                                  # the rank's rows in start order
        s = start[at]
        cycle = cycle_at(s, ids, lo, hi)
        kept = np.flatnonzero(cycle >= 0)
        at = at[kept]
        yield at, gaps_in_group_order(cycle[kept], s[kept], end[at])


def op_gaps(rank: np.ndarray, cycle: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per (rank, cycle), the ops in (start, then given) order: the gap from the latest end so far to
    the next op's start, at least 0, as float64 in that order (what pandas' sort by rank, cycle and
    start, then a grouped ``cummax`` of ends and ``shift(-1)`` of starts give; tests check it)."""
    if not len(start):
        return np.zeros(0, dtype="float64")
    group = _group_codes(rank, cycle)
    order = attribution.sort_order(group, start)
    return gaps_in_group_order(group[order], start[order], end[order])


def _group_codes(rank: np.ndarray, cycle: np.ndarray) -> np.ndarray:
    """One code per (rank, cycle), ascending with (rank, cycle)."""
    c_lo = int(cycle.min())
    n_cyc = int(cycle.max()) - c_lo + 1
    return (rank - int(rank.min())) * n_cyc + (cycle - c_lo)
