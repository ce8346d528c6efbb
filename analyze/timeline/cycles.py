"""The decode-cycle timeline: per cycle and rank, where its GPU time went.

A cycle is an outermost NVTX range named like ``decode_cycle`` (config ``cycle_ranges``). GPU ops
belong to the cycle whose range encloses their launching call. Per cycle: its GPU window (first to
last op it launched) split into exclusive GPU time per phase (same rule as per rank) and
``gap_ns`` (GPU idle between the cycle's first and last op: launch-bound time); its GPU period
(its GPU start to the next cycle's on the rank) split into ``period_<phase>_ns``,
``period_other_ns`` and ``period_idle_ns``, which add up to ``gpu_period_ns`` exactly; accepted
tokens from the shim's ``accept_len=N`` marks, tokens per second over the cycle's wall time; and
``warmup`` / ``warmup_reason`` (:data:`WARMUP_REASONS`) for the cycles steady-state figures leave
out. The ops are streamed into per-interval unions chunk by chunk (:class:`IntervalSplit`). A mark with ``cycle=K`` belongs to the cycle
range of the same process whose int64 payload is K (SGLang's v2 workers resolve accept lengths
after the cycle's range closed); a mark without it to the cycle range that contains it
(nvtx_annotate.protocol).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze.attribute.intervals import INT64_MIN
from analyze.attribute.phases import OTHER, PhaseConfig
from analyze.codes import factorize_objects
from analyze.project import projection as proj
from nvtx_annotate.protocol import ACCEPT_MARK_RE as ACCEPT_MARK  # accept_len=N reqs=M [cycle=K] [lens=...]
from nvtx_annotate.protocol import parse_accept_mark, parse_steps_mark


def cycle_ranges(ranges: pd.DataFrame, config: PhaseConfig) -> pd.DataFrame:
    """Outermost cycle ranges (a cycle pushed in two domains counts once)."""
    sel = ranges[ranges["name"].isin(config.cycle_ranges)]
    if sel.empty:
        return sel
    tid = sel["global_tid"].to_numpy(dtype="int64")
    _, tidx = np.unique(tid, return_inverse=True)
    levels = proj.nesting_levels(tidx.astype("int64"), sel["start_ns"].to_numpy(dtype="int64"),
                                 sel["end_ns"].to_numpy(dtype="int64"))
    return sel[levels == 0]


def cycle_of_calls(ranges: pd.DataFrame, index: proj.CallIndex, config: PhaseConfig,
                   top: pd.DataFrame | None = None, layout=None) -> np.ndarray | None:
    """Per sorted API call, the id (row label in ``ranges``) of the cycle range enclosing it, else
    -1; None when there are no cycle ranges (``top``: :func:`cycle_ranges` when the caller has it)."""
    top = cycle_ranges(ranges, config) if top is None else top
    if top.empty:
        return None
    lo, hi, exact, end_key, start_key = proj.subset_blocks(index, ranges, top, layout)
    labels = top.index.to_numpy(dtype="int64")
    label_t = "int32" if labels.max() < 2 ** 31 - 1 else "int64"     # held per call: narrow when it fits
    return proj.paint_blocks(len(index.key), lo, hi, np.zeros(len(top), dtype="int64"), exact,
                             labels, (index.end_key, end_key), dtype=label_t, start_key=start_key)


def cycle_windows(owner: np.ndarray | None, has: np.ndarray, first: np.ndarray,
                  last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cycle range id, first op start, last op end) of every cycle that launched GPU work, from
    the per-call spans over all op kinds (projection.update_call_span_pairs): the same window as the
    min/max over the cycle's ops, on the calls (a few per op) instead of the ops."""
    if owner is None:
        z = np.zeros(0, dtype="int64")
        return z, z, z
    sel = np.flatnonzero((owner >= 0) & (has > 0))
    o = owner[sel]
    srt = np.argsort(o, kind="stable")
    o = o[srt]
    if not len(o):
        z = np.zeros(0, dtype="int64")
        return z, z, z
    run = np.r_[0, np.flatnonzero(o[1:] != o[:-1]) + 1]
    return (o[run].astype("int64"), np.minimum.reduceat(first[sel][srt], run),
            np.maximum.reduceat(last[sel][srt], run))


COLUMNS = ["rank", "cycle", "start_ns", "end_ns", "duration_ns", "cpu_start_ns", "cpu_end_ns", "period_ns",
           "busy_ns", "gap_ns", "accepted_tokens", "requests", "accept_lengths", "tokens", "tokens_per_s",
           "host_wait_ns", "launch_excess_ns", "steps"]
# steps: the step count the cycle ran where the shim marked it (``spec_steps=S cycle=K``: a process SGLang
# runs with --speculative-adaptive; a live log's own column), else NA (the process's spec_config holds it)
# host_wait_ns: the time in synchronize calls (SYNC_CALL_PREFIXES) in the cycle's host period, outside every
# phase range: the scheduler waiting for the GPU (SGLang: one cudaEventSynchronize a cycle, after the
# cycle's range), host time that is no host work (NA where the report has no API calls)
# launch_excess_ns: over the CUDA graph launches of the cycle's host period, each launch's duration beyond the
# fastest launch in the report (all its processes): mostly what tracing added to the host's time (nsys' node-level graph
# tracing made a cudaGraphLaunch take ~0.5 ms where its fastest took 22 us, H100, 2026-12-06; a launch may also
# block on a full GPU queue, and graphs differ in their own launch cost; NA as host_wait_ns)
# the cycle's GPU period: its GPU start to the next cycle's GPU start on the rank (the last cycle of a
# rank: its own window end), split into phases, other GPU work and GPU idle (period_<phase>_ns ...)
HOST_CALL_COLUMNS = ("host_wait_ns", "launch_excess_ns")
PERIOD_COLUMNS = ["gpu_period_start_ns", "gpu_period_end_ns", "gpu_period_ns"]
FLAG_COLUMNS = ["warmup", "warmup_reason"]

# why a cycle is left out of steady-state figures (``warmup_reason``; the first that applies, in
# this order of precedence, is given)
NO_GPU_OPS = "no_gpu_ops"          # after the rank's last cycle with GPU ops: nsys lost its CUDA data
TRUNCATED = "truncated"            # the rank's last cycle with GPU ops when no_gpu_ops cycles follow it
GRAPH_CAPTURE = "graph_capture"    # a CUDA graph was captured inside the cycle's range
FIRST = "first"                    # the rank's first cycle
OUTLIER = "outlier"                # GPU period over OUTLIER_FACTOR x the median GPU period of the rank's
#                                    cycles of the same batch size (requests; a cycle's cost grows with it;
#                                    all its cycles where the batch size is rare)
WARMUP_REASONS = (NO_GPU_OPS, TRUNCATED, GRAPH_CAPTURE, FIRST, OUTLIER)
LOST_REASONS = (NO_GPU_OPS, TRUNCATED)
"""The reasons of cycles whose GPU data was lost (no warm-up: counted apart in the report)."""
OUTLIER_FACTOR = 5
# a batch size seen in fewer cycles than this (requests arriving or finishing one by one) is judged
# against the rank's median over all its cycles instead
OUTLIER_MIN_BATCH_CYCLES = 10
# the three kinds of cycles steady-state figures leave out (:func:`states`), apart from ``steady``
STEADY, WARMUP, LOST = "steady", "warmup", "lost"
STATES = (STEADY, WARMUP, LOST, OUTLIER)
# runtime/driver calls that capture a CUDA graph (names carry version suffixes: matched by prefix)
CAPTURE_CALL_PREFIXES = ("cudaStreamBeginCapture", "cudaGraphInstantiate", "cudaStreamEndCapture",
                         "cuStreamBeginCapture", "cuGraphInstantiate", "cuStreamEndCapture")
# runtime/driver calls that block the host until GPU work is done (names carry version suffixes)
SYNC_CALL_PREFIXES = ("cudaEventSynchronize", "cudaStreamSynchronize", "cudaDeviceSynchronize",
                      "cuEventSynchronize", "cuStreamSynchronize", "cuCtxSynchronize")
# CUDA graph launches (the map step prepares every one, with its ops or without: run/launches.needed_calls)
GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch")


def columns(config: PhaseConfig) -> list[str]:
    """The cycle table's columns, in order."""
    names = list(config.names) + [OTHER]
    return (COLUMNS[:9] + [f"{p}_ns" for p in names] + COLUMNS[9:] + PERIOD_COLUMNS
            + [f"period_{p}_ns" for p in names] + ["period_idle_ns"] + FLAG_COLUMNS)


def empty_table(config: PhaseConfig) -> pd.DataFrame:
    """The cycle table of a report without decode cycles."""
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns(config)})


def capture_name_ids(strings: pd.Series) -> np.ndarray:
    """The string ids of the CUDA graph capture calls' names (CAPTURE_CALL_PREFIXES)."""
    return _name_ids(strings, CAPTURE_CALL_PREFIXES)


def graph_launch_name_ids(strings: pd.Series) -> np.ndarray:
    """The string ids of the CUDA graph launches' names (GRAPH_LAUNCH_PREFIXES)."""
    return _name_ids(strings, GRAPH_LAUNCH_PREFIXES)


def sync_name_ids(strings: pd.Series) -> np.ndarray:
    """The string ids of the synchronize calls' names (SYNC_CALL_PREFIXES)."""
    return _name_ids(strings, SYNC_CALL_PREFIXES)


def _name_ids(strings: pd.Series, prefixes: tuple) -> np.ndarray:
    if strings.empty:
        return np.zeros(0, dtype="int64")
    texts = strings.to_numpy(dtype=object)
    hit = np.array([isinstance(t, str) and t.startswith(prefixes) for t in texts], dtype=bool)
    return strings.index.to_numpy(dtype="int64")[hit]


def host_wait_by_cycle(call_name_id: np.ndarray, call_tid: np.ndarray, call_start_ns: np.ndarray,
                       call_end_ns: np.ndarray, phase_owner: np.ndarray, cycle_ranges: pd.DataFrame,
                       strings: pd.Series) -> pd.Series:
    """Per cycle range id: the summed duration of the synchronize calls in its host period (its range's
    start to the next cycle range's start on its thread: SGLang waits for the GPU after the cycle's
    range, in the scheduler's result processing; another thread's waits are not the scheduler's)
    outside every phase range. The call arrays: one entry per call; ``phase_owner``: the innermost phase
    range id, -1 none; ``cycle_ranges``: the outermost cycle ranges (range id as index; global_tid,
    start_ns). Cycles without such a call are absent."""
    empty = pd.Series(dtype="int64")
    if not len(call_name_id) or strings.empty or cycle_ranges is None or not len(cycle_ranges):
        return empty
    ids = sync_name_ids(strings)
    hit = np.isin(call_name_id, ids) & (np.asarray(phase_owner) < 0) if len(ids) else np.zeros(0, dtype=bool)
    if not hit.any():
        return empty
    start = np.asarray(call_start_ns, dtype="int64")[hit]
    dur = np.asarray(call_end_ns, dtype="int64")[hit] - start
    return _sum_by_cycle(np.asarray(call_tid, dtype="int64")[hit], start, dur, cycle_ranges)


def _sum_by_cycle(tid: np.ndarray, start: np.ndarray, values: np.ndarray, cycle_ranges: pd.DataFrame) -> pd.Series:
    """Per cycle range id, the sum of ``values`` of the calls in its host period: each call falls to the last
    cycle start at or before it on its thread (``cycle_ranges``: range id as index; global_tid, start_ns)."""
    empty = pd.Series(dtype="int64")
    cyc = cycle_ranges.sort_values(["global_tid", "start_ns"], kind="stable")
    c_tid = cyc["global_tid"].to_numpy(dtype="int64")
    c_start = cyc["start_ns"].to_numpy(dtype="int64")
    tids = np.unique(c_tid)
    if not len(tids):
        return empty
    t_of = np.searchsorted(tids, tid)
    ok = (t_of < len(tids)) & (tids[np.clip(t_of, 0, len(tids) - 1)] == tid)
    rows = np.full(len(tid), -1, dtype="int64")
    for k, t in enumerate(tids):
        at = np.flatnonzero(ok & (t_of == k))
        lo, hi = np.searchsorted(c_tid, t, "left"), np.searchsorted(c_tid, t, "right")
        r = np.searchsorted(c_start[lo:hi], start[at], side="right") - 1
        rows[at] = np.where(r >= 0, lo + r, -1)
    keep = rows >= 0
    return pd.Series(values[keep], index=cyc.index.to_numpy(dtype="int64")[rows[keep]]).groupby(level=0).sum()


def launch_excess_by_cycle(call_name_id: np.ndarray, call_tid: np.ndarray, call_start_ns: np.ndarray,
                           call_end_ns: np.ndarray, cycle_ranges: pd.DataFrame, strings: pd.Series) -> pd.Series:
    """Per cycle range id: over the CUDA graph launches in its host period (as :func:`host_wait_by_cycle`
    assigns calls, inside the phases too), each launch's duration beyond the fastest launch among the given calls
    (every process of the report, in cycles or not), summed (``launch_excess_ns``). Mostly what tracing added to
    the launches (nsys' node-level graph tracing: ~0.5 ms a launch where the fastest took 22 us on an H100); not a
    strict floor: a launch can also block on a full GPU queue, and graphs differ in their own launch cost. Cycles
    without a launch are absent."""
    empty = pd.Series(dtype="int64")
    if not len(call_name_id) or strings.empty or cycle_ranges is None or not len(cycle_ranges):
        return empty
    ids = graph_launch_name_ids(strings)
    hit = np.isin(call_name_id, ids) if len(ids) else np.zeros(len(call_name_id), dtype=bool)
    if not hit.any():
        return empty
    start = np.asarray(call_start_ns, dtype="int64")[hit]
    dur = np.asarray(call_end_ns, dtype="int64")[hit] - start
    return _sum_by_cycle(np.asarray(call_tid, dtype="int64")[hit], start, dur - dur.min(), cycle_ranges)


def capture_cycle_ids(call_name_id: np.ndarray, strings: pd.Series, cycle_owner: np.ndarray | None) -> np.ndarray:
    """Range ids of the cycles whose range encloses a CUDA graph capture call (``call_name_id``:
    the name string id of every call in sorted-call order; ``cycle_owner``: launches' per sorted
    call cycle range id, -1 none)."""
    if cycle_owner is None or not len(call_name_id) or strings.empty:
        return np.zeros(0, dtype="int64")
    ids = capture_name_ids(strings)
    if not len(ids):
        return np.zeros(0, dtype="int64")
    capturing = np.isin(call_name_id, ids)
    owner = cycle_owner[capturing]
    return np.unique(owner[owner >= 0].astype("int64"))


class CycleWindows(NamedTuple):
    """The cycles of the table and the intervals their GPU time is split over.

    ``cyc``: one row per cycle, in (rank, CPU start) order, numbered per rank (``cycle``): every
    outermost cycle range that launched GPU work, then (per rank) the cycle ranges after the last
    of those that launched none (nsys lost their CUDA data). ``has_gpu`` marks the first kind;
    for those rows ``lo``/``hi`` are the GPU window (first op start, last op end of the ops launched
    inside the range) and ``period_lo``/``period_hi`` the GPU period (this cycle's GPU start to the
    next one's on the rank, the rank's last: its window end; a cycle whose GPU work started before
    the previous one's starts its period there, so the periods of a rank never overlap)."""

    cyc: pd.DataFrame
    has_gpu: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    period_lo: np.ndarray
    period_hi: np.ndarray


def cycle_windows_of(ranges: pd.DataFrame, windows) -> CycleWindows | None:
    """:class:`CycleWindows` of one report from its labelled ranges (``is_cycle``, ``rank``,
    ``range_id``) and :func:`cycle_windows`' output; None without cycles that launched GPU work."""
    if "is_cycle" not in ranges.columns:
        return None
    is_cyc = ranges["is_cycle"].to_numpy(dtype=bool)
    if not is_cyc.any():
        return None
    cyc = ranges[is_cyc].sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    w_id, w_lo, w_hi = windows
    at = pd.Index(w_id).get_indexer(cyc["range_id"].to_numpy(dtype="int64"))
    has = at >= 0
    if not has.any():
        return None
    rank = cyc["rank"].to_numpy(dtype="int64")
    pos = np.arange(len(cyc))
    last_with_gpu = pd.Series(np.where(has, pos, -1)).groupby(rank).transform("max").to_numpy()
    keep = has | ((last_with_gpu >= 0) & (pos > last_with_gpu))
    cyc, has, at, rank = cyc[keep].reset_index(drop=True), has[keep], at[keep], rank[keep]
    cyc["cycle"] = cyc.groupby("rank").cumcount()
    lo = np.where(has, w_lo[np.maximum(at, 0)], 0).astype("int64")
    hi = np.where(has, w_hi[np.maximum(at, 0)], 0).astype("int64")
    period_lo, period_hi = np.zeros(len(cyc), dtype="int64"), np.zeros(len(cyc), dtype="int64")
    sel = np.flatnonzero(has)
    starts = pd.Series(lo[sel]).groupby(rank[sel]).cummax()
    ends = starts.groupby(rank[sel]).shift(-1)
    last = ends.isna().to_numpy()
    ends = ends.fillna(0).to_numpy(dtype="int64")
    starts = starts.to_numpy(dtype="int64")
    ends[last] = np.maximum(starts[last], hi[sel][last])
    period_lo[sel], period_hi[sel] = starts, ends
    return CycleWindows(cyc, has, lo, hi, period_lo, period_hi)


def default_window_cycles(cycles: pd.DataFrame) -> list[int]:
    """The cycles a timeline shows by default: two consecutive cycles starting at the one of median
    duration (its longest rank), cycle 0 left out of the median (usually warm-up)."""
    cycles = with_gpu(cycles)
    if cycles is None or cycles.empty:
        return []
    numbers = sorted(int(c) for c in cycles["cycle"].unique())
    per_cycle = cycles.groupby("cycle")["duration_ns"].max()
    steady = per_cycle.iloc[1:] if len(per_cycle) > 2 else per_cycle
    median = steady.median()
    first = int((steady - median).abs().idxmin())
    return [c for c in numbers if first <= c < first + 2]


def steady(cycles: pd.DataFrame, keep_outliers: bool = False, every_rank: bool = False) -> pd.DataFrame:
    """The steady cycles: the one definition the report, whatif, diff and advise use (rows with no
    :func:`left_out_reasons`; ``keep_outliers``: ``outlier`` rows kept too). ``every_rank``: only the
    cycle numbers steady on every rank (what a figure per cycle over ranks, or across ranks, reads:
    whatif, diff, advise; :func:`left_out_counts` counts the others)."""
    if cycles is None or cycles.empty:
        return cycles
    return cycles[steady_mask(cycles, keep_outliers, every_rank)]


MIN_CYCLES = 20
"""The fewest steady decode cycles a figure of one batch size rests on: whatif says a prediction from fewer is
one (``few_cycles``), ``--per-batch`` models no batch size with fewer, and a batch size with fewer is none the
load visits (:func:`visited_of`)."""

VISITED_SHARE = 0.10
"""A batch size the load *visits*: at least this share of the decode cycles (a batch of 7 while the
last requests of a batch of 8 finish is no bucket of its own)."""


def batch_counts(cycles: pd.DataFrame | None, timed_only: bool = False) -> pd.Series:
    """Steady decode cycles (:func:`steady`, every rank) per batch size (requests per cycle, from the accept
    marks) of the lowest rank, indexed by batch size; ``timed_only``: those with phase times only
    (:func:`timed`: a sampled live log times one cycle in N). Empty where no cycle says its requests."""
    c = steady(cycles, every_rank=True)
    if c is None or not len(c) or "requests" not in c.columns:
        return pd.Series(dtype="int64")
    low = c[c["rank"] == c["rank"].min()]
    if timed_only:
        low = low[timed(low)]
    req = pd.to_numeric(low["requests"], errors="coerce").dropna().astype("int64")
    return req.value_counts().astype("int64").sort_index()


def visited_of(counts: pd.Series) -> pd.Series:
    """The batch sizes a load visits, of its :func:`batch_counts`: :data:`MIN_CYCLES` steady cycles or more, and
    :data:`VISITED_SHARE` of them or more."""
    return counts[(counts >= MIN_CYCLES) & (counts >= VISITED_SHARE * counts.sum())]


def timed(cycles: pd.DataFrame) -> np.ndarray:
    """Per cycle: does it carry a phase split? False only for a sampled live log's cycles that the shim ran
    without CUDA events (its ``timed`` column, run/live.py: their period, tokens and acceptance are known,
    their split is not); True for every cycle of a table without that column (an nsys profile). The one
    reading of "timed" the decode breakdown, whatif, advise and the live notes use."""
    if "timed" not in cycles.columns:
        return np.ones(len(cycles), dtype=bool)
    return pd.array(cycles["timed"], dtype="boolean").fillna(True).to_numpy(dtype=bool)


def sampled_scale(period_ns, timed) -> float:
    """A sampled live log (CUDA events in one cycle of N: run/live.py): the factor that carries its timed
    cycles' split onto the mean period of all its cycles, mean period of all / mean period of the timed
    (1.0 where every cycle, or none, is timed). The timed cycles pay the events' cost (on real SGLang their
    period was 6-13% longer than the untimed ones'), so their phases and rest fill a longer period than the
    cycles the log stands for: taken as they are against the mean period of all, the rest went negative
    (-418 us a cycle). Scaled, each component keeps its share of the timed cycles and the components add
    up to the mean period of all: the one definition the decode breakdown and whatif use."""
    period = np.asarray(period_ns, dtype="float64")
    timed = np.asarray(timed, dtype=bool)
    ok = np.isfinite(period)
    if not ok[timed].any() or timed[ok].all():
        return 1.0
    t_timed = float(period[timed & ok].mean())
    return float(period[ok].mean()) / t_timed if t_timed > 0 else 1.0


def with_gpu(cycles: pd.DataFrame | None) -> pd.DataFrame | None:
    """The cycles that have a GPU window (not ``no_gpu_ops``), GPU columns as plain int64: what
    per-cycle figures and plots are drawn from."""
    if cycles is None or cycles.empty or "warmup_reason" not in cycles.columns:
        return cycles
    lost = (cycles["warmup_reason"] == NO_GPU_OPS).to_numpy(dtype=bool)
    if not lost.any():
        return cycles
    out = cycles[~lost].reset_index(drop=True)
    # host_wait_ns and launch_excess_ns are NA where the report has no API calls (not GPU figures): left as they are
    return out.astype({c: "int64" for c in out.columns if c.endswith("_ns") and c not in HOST_CALL_COLUMNS})


def query_rows(start: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, ...]:
    """(lo, hi, how many starts are at or before each lo, and each hi): what :meth:`UnionPrefix.covered`
    asks, the same for every subset of the intervals that keeps their positions."""
    return lo, hi, np.searchsorted(start, lo, side="right"), np.searchsorted(start, hi, side="right")


class UnionPrefix:
    """The union of intervals [start, end) sorted by start, leaving out what lies at or before
    ``seed`` (the union's reach so far when intervals come in time-ordered chunks), as two prefix
    arrays: ``R[i]``, the reach (running max of the ends, at least ``base`` = max(seed, first start)) of
    intervals 0..i, and ``G[k]``, the length of the gaps the union leaves between ``base`` and the
    start of interval k - 1. The union's length up to time t over the k intervals starting at or
    before it is then ``F(t) = min(R[k-1], max(base, t)) - base - G[k]`` (0 for k = 0): one gather
    each, whatever the overlap.

    ``end`` is used as the reach's buffer (pass a copy). An interval given with ``end`` equal to its
    start adds nothing (its start is at or before every later start): a subset of the intervals is
    the whole sorted array with the others' ends set to their starts, so every subset shares the
    positions of :func:`query_rows`."""

    def __init__(self, start: np.ndarray, end: np.ndarray, seed: int):
        n = len(start)
        self.base = max(int(seed), int(start[0]))
        reach = np.maximum.accumulate(end, out=end)
        if self.base > start[0]:
            np.maximum(reach, self.base, out=reach)
        gaps = np.empty(n + 1, dtype="int64")
        gaps[:2] = 0
        np.subtract(start[1:], reach[:-1], out=gaps[2:])
        np.maximum(gaps[2:], 0, out=gaps[2:])
        np.cumsum(gaps, out=gaps)
        self.reach, self.gaps = reach, gaps

    def upto(self, t: np.ndarray, k: np.ndarray) -> np.ndarray:
        """F(t) per time, ``k`` the intervals starting at or before it."""
        got = np.minimum(self.reach[np.maximum(k - 1, 0)], np.maximum(t, self.base)) - self.base - self.gaps[k]
        return np.where(k > 0, got, 0)

    def covered(self, lo: np.ndarray, hi: np.ndarray, k_lo: np.ndarray, k_hi: np.ndarray) -> np.ndarray:
        """Per interval [lo, hi), the union's length inside it."""
        return self.upto(hi, k_hi) - self.upto(lo, k_lo)

    def last_reach(self) -> int:
        """The reach after every interval: the seed of the next time-ordered chunk (a start of
        this chunk where a subset's left-out interval lies beyond its union: every later start is
        at or after it, so it leaves out nothing)."""
        return int(self.reach[-1])


class IntervalSplit:
    """Per interval of a rank (a cycle's GPU window, its GPU period): the union of the rank's GPU
    ops inside it (busy) and, per configured phase i, of the ops of phases 0..i (exclusive time
    is the difference of consecutive ones, as per rank), streamed over time-ordered chunks of ops
    (:class:`UnionPrefix`). Every op the rank's GPU ran in the interval counts, whatever
    launched it."""

    def __init__(self, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray, n_phases: int):
        self.lo, self.hi, self.n_phases = lo, hi, n_phases
        self.total = np.zeros((n_phases + 1, len(lo)), dtype="int64")
        self._of_rank = {int(r): np.flatnonzero(rank == r) for r in np.unique(rank)}
        self._reach: dict[int, np.ndarray] = {}

    def update_rank(self, rank: int, start: np.ndarray, end: np.ndarray, phase: np.ndarray) -> None:
        """Ops of one rank sorted by start, every start at or after those of the rank's ops before.

        Union j (0: every op; j >= 1: the ops of phases 0..j-1) is computed once per distinct set
        of ops: where phase j-1 has no op here, union j is union j-1's set, and where phases 0..j-1
        hold every op it is union 0's; the result is taken over when the seed (the reach of the
        chunks before) is the same too. Every union shares one search of the intervals' ends among
        the starts (:func:`query_rows`)."""
        at = self._of_rank.get(rank)
        if at is None or not len(start):
            return
        reach = self._reach.setdefault(rank, np.full(self.n_phases + 1, INT64_MIN, dtype="int64"))
        query = query_rows(start, self.lo[at], self.hi[at])
        n = len(start)
        codes = _phase_codes_unsigned(phase)
        per_phase = np.bincount(codes, minlength=self.n_phases)[:self.n_phases] if codes is not None else None
        done: dict[tuple[int, int], tuple[np.ndarray, int]] = {}   # (set, seed) -> (covered, reach)
        ops_in_set, set_of = 0, 0                                # set_of: the first union of this set
        for j in range(self.n_phases + 1):
            if j >= 1:
                here = int(per_phase[j - 1]) if per_phase is not None else int((phase == j - 1).sum())
                ops_in_set += here
                if not ops_in_set:
                    continue
                if ops_in_set == n:
                    set_of = 0
                elif here or j == 1:
                    set_of = j
            key = (set_of, int(reach[j]))
            if key not in done:
                if set_of == 0:
                    ends = end.copy()
                else:
                    ends = np.where((codes < set_of) if codes is not None else ((phase >= 0) & (phase < set_of)),
                                    end, start)
                union = UnionPrefix(start, ends, int(reach[j]))
                done[key] = union.covered(*query), union.last_reach()
                del union, ends
            covered, reach[j] = done[key]
            self.total[j, at] += covered

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(busy per interval, union of phases 0..i per interval as an (n_phases, n) array)."""
        return self.total[0], self.total[1:]


def _phase_codes_unsigned(phase: np.ndarray) -> np.ndarray | None:
    """int8 phase codes viewed as uint8 (a negative code, none, becomes 128 and above: never below
    a phase count under 127), else None (other dtypes take the comparisons)."""
    if phase.dtype == np.int8:
        return phase.view(np.uint8)
    if phase.dtype == np.uint8:
        return phase
    return None


def cycle_frame(windows: CycleWindows, busy: np.ndarray, upto_all: np.ndarray, period_busy: np.ndarray,
                period_upto: np.ndarray, marks: pd.DataFrame, config: PhaseConfig,
                capture_ids: np.ndarray | None = None, host_calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """The cycle table from its windows and unions (:class:`IntervalSplit` over the windows and over
    the periods of the cycles with GPU work, in that order): per cycle its GPU window split by
    phase (``sum(<phase>_ns) + gap_ns == duration_ns``), its GPU period split the same way
    (``sum(period_<phase>_ns) + period_idle_ns == gpu_period_ns``), its host period and tokens,
    and the warm-up flag."""
    cyc, has = windows.cyc, windows.has_gpu
    names = list(config.names) + [OTHER]
    n, n_ph = len(cyc), len(config.names)
    rank = cyc["rank"].to_numpy(dtype="int64")
    lost = not has.all()

    def gpu(values: np.ndarray):
        """A per-cycle GPU figure (given for the cycles with GPU work): NA where there is none."""
        full = _spread(has, values)
        return pd.arrays.IntegerArray(full, ~has) if lost else full

    lo, hi = windows.lo[has], windows.hi[has]
    out = pd.DataFrame({"rank": rank, "cycle": cyc["cycle"].to_numpy(), "start_ns": gpu(lo), "end_ns": gpu(hi),
                        "duration_ns": gpu(hi - lo), "cpu_start_ns": cyc["start_ns"].to_numpy(),
                        "cpu_end_ns": cyc["end_ns"].to_numpy()})
    nxt = out.groupby("rank")["cpu_start_ns"].shift(-1)
    out["period_ns"] = (nxt - out["cpu_start_ns"]).fillna(out["cpu_end_ns"] - out["cpu_start_ns"]).astype("int64")
    out["busy_ns"] = gpu(busy)
    for name, part in zip(names, _exclusive(busy, upto_all, n_ph)):
        out[f"{name}_ns"] = gpu(part)
    out["gap_ns"] = gpu(hi - lo - busy)
    accepted, requests, lengths = _accepted(cyc, marks)
    out["accepted_tokens"] = accepted.to_numpy()
    out["requests"] = requests.to_numpy()
    out["accept_lengths"] = lengths.to_numpy()
    # tokens generated in the cycle: the accepted draft tokens plus one (bonus) token per request
    out["tokens"] = (out["accepted_tokens"] + out["requests"].fillna(1)).astype("Int64")
    # throughput over the cycle's period (its start to the next cycle's start on the host)
    out["tokens_per_s"] = (out["tokens"].astype("Float64") * 1e9 / out["period_ns"].where(out["period_ns"] > 0)) \
        .astype("float64")
    p_lo, p_hi = windows.period_lo[has], windows.period_hi[has]
    out["gpu_period_start_ns"] = gpu(p_lo)
    out["gpu_period_end_ns"] = gpu(p_hi)
    out["gpu_period_ns"] = gpu(p_hi - p_lo)
    for name, part in zip(names, _exclusive(period_busy, period_upto, n_ph)):
        out[f"period_{name}_ns"] = gpu(part)
    out["period_idle_ns"] = gpu(p_hi - p_lo - period_busy)
    out["steps"] = cycle_steps(cyc, marks).array          # nullable Int64 (to_numpy would give float64)
    # host_calls: per cycle range id, host_wait_ns (:func:`host_wait_by_cycle`) and launch_excess_ns
    # (:func:`launch_excess_by_cycle`); None: the report has no API calls to tell
    ids = cyc["range_id"].to_numpy(dtype="int64")
    for col in HOST_CALL_COLUMNS:
        out[col] = pd.array(host_calls[col].reindex(ids).fillna(0).to_numpy(dtype="int64"), dtype="Int64") \
            if host_calls is not None else pd.array([pd.NA] * n, dtype="Int64")
    capturing = np.isin(cyc["range_id"].to_numpy(dtype="int64"),
                        capture_ids if capture_ids is not None else np.zeros(0, dtype="int64"))
    reason = warmup_reasons(rank, out["cycle"].to_numpy(), has, _spread(has, p_hi - p_lo), capturing,
                            out["requests"].to_numpy(dtype="float64", na_value=np.nan))
    out["warmup"] = pd.notna(reason)
    out["warmup_reason"] = pd.Series(reason, dtype=object)
    return out[columns(config)]


def _spread(has: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` (one per cycle with GPU work) at those cycles' rows, 0 elsewhere."""
    full = np.zeros(len(has), dtype="int64")
    full[has] = values
    return full


def _exclusive(busy: np.ndarray, upto_all: np.ndarray, n_ph: int) -> list[np.ndarray]:
    """Exclusive time per phase and ``other`` from the busy union and the unions of phases 0..i."""
    parts, cumulative = [], np.zeros(len(busy), dtype="int64")
    for i in range(n_ph):
        parts.append(upto_all[i] - cumulative)
        cumulative = upto_all[i]
    return parts + [busy - cumulative]


def warmup_reasons(rank: np.ndarray, cycle: np.ndarray, has_gpu: np.ndarray, gpu_period: np.ndarray,
                   capturing: np.ndarray, batch: np.ndarray | None = None) -> np.ndarray:
    """Per cycle (rows in (rank, CPU start) order) the reason it is left out of steady-state figures
    (:data:`WARMUP_REASONS`, the first that applies), None for a steady-state cycle. ``batch``: the
    cycle's requests (NaN: unknown); an outlier is judged against the cycles of its own batch size
    (against all the rank's cycles where that batch size has fewer than :data:`OUTLIER_MIN_BATCH_CYCLES`)."""
    n = len(rank)
    reason = np.full(n, None, dtype=object)
    if not n:
        return reason
    has_gpu = np.asarray(has_gpu, dtype=bool)
    batch = np.full(n, -1.0) if batch is None else np.nan_to_num(np.asarray(batch, dtype="float64"), nan=-1.0)
    frame = pd.DataFrame({"rank": rank, "batch": batch, "period": np.where(has_gpu, gpu_period, np.nan),
                          "has": has_gpu, "pos": np.arange(n)})
    by_batch = frame.groupby(["rank", "batch"])["period"]
    median = np.where(by_batch.transform("count").to_numpy() >= OUTLIER_MIN_BATCH_CYCLES,
                      by_batch.transform("median").to_numpy(),
                      frame.groupby("rank")["period"].transform("median").to_numpy())
    last_with_gpu = frame["pos"].where(frame["has"]).groupby(rank).transform("max").to_numpy()
    lost_after = frame.assign(lost=~frame["has"]).groupby("rank")["lost"].transform("any").to_numpy(dtype=bool)
    # lowest precedence first: later rules overwrite
    reason[has_gpu & (median > 0) & (gpu_period > OUTLIER_FACTOR * np.nan_to_num(median))] = OUTLIER
    reason[has_gpu & (cycle == 0)] = FIRST
    reason[has_gpu & capturing] = GRAPH_CAPTURE
    reason[has_gpu & lost_after & (frame["pos"].to_numpy() == last_with_gpu)] = TRUNCATED
    reason[~has_gpu] = NO_GPU_OPS
    return reason


def left_out_reasons(cycles: pd.DataFrame) -> np.ndarray:
    """Per row of a cycle table, why steady-state figures leave it out (:data:`WARMUP_REASONS`),
    None for a steady cycle: the table's own flags (``warmup`` true/false with ``warmup_reason``, or
    ``warmup`` holding the reason as text, as older results and hand-made tables have it); a table
    without flags gets them by the same rules (:func:`warmup_reasons`: first cycle, outlier period;
    no graph-capture information)."""
    n = len(cycles)
    if not n:
        return np.full(0, None, dtype=object)
    if "warmup" not in cycles.columns:
        return _derived_reasons(cycles)
    w = cycles["warmup"]
    if w.dtype == object or isinstance(w.dtype, pd.StringDtype):
        text = w.astype(object)
        told = w.notna() & ~text.astype(str).isin(["", "False", "false", "0"])
        reason = text.where(told, None)
        if "warmup_reason" in cycles.columns:
            reason = cycles["warmup_reason"].astype(object).where(told & cycles["warmup_reason"].notna(), reason)
        reason = reason.where(~reason.isin([True, "True", "true", "1"]), "warmup")
        return reason.to_numpy(dtype=object)
    flag = w.fillna(False).astype(bool).to_numpy()
    reason_col = next((c for c in ("warmup_reason", "warmup_code") if c in cycles.columns), None)
    reason = cycles[reason_col].astype(object).to_numpy() if reason_col else np.full(n, "warmup", dtype=object)
    reason = np.where(flag, reason, None)
    reason[flag & pd.isna(reason)] = "warmup"
    return reason


def _derived_reasons(cycles: pd.DataFrame) -> np.ndarray:
    """:func:`warmup_reasons` of a table without flags, rows taken in (rank, start) order."""
    order = cycles.assign(_pos=np.arange(len(cycles)))
    by = [c for c in ("rank", "cpu_start_ns", "start_ns", "cycle") if c in order.columns]
    order = order.sort_values(by, kind="stable") if by else order
    rank = order["rank"].to_numpy(dtype="int64") if "rank" in order.columns else np.zeros(len(order), dtype="int64")
    has = order["start_ns"].notna().to_numpy(dtype=bool) if "start_ns" in order.columns \
        else np.ones(len(order), dtype=bool)
    col = next((c for c in ("gpu_period_ns", "period_ns", "duration_ns") if c in order.columns), None)
    period = pd.to_numeric(order[col], errors="coerce").to_numpy(dtype="float64", na_value=np.nan) if col \
        else np.full(len(order), np.nan)
    first = (order.groupby(rank).cumcount() == 0).to_numpy() if len(order) else np.zeros(0, dtype=bool)
    batch = pd.to_numeric(order["requests"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan) \
        if "requests" in order.columns else None
    reason = warmup_reasons(rank, np.where(first, 0, 1), has, np.nan_to_num(period), np.zeros(len(order), bool),
                            batch)
    out = np.full(len(order), None, dtype=object)
    out[order["_pos"].to_numpy()] = reason
    return out


def states(cycles: pd.DataFrame) -> np.ndarray:
    """Per row: ``steady``, ``warmup`` (first cycle, graph capture), ``lost`` (its GPU data was
    lost: :data:`LOST_REASONS`) or ``outlier`` (:data:`STATES`)."""
    reason = left_out_reasons(cycles)
    out = np.full(len(reason), WARMUP, dtype=object)
    out[pd.isna(reason)] = STEADY
    out[np.isin(reason.astype(str), LOST_REASONS)] = LOST
    out[reason.astype(str) == OUTLIER] = OUTLIER
    return out


def steady_mask(cycles: pd.DataFrame, keep_outliers: bool = False, every_rank: bool = False) -> np.ndarray:
    """Per row: is it a steady cycle (:func:`steady`)."""
    s = states(cycles)
    ok = (s == STEADY) | ((s == OUTLIER) if keep_outliers else False)
    if every_rank and not ok.all():
        numbers = cycles["cycle"].to_numpy()
        ok &= ~np.isin(numbers, numbers[~ok])
    return ok


def with_flags(cycles: pd.DataFrame | None) -> pd.DataFrame | None:
    """The table with its ``warmup``/``warmup_reason`` flags: its own, or (a table without them: an
    older result, a live log, a hand-made table) derived once over the whole table
    (:func:`left_out_reasons`), so that a subset (one batch size, one step count) keeps the flags of
    the whole instead of deriving its own (its first cycle would become a 'first')."""
    if cycles is None or cycles.empty or "warmup" in cycles.columns:
        return cycles
    reason = left_out_reasons(cycles)
    return cycles.assign(warmup=pd.notna(reason), warmup_reason=pd.Series(reason, index=cycles.index, dtype=object))


def left_out_counts(cycles: pd.DataFrame, keep_outliers: bool = False) -> dict[str, int]:
    """Cycle numbers left out, per state (``warmup``, ``lost``, ``outlier``), a number counted once
    (under its first state in that order) whatever its ranks; only the states with any."""
    if cycles is None or cycles.empty:
        return {}
    s = states(cycles)
    numbers = cycles["cycle"].to_numpy()
    out, seen = {}, set()
    for state in (WARMUP, LOST, OUTLIER):
        if keep_outliers and state == OUTLIER:
            continue
        mine = set(numbers[s == state].tolist()) - seen
        seen |= mine
        if mine:
            out[state] = len(mine)
    return out


def cycle_steps(cyc: pd.DataFrame, marks: pd.DataFrame) -> pd.Series:
    """Per cycle range, the step count its ``spec_steps=S cycle=K`` mark says (the shim's, for a process
    SGLang runs with --speculative-adaptive), matched by K to the range of the same process whose payload
    is K; NA without one (nullable Int64, aligned with ``cyc``)."""
    out = pd.Series(pd.NA, index=cyc.index, dtype="Int64")
    if marks is None or marks.empty or "text" not in marks.columns:
        return out
    codes, texts = factorize_objects(np.asarray(marks["text"].to_numpy(dtype=object)), use_na_sentinel=False)
    steps_of = np.full(len(texts) + 1, np.nan)
    cycle_of = np.full(len(texts) + 1, np.nan)
    for i, text in enumerate(texts):
        parsed = parse_steps_mark(text)
        if parsed is not None and parsed[1] is not None:
            steps_of[i], cycle_of[i] = parsed
    keep = ~np.isnan(steps_of[codes])
    if not keep.any():
        return out
    sm = marks[keep].assign(steps=steps_of[codes][keep], cycle=cycle_of[codes][keep])
    hit = _matched_by_number(cyc, sm)
    if hit is None or hit.empty:
        return out
    first = hit.drop_duplicates("_row", keep="last")          # one mark a cycle; a repeated one: the last
    out.loc[first["_row"].to_numpy()] = first["steps"].to_numpy(dtype="int64")
    return out


def _accept_marks(marks: pd.DataFrame) -> pd.DataFrame:
    """The marks that carry ``accept_len=N``, with ``n``, ``reqs``, ``cycle`` (NaN: none) and
    ``lens`` parsed (each distinct text once, one compiled regex, no per-row pandas work)."""
    codes, texts = factorize_objects(np.asarray(marks["text"].to_numpy(dtype=object)), use_na_sentinel=False)
    n_of = np.full(len(texts) + 1, np.nan)
    reqs_of = np.full(len(texts) + 1, np.nan)
    cycle_of = np.full(len(texts) + 1, np.nan)
    lens_of = np.full(len(texts) + 1, None, dtype=object)
    for i, text in enumerate(texts):
        m = ACCEPT_MARK.search(text) if isinstance(text, str) else None
        if m and parse_accept_mark(text) is None:     # counts no real batch has (2**31 and more): ignored
            m = None
        if m:
            n_of[i] = float(m["n"])
            reqs_of[i] = float(m["reqs"]) if m["reqs"] is not None else np.nan
            cycle_of[i] = float(m["cycle"]) if m["cycle"] is not None else np.nan
            lens_of[i] = m["lens"]
    keep = ~np.isnan(n_of[codes])
    sel = marks[keep]
    return sel.assign(n=n_of[codes][keep], reqs=reqs_of[codes][keep], cycle=cycle_of[codes][keep],
                      lens=pd.Series(lens_of[codes][keep], index=sel.index, dtype=object))


def _accepted(cyc: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Accepted draft tokens, requests and per-request accept lengths (comma-separated) per cycle
    from ``accept_len=N reqs=M [cycle=K] [lens=a,b,...]`` marks of the same process: by ``cycle=K``
    the cycle range whose payload is K, else the cycle range containing the mark in time. A cycle
    with both kinds sums them. Marks naming a cycle outside the trace (a capture window that opened
    or closed mid-run) belong to no cycle."""
    accepted = pd.Series(np.nan, index=cyc.index, dtype="float64")
    requests = pd.Series(np.nan, index=cyc.index, dtype="float64")
    lengths = pd.Series(None, index=cyc.index, dtype=object)
    if marks is None or marks.empty:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    acc = _accept_marks(marks)
    if acc.empty:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    numbered = acc["cycle"].notna().to_numpy()
    by_number = _matched_by_number(cyc, acc[numbered])
    contained = _matched_by_time(cyc, acc[~numbered])
    pieces = [p for p in (contained, by_number) if p is not None and not p.empty]
    if not pieces:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    hit = pd.concat(pieces).sort_values(["_row", "time_ns"], kind="stable")
    g = hit.groupby("_row", sort=True)
    n = g["n"].sum()
    reqs = g["reqs"].sum(min_count=1)
    accepted.loc[n.index] = n.to_numpy()
    requests.loc[reqs.index] = reqs.to_numpy()
    if hit["lens"].notna().any():
        rows, joined = _joined_lengths(hit["_row"].to_numpy(), hit["lens"].to_numpy(dtype=object))
        lengths.loc[rows] = joined
    return accepted.astype("Int64"), requests.astype("Int64"), lengths


def _joined_lengths(rows: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cycle row (``rows`` grouped: equal rows next to each other), its marks' ``lens`` texts
    joined by commas in the order given, marks without one left out: (the rows with any, their
    joined texts). A Python join only for the few rows with several marks."""
    has = np.fromiter((isinstance(x, str) for x in lens), dtype=bool, count=len(lens))
    rows, lens = rows[has], lens[has]
    if not len(rows):
        return rows, lens
    first = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    ends = np.r_[first[1:], len(rows)]
    joined = lens[first].copy()
    for i in np.flatnonzero(ends - first > 1):
        joined[i] = ",".join(lens[first[i]:ends[i]])
    return rows[first], joined


def _matched_by_number(cyc: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame | None:
    """``cycle=K`` marks joined to the cycle range of the same process and input with payload K
    (column ``_row``: the cycle's row label)."""
    if acc.empty or "int_value" not in cyc.columns:
        return None
    payload = pd.to_numeric(cyc["int_value"], errors="coerce")
    keyed = pd.DataFrame({"global_pid": cyc["global_pid"].to_numpy(), "input": cyc["input"].to_numpy(),
                          "cycle": payload.to_numpy(dtype="float64"), "_row": cyc.index.to_numpy()})
    keyed = keyed[keyed["cycle"].notna()].drop_duplicates(["global_pid", "input", "cycle"], keep="first")
    if keyed.empty:
        return None
    return acc.merge(keyed, on=["global_pid", "input", "cycle"], how="inner")


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])`` (every ``hi >= lo``) without a
    Python step per range: one repeat and one arange."""
    lens = (np.asarray(hi, dtype="int64") - np.asarray(lo, dtype="int64"))
    before = np.cumsum(lens) - lens
    return np.repeat(np.asarray(lo, dtype="int64") - before, lens) + np.arange(int(lens.sum()), dtype="int64")


def _matched_by_time(cyc: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame | None:
    """Marks without a cycle number joined to the cycle range containing them (same process and
    input, start <= time <= end)."""
    if acc.empty:
        return None
    out = []
    for (pid, inp), group in cyc.groupby(["global_pid", "input"]):
        same = acc[(acc["global_pid"] == pid) & (acc["input"] == inp)]
        if same.empty:
            continue
        same = same.sort_values("time_ns", kind="stable")
        t = same["time_ns"].to_numpy(dtype="int64")
        lo = np.searchsorted(t, group["start_ns"].to_numpy(dtype="int64"), side="left")
        hi = np.searchsorted(t, group["end_ns"].to_numpy(dtype="int64"), side="right")
        rows = np.repeat(group.index.to_numpy(), hi - lo)
        out.append(same.iloc[concat_ranges(lo, hi)].assign(_row=rows))
    return pd.concat(out) if out else None


# ------------------------------------------------------------------------- op -> cycle (the one rule)
def rank_windows(cycles: pd.DataFrame) -> list[tuple]:
    """Per rank of ``cycles``: (rank, cycle ids, GPU window starts, window ends), sorted by start, windows
    of one start by cycle id (a stable, total order: an unstable sort put tied windows in either order)."""
    out = []
    for r, c in cycles.groupby("rank"):
        c = c.sort_values(["start_ns", "cycle"], kind="stable")
        out.append((r, c["cycle"].to_numpy(dtype="int64"), c["start_ns"].to_numpy(dtype="int64"),
                    c["end_ns"].to_numpy(dtype="int64")))
    return out


def cycle_at(start: np.ndarray, ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per start, the id of the last window (sorted by start ``lo``) starting at or before it, if
    its end ``hi`` is not before the start; else -1."""
    pos = np.searchsorted(lo, start, side="right") - 1
    ok = (pos >= 0) & (start <= hi[np.clip(pos, 0, None)])
    return np.where(ok, ids[np.clip(pos, 0, None)], -1)


def cycle_of_arrays(rank: np.ndarray, start: np.ndarray, cycles: pd.DataFrame) -> np.ndarray:
    """Per (rank, start): the id of the cycle of ``cycles`` on that rank whose GPU window holds the
    start (:func:`cycle_at`), else -1."""
    out = np.full(len(start), -1, dtype="int64")
    if not len(start) or cycles.empty:
        return out
    for r, ids, lo, hi in rank_windows(cycles):
        sel = np.flatnonzero(rank == r)
        out[sel] = cycle_at(start[sel], ids, lo, hi)
    return out


def cycle_table_of_chunks(cycle_rows: pd.DataFrame, windows, store, rank_of_group: np.ndarray, marks: pd.DataFrame,
                          config: PhaseConfig, capture_ids, host_calls, threads: int = 1) -> pd.DataFrame:
    """The cycle table of a report from its cycle ranges (``cycle_rows``), their windows and periods from
    the per-call spans (:func:`cycle_windows_of`), and every op a chunked store holds (the map step's
    run/spill.OpStore: ``runs_by_rank(k, rank_of_group)`` and ``get_run(k, column, first, stop)`` of columns s,
    e, ph per chunk k, in time order) streamed into the per-interval unions (:class:`IntervalSplit`);
    ``rank_of_group``: per process code, its rank; the rest as :func:`cycle_frame` takes them. The
    ranks of a chunk on ``threads`` threads side by side (their unions are apart; NumPy lets go of
    the GIL), the chunks one after the other (a rank's ops must come in time order)."""
    found = cycle_windows_of(cycle_rows, windows)
    if found is None:
        return empty_table(config)
    has = found.has_gpu
    rank = found.cyc["rank"].to_numpy(dtype="int64")[has]
    n_win = int(has.sum())
    split = IntervalSplit(np.r_[rank, rank], np.r_[found.lo[has], found.period_lo[has]],
                          np.r_[found.hi[has], found.period_hi[has]], len(config.names))

    def feed(k: int, rank: int, runs: list[tuple[int, int]]) -> None:
        for first, stop in runs:                     # a process at a time: small temporaries
            split.update_rank(rank, store.get_run(k, "s", first, stop), store.get_run(k, "e", first, stop),
                              store.get_run(k, "ph", first, stop))

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="specprof-split") as pool:
        for k in range(len(store)):
            for done in [pool.submit(feed, k, r, runs) for r, runs in store.runs_by_rank(k, rank_of_group).items()]:
                done.result()
    busy, upto = split.result()
    return cycle_frame(found, busy[:n_win], upto[:, :n_win], busy[n_win:], upto[:, n_win:], marks, config,
                       capture_ids, host_calls)
