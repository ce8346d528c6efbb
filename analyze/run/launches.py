"""What every CUDA API call of a report belongs to, from the calls and the NVTX ranges.

From the API calls and the NVTX ranges: the calls sorted by (thread, start), the labelled ranges
and their layout over the calls (what the projection reduces over), each call's innermost phase
range and inclusive phase bits, and its decode cycle. None of it looks at a GPU op's times or
kind, so it serves every chunk of ops when a report is analysed in pieces (``--memory-budget``).

It is computed once the ops are read (read/report.read_report; for a report whose tables come from
the Parquet cache too), so the ops are known first and only the calls the analysis can
use are prepared (:func:`needed_calls`; under ``--memory-budget``, where the ops are read later in
chunks, from their keys alone, read a block at a time from the export or the cache:
:func:`needed_calls_in_blocks`): those that launched one of the ops and those that capture a CUDA
graph (cycles.capture_cycle_ids looks at them). A call that launched nothing has no span,
so every projection, cycle window and op attribution is a reduction over the same launching calls,
and where crossing ranges of one level compete for a call the later by start wins, whichever calls
are there (projection._level_groups); the per-op ``call_pos`` is the call's row in the report's
calls either way (:func:`report_rows`). tests/test_launching_calls.py checks the tables equal. The
real H200 eager trace launches GPU work from 29% of its calls.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd

from analyze.attribute import attribution
from analyze.attribute.phases import PhaseConfig
from analyze.project import projection
from analyze.run import checks
from analyze.timeline import cycles


class Launches(NamedTuple):
    ranges: pd.DataFrame                 # NVTX ranges with ``phase`` (attribution.label_ranges)
    calls: pd.DataFrame
    index: projection.CallIndex          # calls sorted by (thread, start)
    layout: tuple                        # projection.range_layout
    painted: attribution.PaintedCalls    # per sorted call: phase range, inclusive bits
    cycle_owner: np.ndarray | None       # per sorted call: enclosing cycle range id (-1), None: no cycles
    is_cycle: np.ndarray                 # per range: an outermost cycle range
    full_name: pd.Series                 # per range: nsys' ``domain:name``
    call_rows: np.ndarray | None = None  # per prepared call: its row in the report's calls (None: all prepared)
    shared_ids: int | None = None        # checks.count_shared_ids of every call, where needed_calls counted it


class NeededCalls(NamedTuple):
    keep: np.ndarray | None      # per call: prepare it (None: every call)
    shared_ids: int | None       # correlation ids several processes' calls share (checks.count_shared_ids)


def needed_calls(calls: pd.DataFrame, op_pid: np.ndarray, op_corr: np.ndarray,
                 strings: pd.Series) -> NeededCalls:
    """Per call: it launched one of the ops (same process and correlation id), captures a CUDA
    graph (cycles.capture_cycle_ids looks at those) or synchronizes (cycles.host_wait_by_cycle);
    ``keep`` None when every call is needed or the ids are spread too wide for a presence table (then
    every call is prepared). And, from the same
    pass over the calls' keys, how many correlation ids occur in several processes' calls (the
    report's note; None where the ids are spread too wide: then checks.count_shared_ids counts them)."""
    return needed_calls_in_blocks(calls, [(op_pid, op_corr)], strings)


# the bits of needed_calls_in_blocks' presence table: a key some op has, a key some call has
_OP_KEY, _CALL_KEY = np.uint8(1), np.uint8(2)


def needed_calls_in_blocks(calls: pd.DataFrame, op_keys: Iterable[tuple[np.ndarray, np.ndarray]],
                           strings: pd.Series) -> NeededCalls:
    """:func:`needed_calls` from the ops' (process, correlation id) arrays given a block at a time
    (``--memory-budget``: read in rowid ranges, never all at once, read/report.read_op_keys);
    ``op_keys`` is consumed only when a presence table is made. One byte per (process, id) key
    holds both presences: the ops' (which calls to keep) and the calls' own (the shared ids,
    counted as checks.count_shared_ids counts them, without keying every call a second time)."""
    if not len(calls):
        return NeededCalls(None, 0)
    c_pid = calls["global_pid"].to_numpy(dtype="int64")
    c_corr = calls["correlation_id"].to_numpy(dtype="int64")
    lo, hi = int(c_corr.min()), int(c_corr.max())
    span = hi - lo + 1
    pids = pd.Index(pd.unique(c_pid))
    if span * len(pids) > projection.PRESENCE_MAX_BYTES:
        return NeededCalls(None, None)
    present = np.zeros(span * len(pids) + 1, dtype=np.uint8)       # the last slot: no call's key
    for op_pid, op_corr in op_keys:
        for _, key in projection.masked_key_blocks(pids, np.asarray(op_pid, dtype="int64"),
                                                   np.asarray(op_corr, dtype="int64"), lo, span, span * len(pids)):
            present[key] = _OP_KEY
    present[-1] = 0
    keep = np.empty(len(c_pid), dtype=bool)
    for part, key in projection.correlation_key_blocks(pids, c_pid, c_corr, lo, span):
        seen = present[key]
        np.not_equal(seen & _OP_KEY, 0, out=keep[part])
        present[key] = seen | _CALL_KEY
    np.right_shift(present, 1, out=present)           # the calls' bit alone, 0/1, in place (no second table)
    shared = checks.ids_in_several_rows(present[:-1].reshape(len(pids), span))
    del present
    # graph captures (cycles.capture_cycle_ids) and synchronizes (cycles.host_wait_by_cycle) launch no op; a graph
    # launch whose ops were lost or left out still counts in cycles.launch_excess_by_cycle (its fastest launch too)
    kept_names = np.r_[cycles.capture_name_ids(strings), cycles.sync_name_ids(strings),
                       cycles.graph_launch_name_ids(strings)]
    if len(kept_names):
        keep |= np.isin(calls["name_id"].to_numpy(dtype="int64"), kept_names)
    return NeededCalls(None if keep.all() else keep, shared)


def prepare_launches(calls: pd.DataFrame, ranges: pd.DataFrame, config: PhaseConfig,
                     ops: pd.DataFrame | None = None, strings: pd.Series | None = None,
                     op_keys: Iterable[tuple[np.ndarray, np.ndarray]] | None = None) -> Launches:
    """The calls' and ranges' side of the analysis. With ``ops`` (the report's GPU ops, read first)
    and ``strings``, only the :func:`needed_calls` are prepared; the same with ``op_keys`` (the
    ops' process and correlation id arrays, block by block: :func:`needed_calls_in_blocks`) where
    the ops themselves are not read yet (``--memory-budget``)."""
    # the ranges' side (labels, nesting: no call needed) in a second thread while the calls are
    # sorted; NumPy's sorts and searches let go of the GIL
    call_rows = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-ranges") as pool:
        range_side = pool.submit(_range_side, ranges, config)
        needed = NeededCalls(None, None)
        if ops is not None and strings is not None:
            needed = needed_calls(calls, ops["global_pid"].to_numpy(dtype="int64"),
                                  ops["correlation_id"].to_numpy(dtype="int64"), strings)
        elif op_keys is not None and strings is not None:
            needed = needed_calls_in_blocks(calls, op_keys, strings)
        keep, shared_ids = needed
        del needed
        if keep is not None:
            calls = calls[keep].reset_index(drop=True)
            call_rows = np.flatnonzero(keep)
            del keep
        index = projection.build_call_index(calls, ranges)     # (threads and times: labels not needed)
        ranges, levels, nesting, top_cycles = range_side.result()
    layout = projection.range_layout(index, ranges, levels=levels)
    painted = attribution.paint_phase_calls(ranges, index, config, layout, nesting=nesting)
    cycle_owner = cycles.cycle_of_calls(ranges, index, config, top=top_cycles, layout=layout)
    is_cycle = ranges.index.isin(top_cycles.index)
    return Launches(ranges, calls, index, layout, painted, cycle_owner, is_cycle, ranges["full_name"], call_rows,
                    shared_ids)


def report_rows(launches: Launches) -> np.ndarray:
    """Per sorted prepared call, its row in the report's calls table (as read), with a trailing -1
    slot (an op without a launching call, op_call -1, picks it): the per-op table's ``call_pos``,
    the same whichever calls were prepared."""
    order = launches.index.order
    rows = order if launches.call_rows is None else launches.call_rows[order]
    return np.append(rows.astype("int64", copy=False), -1)


def _range_side(ranges: pd.DataFrame, config: PhaseConfig):
    """(labelled ranges, their nesting levels, the phase ranges' nesting, the outermost cycle
    ranges): everything of the preparation that needs the ranges only."""
    ranges = attribution.label_ranges(ranges, config)
    return (ranges, projection.range_levels(ranges), attribution.phase_nesting(ranges, config),
            cycles.cycle_ranges(ranges, config))


def cycle_of_ops(launches: Launches, op_call: np.ndarray) -> np.ndarray:
    """Per op, the id of the cycle range enclosing its launching call, else -1."""
    if launches.cycle_owner is None:
        return np.full(len(op_call), -1, dtype="int32")
    return np.append(launches.cycle_owner, -1)[op_call]
