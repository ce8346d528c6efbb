"""Rows that nsys never writes, counted and left out at the read, so that no corrupt row becomes a
confident number: GPU ops, API calls and NVTX events with a NULL or non-integer timestamp (a text
value in ``start``), an end before the start, GPU ops outside the capture session (before 0 or after
the session's duration, ``ANALYSIS_DETAILS.duration``), and exact duplicate GPU op rows.

Each check is a small function over the columns as read (NumPy/pandas), returning a keep-mask; what
was left out travels with the rows as :data:`Exclusion` tuples (table kind, problem, rows) and becomes
one note per problem (:func:`exclusion_notes`). After these checks every duration is >= 0, so no
kernel total is negative, and no op is counted twice, so kernel time never exceeds busy time.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.notes import Note

# problems, in the order notes are given
BAD_TIMESTAMPS = "bad_timestamps"
NEGATIVE_DURATION = "negative_duration"
OUTSIDE_SESSION = "outside_session"
DUPLICATE_ROWS = "duplicate_rows"
BAD_IDS = "bad_ids"
PROBLEMS = (BAD_TIMESTAMPS, NEGATIVE_DURATION, OUTSIDE_SESSION, DUPLICATE_ROWS, BAD_IDS)
NOTE_CODE = {BAD_TIMESTAMPS: N.BAD_TIMESTAMPS, NEGATIVE_DURATION: N.NEGATIVE_DURATIONS,
             OUTSIDE_SESSION: N.OUTSIDE_SESSION, DUPLICATE_ROWS: N.DUPLICATE_ROWS, BAD_IDS: N.BAD_IDS}

# the largest value an int64 timestamp column can carry exactly through float64 (NULLs make floats)
EXACT_FLOAT = 2 ** 53


class Exclusion(NamedTuple):
    """``rows`` rows of ``table`` (an op kind, ``api_call`` or ``nvtx``) left out for ``problem``."""

    table: str
    problem: str
    rows: int


def integer_values(column) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, valid mask) of a timestamp column as read: integers pass; NULL (NaN), text,
    fractional or non-finite numbers are invalid (their value is 0)."""
    values = np.asarray(column)
    if values.dtype == np.int64:
        return values, np.ones(len(values), dtype=bool)
    if values.dtype.kind in "iu":
        return values.astype("int64"), np.ones(len(values), dtype=bool)
    if values.dtype.kind == "f":
        ok = np.isfinite(values) & (values == np.floor(values)) & (np.abs(values) < 2.0 ** 63)
        return np.where(ok, values, 0).astype("int64"), ok
    # object: Python ints, floats, text, None. A column whose values change type mid-table may hold
    # integers as text ("5402893519"; the ADBC reader, gone since issue 42, gave such a column as
    # text throughout): integer text is the integer it shows
    # (SQLite's INTEGER affinity stores every integer-looking text as an integer, so only text that
    # does not look like one was text in the file)
    out = np.zeros(len(values), dtype="int64")
    ok = np.zeros(len(values), dtype=bool)
    for i, v in enumerate(values.tolist()):
        if isinstance(v, str):
            v = _number(v)
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, int):
            if -(2 ** 63) <= v < 2 ** 63:
                out[i], ok[i] = v, True
        elif isinstance(v, float) and np.isfinite(v) and v == int(v) and abs(v) < 2.0 ** 63:
            out[i], ok[i] = int(v), True
    return out, ok


def _number(text: str):
    """The number a text shows (int, float), or None."""
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return None


def timestamp_mask(start, end) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, ok, negative): int64 timestamps, rows whose both timestamps are integers, and of
    those the rows whose end is before their start."""
    s, s_ok = integer_values(start)
    e, e_ok = integer_values(end)
    ok = s_ok & e_ok
    negative = ok & (e < s)
    return s, e, ok, negative


MAX_TIME_NS = 2 ** 53
"""No capture lasts 2**53 ns (104 days): where the export does not say how long its session was, rows
ending later are outside it (times that large, summed, would overflow 64-bit totals)."""


def session_mask(start: np.ndarray, end: np.ndarray, session_end_ns: int | None) -> np.ndarray:
    """Rows inside the capture session [0, ``session_end_ns``] ([0, MAX_TIME_NS] when the export
    does not say)."""
    limit = MAX_TIME_NS if session_end_ns is None else min(int(session_end_ns), MAX_TIME_NS)
    return (start >= 0) & (end <= limit)


def duplicate_mask(frame: pd.DataFrame, start: np.ndarray) -> np.ndarray:
    """Rows that repeat an earlier row exactly (every column read). nsys writes op tables in start
    order: then only rows whose start equals a neighbour's can be duplicates (an O(n) pass finds
    them, usually none); otherwise every row is compared."""
    n = len(start)
    dup = np.zeros(n, dtype=bool)
    if n < 2:
        return dup
    step = np.diff(start)
    if (step >= 0).all():
        same = step == 0
        if not same.any():
            return dup
        within = duplicates_within_runs(frame, start)
        if within is not None:
            return within
        candidates = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
    else:
        candidates = np.arange(n)
    # a 64-bit mix of every column first (sorted, neighbours compared: no hash table); only rows
    # whose mix repeats are compared exactly
    mixed = row_mix(frame.iloc[candidates] if len(candidates) < n else frame)
    ordered = np.sort(mixed)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if not len(repeated):
        return dup
    suspects = candidates[np.isin(mixed, repeated)]
    dup[suspects[frame.iloc[suspects].duplicated(keep="first").to_numpy()]] = True
    return dup


# longest run of rows with one start compared pair by pair (duplicates_within_runs; each distance costs
# a pass per column still equal); longer runs take the mix
RUN_PAIRS_MAX = 16


def duplicates_within_runs(frame: pd.DataFrame, start: np.ndarray) -> np.ndarray | None:
    """:func:`duplicate_mask` of rows sorted by start: a repeat has its original's start, so it lies
    at most the length of its run of equal starts behind it. Per distance d, rows i and i - d are
    compared a column at a time over the whole shifted columns (NA equals NA, as
    ``DataFrame.duplicated``), until no pair is left: a column that tells the rows apart (a process,
    a stream) ends a distance at once, where hashing every column of every such row (the mix) took
    1.5 s at 10M kernels of ranks with equal timestamps. None where a run is longer than
    RUN_PAIRS_MAX rows."""
    n = len(start)
    dup = np.zeros(n, dtype=bool)
    columns = []
    for c in frame.columns:
        values = frame[c].to_numpy()
        na = pd.isna(values) if values.dtype.kind in "fcOmM" else None
        columns.append((values, na if na is not None and na.any() else None))
    for d in range(1, n):
        equal = start[d:] == start[:-d]                      # pairs (i - d, i) in one run
        if not equal.any():
            return dup
        if d > RUN_PAIRS_MAX:
            return None
        for values, na in columns:
            same = values[d:] == values[:-d]
            if na is not None:
                same |= na[d:] & na[:-d]
            equal &= same
            if not equal.any():
                break
        dup[d:] |= equal
    return dup                                               # every distance up to n - 1 looked at


_MIX = np.uint64(0x9E3779B97F4A7C15)


def row_mix(frame: pd.DataFrame) -> np.ndarray:
    """One uint64 per row from every column (equal rows give equal values; unequal rows almost never
    do, and every repeat is checked exactly by the caller)."""
    out = np.zeros(len(frame), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, c in enumerate(frame.columns):
            col = frame[c]
            values = col.to_numpy()
            if values.dtype.kind in "iu":
                v = values.astype(np.int64, copy=False).view(np.uint64)
            elif values.dtype.kind == "f":
                v = np.where(np.isnan(values), -1.0, values).view(np.uint64)
            else:
                v = pd.util.hash_array(values.astype(object))
            out = (out ^ (v + np.uint64(i))) * _MIX
            out ^= out >> np.uint64(29)
    return out


def exclusions(table: str, counts: dict[str, int]) -> list[Exclusion]:
    return [Exclusion(table, p, int(counts[p])) for p in PROBLEMS if counts.get(p)]


def merge(items: Iterable) -> list[Exclusion]:
    """Exclusions summed per (table, problem), in problem order (lists from JSON come back as lists)."""
    total: dict[tuple[str, str], int] = {}
    for table, problem, rows in items:
        total[(table, problem)] = total.get((table, problem), 0) + int(rows)
    return [Exclusion(t, p, r) for (t, p), r in sorted(total.items(), key=lambda kv: (PROBLEMS.index(kv[0][1]),
                                                                                      kv[0][0])) if r]


WHAT = {"kernel": "kernels", "memcpy": "memcpys", "memset": "memsets", "graph": "graph launches",
        "api_call": "API calls", "nvtx": "NVTX events", "strings": "StringIds rows"}
WHY = {BAD_TIMESTAMPS: "a NULL or non-integer start/end timestamp",
       NEGATIVE_DURATION: "an end before their start",
       OUTSIDE_SESSION: "times outside the capture session",
       DUPLICATE_ROWS: "exact duplicates of another row",
       BAD_IDS: "an id that is not an integer, or one another row already has"}


def exclusion_notes(items: Iterable) -> list[Note]:
    """One note per problem: the rows left out (count) and of which tables."""
    merged = merge(items)
    notes = []
    for problem in PROBLEMS:
        mine = [x for x in merged if x.problem == problem]
        if not mine:
            continue
        n = sum(x.rows for x in mine)
        parts = ", ".join(f"{x.rows} {WHAT.get(x.table, x.table)}" for x in mine)
        notes.append(Note(NOTE_CODE[problem], f"{n} rows have {WHY[problem]} ({parts}): left out of every figure "
                          "(nsys never writes such rows: the export was edited or damaged)", n))
    return notes
