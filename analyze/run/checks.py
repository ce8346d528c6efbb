"""What is odd about a report, counted and said in one line each (the `notes` of a result, as
:class:`analyze.notes.Note`: a code, the count, the message).

Each function takes the tables of one report and returns a list of notes; none changes the
analysis, they say how odd events were treated.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.notes import Note
from analyze.project import projection as proj
from analyze.read import capture, validate
from analyze.read.report import EXCLUDED

REPLACEMENT_CHAR = "\ufffd"


def unlinked_note(missing: int, uvm_migrations: int = 0) -> list[Note]:
    """GPU ops without a launching API call: the unified-memory migrations among them (memcpy rows
    of copy kinds 11-13, which no call launches) named as such, the others (a sliced capture)."""
    uvm = min(int(uvm_migrations or 0), missing)
    notes = []
    if uvm:
        notes.append(Note(N.UVM_MIGRATIONS, f"{uvm} GPU ops are unified-memory migrations (page faults, prefetches, "
                          "evictions: memcpys no API call launches): phase `other`", uvm))
    rest = missing - uvm
    if rest:
        notes.append(Note(N.UNLINKED_OPS, f"{rest} GPU ops had no launching API call (sliced capture?): phase by "
                          "kernel name only, else `other`", rest))
    return notes


def unified_memory_events(meta: dict) -> list[Note]:
    n = int((meta or {}).get("unified_memory_events") or 0)
    return [Note(N.UVM_MIGRATIONS, f"{n} unified-memory counter events (page faults, migrations; "
                 "CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) are not GPU ops: not in busy or kernel time", n)] if n else []


def nsys_errors(meta: dict) -> list[Note]:
    """nsys' own error-level diagnostics of the capture, passed on (warnings only where they explain a
    failure: read/capture.py, :func:`lost_cuda_tail`)."""
    errors = [d for d in (meta or {}).get("diagnostics") or [] if d.get("severity", 0) >= capture.ERROR]
    if not errors:
        return []
    n = sum(int(d.get("count") or 1) for d in errors)
    return [Note(N.NSYS_DIAGNOSTICS, f"nsys reported errors during the capture: {capture.said(errors, limit=4)}", n)]


def lost_cuda_tail(ranges: pd.DataFrame, totals: pd.DataFrame, meta: dict) -> list[Note]:
    """Decode cycles that come after the last GPU op of their rank: NVTX without any GPU op, the CUDA
    data of the end of the run lost (the process exited before nsys saved its CUDA buffers). The
    cycle table holds them without GPU columns (``no_gpu_ops``); the note counts them, says how much time they span and what
    nsys said, and points at --cuda-flush-interval."""
    if ranges is None or totals is None or not len(ranges) or "is_cycle" not in ranges.columns \
            or "window_end_ns" not in totals.columns:
        return []
    cyc = ranges[ranges["is_cycle"].to_numpy(dtype=bool)]
    if not len(cyc):
        return []
    last_op = dict(zip(totals["rank"].astype("int64").tolist(), totals["window_end_ns"].astype("int64").tolist()))
    lost, parts, pids = 0, [], []
    for rank, mine in cyc.groupby("rank", sort=True):
        end = last_op.get(int(rank))
        if end is None or end < 0:
            continue
        after = mine[mine["start_ns"].to_numpy(dtype="int64") > end]
        if not len(after):
            continue
        lost += len(after)
        span_s = (int(after["end_ns"].max()) - end) / 1e9
        parts.append(f"rank {int(rank)}: {len(after)} of {len(mine)} cycles, the last {span_s:.1f} s")
        pids += [int(p) for p in after["global_pid"].unique()]
    if not lost:
        return []
    words = capture.said([d for d in (meta or {}).get("diagnostics") or [] if "CUDA" in d.get("text", "")],
                         pids, limit=1)
    return [Note(N.LOST_CUDA_TAIL, f"{lost} decode cycles come after the last GPU op ({'; '.join(parts)}): NVTX "
                 "without GPU ops, the CUDA data of the end of the run was lost (the process exited before nsys "
                 f"saved its CUDA buffers{'; nsys said: ' + words if words else ''}); in the cycle table they have no "
                 f"GPU columns (warmup_reason no_gpu_ops) and are left out of every per-cycle figure; "
                 f"{capture.FLUSH_HINT}", lost)]


def report_notes(result) -> list[Note]:
    """What a report's results (whole or chunked: the same tables) say about its capture."""
    return lost_cuda_tail(result.ranges, result.totals, result.meta) + nsys_errors(result.meta)


def zero_length_note(zero: int) -> list[Note]:
    return [Note(N.ZERO_LENGTH_OPS, f"{zero} GPU ops have zero duration (counted, add no time)", zero)] if zero else []


def unclosed_ranges(ranges: pd.DataFrame) -> list[Note]:
    n = int(ranges["end_missing"].sum()) if "end_missing" in ranges.columns else 0
    return [Note(N.UNCLOSED_RANGES, f"{n} NVTX ranges were never closed: they run to the last NVTX timestamp "
                 "(as in nsys)", n)] if n else []


def cross_thread_ranges(count: int) -> list[Note]:
    if not count:
        return []
    return [Note(N.CROSS_THREAD_RANGES, f"{count} start/end NVTX ranges end on another thread: left out of the "
                 "projection and the phases, as nsys' projection does", count)]


def identical_ranges(ranges: pd.DataFrame) -> list[Note]:
    n = identical_range_count(*(ranges[c].to_numpy(dtype="int64") for c in ("global_tid", "start_ns", "end_ns")))
    return [Note(N.IDENTICAL_RANGES, f"{n} NVTX ranges have the same bounds as another range on their thread "
                 "(nested in order of appearance)", n)] if n else []


def identical_range_count(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """Ranges whose (thread, start, end) repeats an earlier range's. A repeat shares its twin's
    start: in start order (a stable sort, quick on the nearly start-ordered ranges nsys writes) it
    lies within a run of equal starts, where rows i and i - d are compared
    (validate.duplicates_within_runs); runs longer than it looks at: sorted by (thread, start, end),
    a repeat sits right after its twin."""
    if not len(start):
        return 0
    order = np.argsort(start, kind="stable")
    s = start[order]
    if not (s[1:] == s[:-1]).any():
        return 0
    within = validate.duplicates_within_runs(pd.DataFrame({"tid": tid[order], "end": end[order]}, copy=False), s)
    if within is not None:
        return int(within.sum())
    order = np.lexsort((end, start, tid))
    t, s, e = tid[order], start[order], end[order]
    return int(((t[1:] == t[:-1]) & (s[1:] == s[:-1]) & (e[1:] == e[:-1])).sum())


def marks_only(ranges: pd.DataFrame, marks: pd.DataFrame) -> list[Note]:
    if ranges.empty and len(marks):
        return [Note(N.MARKS_ONLY, f"NVTX marks only ({len(marks)}), no ranges: every GPU op is in `other` "
                     "unless a kernel pattern names its phase", len(marks))]
    if ranges.empty:
        return [Note(N.NO_NVTX_RANGES, "no NVTX ranges: every GPU op is in `other` unless a kernel pattern "
                     "names its phase", 0)]
    return []


def negative_ids_note(n: int) -> list[Note]:
    return [Note(N.NEGATIVE_IDS, f"{n} rows carry a negative globalTid/globalPid (high hardware id bit): masked, "
                 "not dropped", n)] if n else []


def shared_correlation_ids(calls: pd.DataFrame, counted: int | None = None) -> list[Note]:
    """The note on correlation ids several processes' calls share; ``counted``: that number where
    it is known already (run/launches.needed_calls counts it), else counted here."""
    if calls.empty:
        return []
    n = counted if counted is not None else \
        count_shared_ids(calls["correlation_id"].to_numpy(dtype="int64"), calls["global_pid"].to_numpy(dtype="int64"))
    return [Note(N.SHARED_CORRELATION_IDS, f"{n} correlation ids occur in several processes: ops joined to calls "
                 "per process", n)] if n else []


def count_shared_ids(corr: np.ndarray, pid: np.ndarray) -> int:
    """How many distinct ids occur with more than one distinct process. nsys' correlation ids
    count up per process, so they are dense: a presence table per process (one byte per id) and a
    sum over processes; ids spread too wide for that go through one lexsort."""
    if not len(corr):
        return 0
    uniq = pd.Index(pd.unique(pid))
    if len(uniq) < 2:
        return 0
    lo, hi = int(corr.min()), int(corr.max())
    span = hi - lo + 1
    if span * len(uniq) <= proj.PRESENCE_MAX_BYTES:      # a presence table, else a sort
        present = np.zeros(len(uniq) * span, dtype=bool)
        for _, key in proj.correlation_key_blocks(uniq, pid, corr, lo, span):
            present[key] = True
        return ids_in_several_rows(present.reshape(len(uniq), span))
    pid_code = uniq.get_indexer(pid)
    # distinct (id, process) pairs in id order, then ids that occur with several processes
    order = np.lexsort((pid_code, corr))
    c, p = corr[order], pid_code[order]
    ids = c[np.r_[True, (c[1:] != c[:-1]) | (p[1:] != p[:-1])]]
    return len(np.unique(ids[1:][ids[1:] == ids[:-1]]))


def ids_in_several_rows(present: np.ndarray) -> int:
    """How many columns (ids) of a (process x id) presence table are set in two rows or more."""
    return int((present.sum(axis=0, dtype="int32") >= 2).sum())


def invalid_text(strings: pd.Series) -> list[Note]:
    if strings.empty:
        return []
    n = int(strings.astype(str).str.contains(REPLACEMENT_CHAR, regex=False).sum())
    return [Note(N.INVALID_TEXT, f"{n} strings were not valid UTF-8: shown with U+FFFD replacement characters",
                 n)] if n else []


def graph_level_trace(graph_ops: int) -> list[Note]:
    n = int(graph_ops)
    if n > 0:
        return [Note(N.GRAPH_LEVEL_TRACE, "CUDA graphs traced at graph level: kernels inside graph replays are "
                     "invisible (profile with --cuda-graph-trace=node to see all-reduce kernels inside graphs)", n)]
    return []


def excluded_rows(tables) -> list:
    """What the read left out (read/validate.py), as the report's meta carries it."""
    return list((tables.meta or {}).get(EXCLUDED, []) or [])


def input_notes(tables, ranges: pd.DataFrame, shared_ids: int | None = None) -> dict:
    """The checks that look at the calls, ranges, marks and strings only (not at the GPU ops),
    for :func:`notes_from_counts`: worked out before the ops are read, so the call and range
    tables can be let go of (mapstep.py). ``shared_ids``: :func:`count_shared_ids` of the calls
    where the preparation counted it (run/launches.needed_calls)."""
    return {"marks_only": marks_only(ranges, tables.marks),
            "unclosed": unclosed_ranges(ranges),
            "cross_thread": cross_thread_ranges(getattr(tables, "cross_thread_ranges", 0)),
            "identical": identical_ranges(ranges),
            "negative_ids": int((tables.calls["global_tid"] < 0).sum()) + int((ranges["global_tid"] < 0).sum()),
            "shared_correlation": shared_correlation_ids(tables.calls, shared_ids),
            "invalid_text": invalid_text(tables.strings),
            "excluded": excluded_rows(tables),
            "uvm": int((tables.meta or {}).get("uvm_migrations") or 0),
            "uvm_events": unified_memory_events(tables.meta)}


def notes_from_counts(pre: dict, c: dict) -> list[Note]:
    """Every note of one report, in order, from :func:`input_notes` and the op figures counted
    chunk by chunk (unlinked, zero, negative_pid, graph, excluded)."""
    return (validate.exclusion_notes(pre.get("excluded", []) + c.get("excluded", []))
            + pre["marks_only"] + unlinked_note(c["unlinked"], pre.get("uvm", 0)) + pre["uvm_events"]
            + pre["unclosed"] + pre["cross_thread"]
            + pre["identical"] + zero_length_note(c["zero"]) + negative_ids_note(pre["negative_ids"] + c["negative_pid"])
            + pre["shared_correlation"] + pre["invalid_text"] + graph_level_trace(c["graph"]))
