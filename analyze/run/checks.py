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

REPLACEMENT_CHAR = "\ufffd"


def unlinked_ops(op_call: np.ndarray) -> list[Note]:
    return unlinked_note(int((op_call < 0).sum()))


def unlinked_note(missing: int) -> list[Note]:
    if not missing:
        return []
    return [Note(N.UNLINKED_OPS, f"{missing} GPU ops had no launching API call (sliced capture?): phase by "
                 "kernel name only, else `other`", missing)]


def zero_length_ops(ops: pd.DataFrame) -> list[Note]:
    return zero_length_note(int((ops["end_ns"] == ops["start_ns"]).sum()))


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
    if ranges.empty:
        return []
    # sorted by (thread, start, end): a duplicate sits right after its twin (no hashing of tuples)
    tid, start, end = (ranges[c].to_numpy(dtype="int64") for c in ("global_tid", "start_ns", "end_ns"))
    order = np.lexsort((end, start, tid))
    t, s, e = tid[order], start[order], end[order]
    n = int(((t[1:] == t[:-1]) & (s[1:] == s[:-1]) & (e[1:] == e[:-1])).sum())
    return [Note(N.IDENTICAL_RANGES, f"{n} NVTX ranges have the same bounds as another range on their thread "
                 "(nested in order of appearance)", n)] if n else []


def marks_only(ranges: pd.DataFrame, marks: pd.DataFrame) -> list[Note]:
    if ranges.empty and len(marks):
        return [Note(N.MARKS_ONLY, f"NVTX marks only ({len(marks)}), no ranges: every GPU op is in `other` "
                     "unless a kernel pattern names its phase", len(marks))]
    if ranges.empty:
        return [Note(N.NO_NVTX_RANGES, "no NVTX ranges: every GPU op is in `other` unless a kernel pattern "
                     "names its phase", 0)]
    return []


def negative_ids(calls: pd.DataFrame, ranges: pd.DataFrame, ops: pd.DataFrame,
                 negative_ops: int | None = None) -> list[Note]:
    """``negative_ops``: the ops' count when counted chunk by chunk (then ``ops`` is not read)."""
    n = int((calls["global_tid"] < 0).sum()) + int((ranges["global_tid"] < 0).sum()) + \
        (int((ops["global_pid"] < 0).sum()) if negative_ops is None else negative_ops)
    return negative_ids_note(n)


def negative_ids_note(n: int) -> list[Note]:
    return [Note(N.NEGATIVE_IDS, f"{n} rows carry a negative globalTid/globalPid (high hardware id bit): masked, "
                 "not dropped", n)] if n else []


def shared_correlation_ids(calls: pd.DataFrame) -> list[Note]:
    if calls.empty:
        return []
    n = count_shared_ids(calls["correlation_id"].to_numpy(dtype="int64"), calls["global_pid"].to_numpy(dtype="int64"))
    return [Note(N.SHARED_CORRELATION_IDS, f"{n} correlation ids occur in several processes: ops joined to calls "
                 "per process", n)] if n else []


# a presence table (one byte per (process, id)) is used up to this many bytes, else a sort
PRESENCE_MAX_BYTES = 256 << 20


def count_shared_ids(corr: np.ndarray, pid: np.ndarray) -> int:
    """How many distinct ids occur with more than one distinct process. nsys' correlation ids
    count up per process, so they are dense: a presence table per process (one byte per id) and a
    sum over processes; ids spread too wide for that go through one lexsort."""
    if not len(corr):
        return 0
    pid_code, uniq = pd.factorize(pid)
    if len(uniq) < 2:
        return 0
    lo, hi = int(corr.min()), int(corr.max())
    span = hi - lo + 1
    if span * len(uniq) <= PRESENCE_MAX_BYTES:
        present = np.zeros((len(uniq), span), dtype=bool)
        present[pid_code, corr - lo] = True
        return int((present.sum(axis=0, dtype="int32") >= 2).sum())
    # distinct (id, process) pairs in id order, then ids that occur with several processes
    order = np.lexsort((pid_code, corr))
    c, p = corr[order], pid_code[order]
    ids = c[np.r_[True, (c[1:] != c[:-1]) | (p[1:] != p[:-1])]]
    return len(np.unique(ids[1:][ids[1:] == ids[:-1]]))


def invalid_text(strings: pd.Series) -> list[Note]:
    if strings.empty:
        return []
    n = int(strings.astype(str).str.contains(REPLACEMENT_CHAR, regex=False).sum())
    return [Note(N.INVALID_TEXT, f"{n} strings were not valid UTF-8: shown with U+FFFD replacement characters",
                 n)] if n else []


def graph_level_trace(meta: dict, ops: pd.DataFrame, graph_ops: int | None = None) -> list[Note]:
    n = int(graph_ops) if graph_ops is not None else int((ops["kind"] == "graph").sum())
    if n > 0:
        return [Note(N.GRAPH_LEVEL_TRACE, "CUDA graphs traced at graph level: kernels inside graph replays are "
                     "invisible (profile with --cuda-graph-trace=node to see all-reduce kernels inside graphs)", n)]
    return []


def all_notes(tables, ops: pd.DataFrame, op_call: np.ndarray, ranges: pd.DataFrame,
              op_counts: dict | None = None) -> list[Note]:
    """Every note of one report. ``op_counts`` (unlinked, zero, negative_pid, graph): the op
    figures counted chunk by chunk, when ``ops`` is not the whole op table (chunked.py)."""
    if op_counts is not None:
        return _notes_from_counts(tables, ranges, op_counts)
    notes: list[Note] = []
    notes += marks_only(ranges, tables.marks)
    notes += unlinked_ops(op_call)
    notes += unclosed_ranges(ranges)
    notes += cross_thread_ranges(getattr(tables, "cross_thread_ranges", 0))
    notes += identical_ranges(ranges)
    notes += zero_length_ops(ops)
    notes += negative_ids(tables.calls, ranges, ops)
    notes += shared_correlation_ids(tables.calls)
    notes += invalid_text(tables.strings)
    notes += graph_level_trace(tables.meta, ops)
    return notes


def _notes_from_counts(tables, ranges: pd.DataFrame, c: dict) -> list[Note]:
    """:func:`all_notes`, same lines in the same order, with the op checks from counts."""
    return notes_from_counts(input_notes(tables, ranges), c)


def input_notes(tables, ranges: pd.DataFrame) -> dict:
    """The checks that look at the calls, ranges, marks and strings only (not at the GPU ops),
    for :func:`notes_from_counts`: worked out before the ops are read, so the call and range
    tables can be let go of (chunked.py)."""
    return {"marks_only": marks_only(ranges, tables.marks),
            "unclosed": unclosed_ranges(ranges),
            "cross_thread": cross_thread_ranges(getattr(tables, "cross_thread_ranges", 0)),
            "identical": identical_ranges(ranges),
            "negative_ids": int((tables.calls["global_tid"] < 0).sum()) + int((ranges["global_tid"] < 0).sum()),
            "shared_correlation": shared_correlation_ids(tables.calls),
            "invalid_text": invalid_text(tables.strings)}


def notes_from_counts(pre: dict, c: dict) -> list[Note]:
    """:func:`all_notes` from :func:`input_notes` and the op figures counted chunk by chunk
    (unlinked, zero, negative_pid, graph)."""
    return (pre["marks_only"] + unlinked_note(c["unlinked"]) + pre["unclosed"] + pre["cross_thread"]
            + pre["identical"] + zero_length_note(c["zero"]) + negative_ids_note(pre["negative_ids"] + c["negative_pid"])
            + pre["shared_correlation"] + pre["invalid_text"] + graph_level_trace({}, None, graph_ops=c["graph"]))
