"""The analyzed timeline as a Perfetto trace (``--perfetto FILE``), for ui.perfetto.dev.

A Perfetto protobuf trace (the format ui.perfetto.dev and the trace processor read natively;
timestamps are integer nanoseconds, so every figure survives exactly, which the Chrome JSON format's
microsecond floats would not guarantee). Per rank, one process track ``rank R`` holding:

* ``phases``: the rank's busy time as slices named by exclusive phase: every GPU nanosecond has one
  owner (kernel-name rules, then the innermost phase range; where phases overlap the phase listed
  first wins; else ``other``), so the slices of phase P add up to the ``phases`` table's
  ``exclusive_ns`` of P on that rank, exactly;
* ``decode cycles``: one slice per cycle, from its first GPU op to the next cycle's (the last: to its
  own window end), with the cycle's number, tokens and warm-up reason as arguments;
* ``all-reduce``: per collective a ``wait`` slice (before the last rank arrived) and a ``transfer``
  slice;
* ``tokens per cycle``: a counter, one value at the start of each cycle with accept marks.

A chunked analysis (``--memory-budget``) keeps no per-op table: its trace has no ``phases`` track (the
CLI says so). Slices that would overlap on one track go to a second lane (``all-reduce 2``, ...), so every track
nests properly. Written by hand-encoding the few protobuf messages it needs (TracePacket,
TrackDescriptor, TrackEvent: field numbers from perfetto/protos/perfetto/trace/), no protobuf
library at run time; through :func:`analyze.atomic.atomic_write` (no half-written file).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analyze import opstore
from analyze.attribute.phases import OTHER
from analyze.timeline import cycles as cycles_mod

__all__ = ["phase_segments", "perfetto_bytes", "write_perfetto", "lanes", "has_phase_track"]

# protobuf wire types
_VARINT, _LEN = 0, 2
# TracePacket fields
_P_TIMESTAMP, _P_TRACK_EVENT, _P_SEQ_ID, _P_SEQ_FLAGS, _P_TRACK_DESCRIPTOR = 8, 11, 10, 13, 60
# TrackDescriptor fields
_TD_UUID, _TD_NAME, _TD_PROCESS, _TD_PARENT, _TD_COUNTER = 1, 2, 3, 5, 8
# ProcessDescriptor fields
_PD_PID, _PD_NAME = 1, 6
# TrackEvent fields and types
_TE_ANNOTATIONS, _TE_TYPE, _TE_TRACK, _TE_NAME, _TE_COUNTER = 4, 9, 11, 23, 30
_SLICE_BEGIN, _SLICE_END, _COUNTER = 1, 2, 4
# DebugAnnotation fields
_DA_INT, _DA_DOUBLE, _DA_STRING, _DA_NAME = 4, 5, 6, 10
_SEQUENCE = 1
_SEQ_INCREMENTAL_STATE_CLEARED = 1


def _varint(value: int) -> bytes:
    value = int(value)
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, _VARINT) + _varint(value)


def _bytes(field: int, payload: bytes) -> bytes:
    return _key(field, _LEN) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _bytes(field, str(text).encode("utf-8"))


def _double(field: int, value: float) -> bytes:
    return _key(field, 1) + np.float64(value).tobytes()


def _annotation(name: str, value) -> bytes:
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        body = _int(_DA_INT, int(value))
    elif isinstance(value, (float, np.floating)):
        body = _double(_DA_DOUBLE, float(value))
    else:
        body = _str(_DA_STRING, str(value))
    return _bytes(_TE_ANNOTATIONS, body + _str(_DA_NAME, name))


# every message's fields are written in field-number order, as protobuf itself serializes them


def _packet(body: bytes, timestamp: int | None = None, first: bool = False) -> bytes:
    """A TracePacket; ``body`` is its track_event (11) or track_descriptor (60) field."""
    head = _int(_P_TIMESTAMP, timestamp) if timestamp is not None else b""
    head += _int(_P_SEQ_ID, _SEQUENCE)
    event, descriptor = (body, b"") if body[:1] == _key(_P_TRACK_EVENT, _LEN) else (b"", body)
    flags = _int(_P_SEQ_FLAGS, _SEQ_INCREMENTAL_STATE_CLEARED) if first else b""
    return _bytes(1, head + event + flags + descriptor)   # Trace.packet = 1


def _track(uuid: int, name: str, parent: int | None = None, pid: int | None = None, counter: bool = False) -> bytes:
    body = _int(_TD_UUID, uuid) + _str(_TD_NAME, name)
    if pid is not None:
        body += _bytes(_TD_PROCESS, _int(_PD_PID, pid) + _str(_PD_NAME, name))
    if parent is not None:
        body += _int(_TD_PARENT, parent)
    if counter:
        body += _bytes(_TD_COUNTER, b"")
    return _bytes(_P_TRACK_DESCRIPTOR, body)


def _event(kind: int, track: int, name: str | None = None, counter: int | None = None, args=()) -> bytes:
    body = b"".join(_annotation(k, v) for k, v in args)
    body += _int(_TE_TYPE, kind) + _int(_TE_TRACK, track)
    if name is not None:
        body += _str(_TE_NAME, name)
    if counter is not None:
        body += _int(_TE_COUNTER, counter)
    return _bytes(_P_TRACK_EVENT, body)


# ---------------------------------------------------------------------------------------------
# what goes on the tracks


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted, merged intervals covering [start, end) (zero-length ones add nothing)."""
    keep = end > start
    s, e = start[keep], end[keep]
    if not len(s):
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx)


def _difference(a_s, a_e, b_s, b_e) -> tuple[np.ndarray, np.ndarray]:
    """Union ``a`` minus union ``b`` where ``b`` lies inside ``a`` (both merged): the pieces of a
    not covered by b."""
    pos = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate([np.ones(len(a_s)), -np.ones(len(a_e)), -np.ones(len(b_s)), np.ones(len(b_e))])
    if not len(pos):
        return np.zeros(0, dtype="int64"), np.zeros(0, dtype="int64")
    u, inv = np.unique(pos, return_inverse=True)
    level = np.cumsum(np.bincount(inv, weights=delta, minlength=len(u)))[:-1]
    on = np.flatnonzero(level > 0.5)
    s, e = u[on], u[on + 1]
    if not len(s):
        return s.astype("int64"), e.astype("int64")
    join = np.r_[True, s[1:] != e[:-1]]            # merge pieces that touch
    idx = np.flatnonzero(join)
    ends = np.r_[idx[1:] - 1, len(s) - 1]
    return s[idx].astype("int64"), e[ends].astype("int64")


def phase_segments(ops: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """Per rank, the busy timeline cut into disjoint segments, each owned by one phase (ops of
    phase i cover what phases 0..i-1 left, in ``phase_names`` order, then ``other``): columns
    rank, phase, start_ns, end_ns. Per rank and phase the lengths add up to the exclusive time."""
    order = [p for p in phase_names if p != OTHER] + [OTHER]
    code_of = {p: i for i, p in enumerate(order)}
    rows = []
    for rank, g in ops.groupby("rank", sort=True):
        start = g["start_ns"].to_numpy(dtype="int64")
        end = g["end_ns"].to_numpy(dtype="int64")
        code = g["phase"].map(code_of).fillna(len(order) - 1).to_numpy(dtype="int64")
        prev_s = prev_e = np.zeros(0, dtype="int64")
        for i, name in enumerate(order):
            m = code <= i
            cur_s, cur_e = _union(start[m], end[m])
            s, e = _difference(cur_s, cur_e, prev_s, prev_e)
            if len(s):
                rows.append(pd.DataFrame({"rank": int(rank), "phase": name, "start_ns": s, "end_ns": e}))
            prev_s, prev_e = cur_s, cur_e
    if not rows:
        return pd.DataFrame({"rank": pd.Series(dtype="int64"), "phase": pd.Series(dtype=object),
                             "start_ns": pd.Series(dtype="int64"), "end_ns": pd.Series(dtype="int64")})
    return pd.concat(rows, ignore_index=True).sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)


def lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Lane of every slice (in start order) so that slices on one lane never overlap: the first
    lane whose last slice ended by this one's start."""
    order = np.argsort(start, kind="stable")
    lane = np.zeros(len(start), dtype="int64")
    last_end: list[int] = []
    for i in order:
        s = int(start[i])
        for k, e in enumerate(last_end):
            if e <= s:
                lane[i] = k
                last_end[k] = int(end[i])
                break
        else:
            lane[i] = len(last_end)
            last_end.append(int(end[i]))
    return lane


def _cycle_slices(cycles: pd.DataFrame) -> pd.DataFrame:
    """Per cycle with GPU data its GPU period (the cycle table's ``gpu_period_start_ns`` to
    ``gpu_period_end_ns``: first op to the next cycle's first op, the last to its window end)."""
    c = cycles_mod.with_gpu(cycles)
    if c is None or c.empty:
        return cycles.iloc[0:0].assign(slice_end_ns=pd.Series(dtype="int64"))
    c = c.sort_values(["rank", "gpu_period_start_ns"], kind="stable")
    return c.assign(start_ns=c["gpu_period_start_ns"].astype("int64"),
                    slice_end_ns=c["gpu_period_end_ns"].astype("int64"))


def has_phase_track(a) -> bool:
    """Whether the analysis has GPU ops to cut the ``phases`` track from (its op store: the per-op
    table, or the spilled ops of a chunked ``--memory-budget`` analysis)."""
    return len(opstore.of(a)) > 0


def store_segments(a) -> pd.DataFrame:
    """:func:`phase_segments` of the analysis' op store, a rank at a time (a chunked analysis' ops
    are read one rank's at once, never all)."""
    store, columns = opstore.of(a), ["rank", "start_ns", "end_ns", "phase"]
    parts = [phase_segments(store.query(columns, ranks=[r]), a.phase_names) for r in sorted(set(a.ranks["rank"]))]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else phase_segments(store.query(columns, ranks=[]),
                                                                             a.phase_names)


def perfetto_bytes(a) -> bytes:
    """The trace (see the module docstring) as bytes."""
    out = bytearray()
    first = True
    uuid = iter(range(1, 1 << 62))
    events: list[tuple[int, int, bytes]] = []        # (timestamp, order at equal time, event)
    segments = store_segments(a) if has_phase_track(a) else None
    cycles = a.cycles if a.cycles is not None else pd.DataFrame()
    coll = a.collectives if a.collectives is not None else pd.DataFrame()

    def add_track(name: str, parent: int | None = None, pid: int | None = None, counter: bool = False) -> int:
        nonlocal first
        u = next(uuid)
        out.extend(_packet(_track(u, name, parent, pid, counter), first=first))
        first = False
        return u

    def slices(track_name: str, parent: int, starts, ends, names, args_list) -> None:
        starts = np.asarray(starts, dtype="int64")
        ends = np.asarray(ends, dtype="int64")
        keep = ends > starts                  # a zero-length slice would end before it begins
        if not keep.all():
            names = [n for n, k in zip(names, keep) if k]
            args_list = [x for x, k in zip(args_list, keep) if k]
            starts, ends = starts[keep], ends[keep]
        if not len(starts):
            return
        lane = lanes(starts, ends)
        tracks = {}
        for k in range(int(lane.max()) + 1):
            tracks[k] = add_track(track_name if k == 0 else f"{track_name} {k + 1}", parent)
        for s, e, n, ln, args in zip(starts.tolist(), ends.tolist(), names, lane.tolist(), args_list):
            events.append((s, 1, _event(_SLICE_BEGIN, tracks[ln], name=n, args=args)))
            events.append((e, 0, _event(_SLICE_END, tracks[ln])))

    for r in sorted(int(x) for x in a.ranks["rank"]):
        proc = add_track(f"rank {r}", pid=r + 1)
        if segments is not None:
            seg = segments[segments["rank"] == r]
            slices("phases", proc, seg["start_ns"], seg["end_ns"], seg["phase"].tolist(), [()] * len(seg))
        if len(cycles):
            c = _cycle_slices(cycles[cycles["rank"] == r])
            args = []
            has_warm = "warmup" in c.columns
            for row in c.itertuples(index=False):
                items = [("cycle", int(row.cycle))]
                tok = getattr(row, "tokens", None)
                if not pd.isna(tok):
                    items.append(("tokens", int(tok)))
                if has_warm and not pd.isna(row.warmup) and row.warmup not in (False, ""):
                    items.append(("warmup", str(getattr(row, "warmup_reason", row.warmup))))
                args.append(items)
            slices("decode cycles", proc, c["start_ns"], c["slice_end_ns"],
                   [f"cycle {int(x)}" for x in c["cycle"]], args)
            tok = c[pd.to_numeric(c.get("tokens"), errors="coerce").notna()] if "tokens" in c.columns else c.iloc[0:0]
            if len(tok):
                ctr = add_track("tokens per cycle", proc, counter=True)
                for s, v in zip(tok["start_ns"].astype("int64").tolist(), tok["tokens"].astype("int64").tolist()):
                    events.append((s, 2, _event(_COUNTER, ctr, counter=v)))
        if len(coll):
            k = coll[coll["rank"] == r]
            s = k["start_ns"].to_numpy(dtype="int64")
            w = k["wait_ns"].to_numpy(dtype="int64")
            e = k["end_ns"].to_numpy(dtype="int64")
            ids = k["collective"].to_numpy(dtype="int64")
            starts = np.concatenate([s, s + w])
            ends = np.concatenate([s + w, e])
            keep = ends > starts
            names = np.array(["wait"] * len(s) + ["transfer"] * len(s), dtype=object)
            args = [[("collective", int(i))] for i in np.concatenate([ids, ids])]
            slices("all-reduce", proc, starts[keep], ends[keep], names[keep].tolist(),
                   [args[i] for i in np.flatnonzero(keep)])
    events.sort(key=lambda t: (t[0], t[1]))
    for ts, _, body in events:
        out.extend(_packet(body, timestamp=ts, first=first))
        first = False
    return bytes(out)


def write_perfetto(a, path) -> Path:
    """Write :func:`perfetto_bytes` to ``path`` atomically; returns the path."""
    from analyze.atomic import atomic_write

    data = perfetto_bytes(a)
    with atomic_write(path, "wb", encoding=None) as f:
        f.write(data)
    return Path(path)
