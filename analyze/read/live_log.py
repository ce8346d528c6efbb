"""Reading the timing log of the shim's live mode (``SPECPROF_TIMING=1``; docs/live.md): one
Parquet file or a directory of them (all ranks, all processes) into one per-cycle DataFrame.

Pure functions; the schema is checked against the columns this module needs (a file written by a
newer shim with more columns is fine). An unreadable file raises :class:`~analyze.errors.CorruptReport`,
a readable one that is not a live log (or lacks a needed column) :class:`~analyze.errors.UnsuitableInput`,
a path without any log :class:`~analyze.errors.MissingInput`; each with one line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..errors import CorruptReport, MissingInput, UnsuitableInput
from nvtx_annotate.live.log import OPEN_SUFFIX, SUFFIX, read_stream
from nvtx_annotate.protocol import parse_lens

SCHEMA_VERSIONS = (1,)
"""The log schema versions this reader knows (``specprof.schema_version`` in the file metadata)."""

REQUIRED = {"rank": "int", "pid": "int", "cycle": "int", "host_start_ns": "int", "host_end_ns": "int",
            "draft_ns": "int", "verify_ns": "int", "draft_extend_ns": "int", "allreduce_ns": "int",
            "accepted_tokens": "int", "requests": "int", "steps": "int"}
"""Column -> kind, the columns the reader needs."""

COLUMNS = ("rank", "pid", "cycle", "start_ns", "end_ns", "period_ns", "draft_ns", "verify_ns", "draft_extend_ns",
           "allreduce_ns", "accepted", "requests", "tokens", "steps", "timed", "replay_ns", "draft_replay_ns", "accept_lens",
           "shim_ns", "sink_ns")
TEXT_COLUMNS = ("accept_lens",)
"""The columns of :func:`live_cycles`' frame (nullable Int64 each but :data:`TEXT_COLUMNS`: ``accept_lens``,
the per-request accept lengths ``"a,b,..."``, None where not logged). ``timed``: 1 where the cycle's CUDA
events were recorded, 0 where the shim's sampling left them out (``SPECPROF_TIMING_SAMPLE``); 1 in logs
written before the sampling (every cycle was timed). ``replay_ns``: the GPU stream time of the cycle's
CUDA-graph replays (the sum of the log's ``<phase>_replay_ns``; null where none was timed, and in logs
written before they were logged); ``draft_replay_ns``: the draft graph's alone (the GPU time of the draft
forwards, without the host time the draft phase's span holds; null likewise). ``shim_ns`` / ``sink_ns``: the
shim's own host time on the worker thread and its sink thread's CPU time that the row carries (what the shim
costs, nvtx_annotate/live/events.py and sink.py; null in logs written before they were logged)."""

REPLAY_COLUMNS = ("draft_replay_ns", "verify_replay_ns", "draft_extend_replay_ns")
"""The log's per-phase graph-replay times (optional columns; nvtx_annotate/live/events.py)."""


def log_files(path) -> list[Path]:
    """The log files at ``path`` (a file, or a directory: its ``*.parquet`` and each ``*.arrows`` without a
    ``.parquet`` of its name, not the ``.parquet.tmp`` of a file being completed), sorted by name; the
    directory listed once (a file being completed meanwhile is read by :func:`read_log` from its twin)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if p.is_dir():
        names = [f.name for f in p.iterdir() if f.is_file()]
        done = {n[: -len(SUFFIX)] for n in names if n.endswith(SUFFIX)}
        files = sorted(p / n for n in names if n.endswith(SUFFIX) or n.endswith(OPEN_SUFFIX)
                       and n[: -len(OPEN_SUFFIX)] not in done)
        if not files:
            raise MissingInput(f"{p}: no timing log (*.parquet, *.arrows) in this directory", path=p)
        return files
    raise MissingInput(f"{p}: no such file or directory", path=p)


def is_open_file(path) -> bool:
    """An open log file (the stream a process writes until it completes the file)."""
    return Path(path).name.endswith(OPEN_SUFFIX)


def schema_problems(schema) -> list[str]:
    """What makes a pyarrow schema no live log of a known version (empty: fine)."""
    import pyarrow as pa

    out = []
    meta = schema.metadata or {}
    version = meta.get(b"specprof.schema_version")
    if version is None:
        out.append("no specprof.schema_version metadata (not a specprof live log)")
    elif not version.isdigit() or int(version) not in SCHEMA_VERSIONS:
        out.append(f"schema version {version.decode(errors='replace')} (this reader knows {SCHEMA_VERSIONS})")
    names = set(schema.names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        out.append("missing column(s) " + ", ".join(missing))
    wrong = [c for c in REQUIRED if c in names and not pa.types.is_integer(schema.field(c).type)]
    if wrong:
        out.append("non-integer column(s) " + ", ".join(f"{c} ({schema.field(c).type})" for c in wrong))
    return out


def file_metadata(path) -> dict:
    """A log file's metadata (:func:`metadata_of` its schema)."""
    return metadata_of(_schema(path))


def metadata_of(schema) -> dict:
    """A log's metadata: schema_version, rank, pid (int), wall_offset_ns (int), spec_config (dict).
    A value that does not parse as its kind (an integer, a JSON object) is left out, as if absent: the rows
    carry rank and pid themselves, and a log without a usable spec_config is read as one without it."""
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (schema.metadata or {}).items()
            if k.startswith(b"specprof.")}
    out = {}
    for key, value in meta.items():
        name = key.split(".", 1)[1]
        if name == "spec_config":
            try:
                spec = json.loads(value)
            except ValueError:
                continue
            if isinstance(spec, dict):
                out[name] = spec
        elif name in INT_METADATA:
            try:
                out[name] = int(value)
            except ValueError:
                continue
        else:
            out[name] = value
    return out


INT_METADATA = ("rank", "pid", "wall_offset_ns", "schema_version")
"""The metadata keys (after ``specprof.``) that hold an integer."""


def _schema(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if is_open_file(path):
            with pa.OSFile(str(path), "rb") as f:
                return pa.ipc.open_stream(f).schema
        return pq.read_schema(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:     # a damaged footer's names may not decode
        raise CorruptReport(f"{path}: not a readable {_format(path)} ({_first_line(exc)})", path=path) from None


def _first_line(exc) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _format(path) -> str:
    return "Arrow IPC stream" if is_open_file(path) else "Parquet file"


class LogRead(NamedTuple):
    """One log file as read: its rows (None: none could be read), its metadata (:func:`metadata_of`), the file
    read (an open file completed meanwhile: its Parquet twin), whether that is an open file (a stream) and whether
    it ends inside a batch."""
    frame: pd.DataFrame | None
    meta: dict
    path: Path
    open: bool
    cut: bool


def read_log_file(path) -> pd.DataFrame:
    """One validated log file's rows as written (its columns, nullable Int64)."""
    return read_log(path).frame


def read_log(path) -> LogRead:
    """One validated log file (:class:`LogRead`; an open file's whole batches). An open file gone when read (its
    process completed it: renamed to Parquet) is read from its twin; an open file without even its schema is
    read as no rows (``frame`` None, ``cut``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    opened, cut = is_open_file(path), False
    if opened:
        try:
            schema, batches, cut = read_stream(path)
        except FileNotFoundError:
            twin = path.with_name(path.name[: -len(OPEN_SUFFIX)] + SUFFIX)
            if twin.is_file():
                return read_log(twin)
            return LogRead(None, {}, path, True, False)     # gone, and no twin: deleted (max_files)
        except OSError as exc:
            raise CorruptReport(f"{path}: not a readable Arrow IPC stream ({_first_line(exc)})", path=path) from None
        if schema is None:
            return LogRead(None, {}, path, True, True)
    else:
        schema = _schema(path)
    try:
        problems = schema_problems(schema)
    except UnicodeDecodeError as exc:       # a damaged schema whose names do not decode
        raise CorruptReport(f"{path}: not a readable {_format(path)} ({_first_line(exc)})", path=path) from None
    if problems:
        raise UnsuitableInput(f"{path}: not a specprof timing log: " + "; ".join(problems), path=path)
    try:
        table = pa.Table.from_batches(batches, schema) if opened else pq.read_table(path)
        frame = table.to_pandas(types_mapper=_nullable)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise CorruptReport(f"{path}: not a readable {_format(path)} ({_first_line(exc)})", path=path) from None
    return LogRead(frame, metadata_of(schema), path, opened, cut)


def _nullable(arrow_type):
    import pyarrow as pa

    return pd.Int64Dtype() if pa.types.is_integer(arrow_type) else None


OWN_COST_COLUMNS = ("shim_ns", "sink_ns")
"""The shim's own cost the log's rows carry (optional columns: logs written before them lack them)."""
ID_COLUMNS = ("rank", "pid", "cycle", "host_start_ns", "host_end_ns")
"""A row without one of these (or with a negative one, or ending before it starts) is no cycle."""
VALUE_COLUMNS = ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns", "gpu_span_ns", *REPLAY_COLUMNS,
                 "draft_host_ns", "verify_host_ns", "draft_extend_host_ns", "allreduce_host_ns",
                 "accepted_tokens", "requests", "verified_tokens", "steps", "batch_size", *OWN_COST_COLUMNS)
"""Times and counts that are never negative; a time is also never far longer than its process's log."""
TIME_SLACK_NS = 60 * 10**9
"""A time longer than its process's whole log plus this is no measurement (a cycle's GPU work may run past
its host end, a one-cycle process's more than its log: not by a minute)."""
ROWS_LEFT_OUT, DUPLICATES_LEFT_OUT, VALUES_NULLED = "rows", "duplicates", "values"


def clean_rows(raw: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The rows the analysis may sum, and what was set aside (counts): a row without rank, pid, cycle or
    host times, with a negative one, or ending before it starts, is left out (``rows``); a second row of
    one (rank, pid, cycle) is left out (``duplicates``); a value that is no number, a negative time or
    count, a time longer than its process's whole log (first host start to last host end) plus
    :data:`TIME_SLACK_NS` and a ``timed`` flag other than 0 or 1 are nulled (``values``: not measured,
    never summed)."""
    ids = [c for c in ID_COLUMNS if c in raw.columns]
    x = raw[ids].apply(pd.to_numeric, errors="coerce")
    bad = x.isna().any(axis=1) | (x < 0).any(axis=1)
    if {"host_start_ns", "host_end_ns"} <= set(ids):
        bad |= (x["host_end_ns"] < x["host_start_ns"]).fillna(False)
    bad = bad.to_numpy(dtype=bool)
    kept = raw[~bad]
    dup = kept.duplicated(["rank", "pid", "cycle"], keep="first").to_numpy(dtype=bool)
    df = kept[~dup].copy()
    nulled = 0
    if not len(df):
        return df, {ROWS_LEFT_OUT: int(bad.sum()), DUPLICATES_LEFT_OUT: int(dup.sum()), VALUES_NULLED: 0}
    g = df.groupby(["rank", "pid"], sort=False)
    span = (g["host_end_ns"].transform("max") - g["host_start_ns"].transform("min")).astype("Float64")
    for col in VALUE_COLUMNS:
        if col not in df.columns:
            continue
        raw_v = df[col]
        v = pd.to_numeric(raw_v, errors="coerce").astype("Float64")     # an optional column of text: numbers
        odd = (v.isna() & raw_v.notna()) | (v < 0).fillna(False)
        if col.endswith("_ns"):
            odd |= (v > span + TIME_SLACK_NS).fillna(False)
        odd = odd.fillna(False)
        nulled += int(odd.sum())
        df[col] = v.mask(odd).round().astype("Int64")
    if "timed" in df.columns:
        odd = (~df["timed"].isin([0, 1]) & df["timed"].notna()).fillna(False)
        if odd.any():
            df["timed"] = df["timed"].mask(odd)
            nulled += int(odd.sum())
    if "accept_lens" in df.columns:
        ok = accept_lens_ok(df)
        odd = ~ok & df["accept_lens"].notna().to_numpy()
        nulled += int(odd.sum())
        df["accept_lens"] = df["accept_lens"].astype(object).where(ok, None)
    return df, {ROWS_LEFT_OUT: int(bad.sum()), DUPLICATES_LEFT_OUT: int(dup.sum()), VALUES_NULLED: nulled}


def accept_lens_ok(df: pd.DataFrame) -> np.ndarray:
    """Per row: does ``accept_lens`` hold one accept length a request (``"a,b,..."``) summing to its
    ``accepted_tokens``? (nvtx_annotate.protocol.parse_lens; False where null: nothing to use.)"""
    missing = pd.Series(pd.NA, index=df.index)
    return np.array([parse_lens(text, m, n) is not None for text, m, n in
                     zip(df["accept_lens"], df.get("requests", missing), df.get("accepted_tokens", missing))],
                    dtype=bool)


def text_column(df: pd.DataFrame, name: str) -> pd.Series:
    """``df[name]`` as Python objects with None for every null (all None where the column is absent)."""
    if name not in df.columns:
        return pd.Series(None, index=df.index, dtype=object)
    return df[name].astype(object).where(df[name].notna(), None)


def cycles_frame(raw: pd.DataFrame) -> pd.DataFrame:
    """Log rows -> the per-cycle frame (:data:`COLUMNS`): sorted by rank, pid, cycle; ``period_ns``
    the host start of the process's next logged cycle minus this one's (null for its last, and
    where the next cycle number is not this one + 1: a gap of dropped cycles); ``tokens`` =
    accepted draft tokens + requests (the bonus token of each request)."""
    df = raw.sort_values(["rank", "pid", "cycle"], kind="stable").reset_index(drop=True)
    out = pd.DataFrame({
        "rank": df["rank"], "pid": df["pid"], "cycle": df["cycle"],
        "start_ns": df["host_start_ns"], "end_ns": df["host_end_ns"],
    })
    grp = df.groupby(["rank", "pid"], sort=False)
    next_start, next_cycle = grp["host_start_ns"].shift(-1), grp["cycle"].shift(-1)
    period = (next_start - df["host_start_ns"]).astype("Int64")
    # the next cycle's start, where it is the next cycle and starts later (a shuffled or clock-stepped log: unknown)
    out["period_ns"] = period.where((next_cycle == df["cycle"] + 1).fillna(False).astype(bool) & (period > 0).fillna(False),
                                    pd.NA)
    for col in ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns"):
        out[col] = df[col]
    out["accepted"] = df["accepted_tokens"]
    out["requests"] = df["requests"]
    out["tokens"] = df["accepted_tokens"] + df["requests"]
    out["steps"] = df["steps"]
    out["timed"] = df["timed"].astype("Int64").fillna(1) if "timed" in df.columns else 1
    replays = [c for c in REPLAY_COLUMNS if c in df.columns]
    out["replay_ns"] = df[replays].astype("Float64").sum(axis=1, min_count=1).round() if replays else pd.NA
    out["draft_replay_ns"] = df["draft_replay_ns"] if "draft_replay_ns" in df.columns else pd.NA
    # the per-request accept lengths, "a,b,..." (logs written before they were logged: none)
    out["accept_lens"] = text_column(df, "accept_lens")
    for col in OWN_COST_COLUMNS:
        out[col] = df[col] if col in df.columns else pd.NA
    return out.astype({c: "Int64" for c in COLUMNS if c not in TEXT_COLUMNS})


def live_cycles(path) -> pd.DataFrame:
    """The per-cycle frame of every log file at ``path`` (a file or a directory: all ranks)."""
    frames = [r.frame for r in map(read_log, log_files(path)) if r.frame is not None]
    if not frames:
        raise MissingInput(f"{path}: no cycle in its timing log files (each an open file with no batch)", path=path)
    raw = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return cycles_frame(raw)
