"""Reading one nsys SQLite export into plain DataFrames.

Tables and columns are detected by name (``PRAGMA table_info``), never by position: exports from
nsys 2022.4 (schema 3.0) to 2026.x (3.25) differ in both. A missing table means "no such events".
Only the columns the analysis needs are read; strings stay integer ids until they are needed.

Everything here is a small function returning a DataFrame; :func:`read_report` bundles them in a
:class:`ReportTables` (a named tuple, nothing more).
"""
from __future__ import annotations

import sqlite3
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import fastread, safety

TID_MASK = 0xFFFFFF
# the low 24 bits of a globalTid are the thread id; clearing them gives the globalPid
PID_OF_TID = ~np.int64(TID_MASK)

RANGE_EVENT_STYLES = {59: "PushPop", 70: "PushPop", 60: "StartEnd", 71: "StartEnd"}
MARK_EVENTS = (34,)
DOMAIN_CREATE_EVENT = 75

GPU_OP_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "graph": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"

GPU_OP_COLUMNS = ["kind", "global_pid", "device_id", "stream_id", "correlation_id", "graph_node_id",
                  "name_id", "start_ns", "end_ns"]


class ReportTables(NamedTuple):
    """What one export holds, as DataFrames (times in ns on the report's own clock)."""

    path: str
    strings: pd.Series          # index: string id, value: text
    gpu_ops: pd.DataFrame       # GPU_OP_COLUMNS
    calls: pd.DataFrame         # global_tid, global_pid, correlation_id, name_id, start_ns, end_ns
    ranges: pd.DataFrame        # global_tid, global_pid, domain, name, style, start_ns, end_ns, end_missing
    marks: pd.DataFrame         # global_tid, global_pid, domain, text, time_ns, int_value
    processes: pd.DataFrame     # global_pid, pid, name
    devices: pd.DataFrame       # pid, cuda_id, gpu_id, gpu_name, bus
    meta: dict                  # schema_version, utc_start_ns, cuda_graph_trace, nsys_version
    cross_thread_ranges: int = 0  # start/end ranges that end on another thread (left out, as nsys does)


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return safety.table_columns(conn, table)


def _read(conn: sqlite3.Connection, sql: str, columns: list[str], copy: bool = True,
          rows_hint: int | None = None) -> pd.DataFrame:
    """Run ``sql`` and return a DataFrame with ``columns`` (the one place rows are fetched).

    The backend (ADBC -> Arrow, read-only URI; stdlib cursor as fallback) lives in fastread.py.
    ``copy=False``: integer columns may be read-only views of the Arrow buffers."""
    return fastread.read_frame(conn, sql, columns, copy=copy, rows_hint=rows_hint)


def _rows_hint(conn: sqlite3.Connection, table: str) -> int | None:
    """Upper bound on the rows of ``table`` from its rowid range (a B-tree seek, no scan)."""
    lo, hi = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    return (int(hi) - int(lo) + 1) if lo is not None else None


def _concat_columns(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(frames, ignore_index=True)``, one column at a time: every part's column is
    released as soon as it is copied, so the peak is the result plus one column, not twice the
    table. Columns of one dtype across parts are joined by NumPy; anything else by pandas."""
    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0]
    out = {}
    for c in list(frames[0].columns):
        parts = [f[c] for f in frames]
        if all(p.dtype == np.int64 for p in parts):
            out[c] = np.concatenate([p.to_numpy() for p in parts])
        else:
            out[c] = pd.concat(parts, ignore_index=True)
        del parts
        for f in frames:
            del f[c]
    return pd.DataFrame(out, copy=False)


def _int64(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    for c in cols:
        if frame[c].dtype == np.int64:      # already clean (the usual case): no copy
            continue
        frame[c] = pd.to_numeric(frame[c], errors="coerce").fillna(-1).astype("int64")
    return frame


GPU_OP_KINDS = tuple(GPU_OP_TABLES)


def kind_column(kind: str, n: int) -> pd.Categorical:
    """The ``kind`` column: a categorical over the four op kinds (one byte per op, not a string)."""
    return pd.Categorical.from_codes(np.full(n, GPU_OP_KINDS.index(kind), dtype="int8"),
                                     categories=list(GPU_OP_KINDS))


def read_strings(conn: sqlite3.Connection) -> pd.Series:
    cols = table_columns(conn, "StringIds")
    if not {"id", "value"} <= set(cols):
        return pd.Series(dtype="object", name="value")
    frame = _read(conn, "SELECT id, value FROM StringIds", ["id", "value"])
    return pd.Series(frame["value"].to_numpy(dtype=object), index=frame["id"].to_numpy(dtype="int64"),
                     name="value")


def _name_expr(cols: list[str]) -> str:
    # nsys' kernel summaries name kernels by their demangled name; fall back to the short one
    for c in ("demangledName", "shortName", "mangledName", "nameId", "name"):
        if c in cols:
            return c
    return "NULL"


def _read_chunked(conn: sqlite3.Connection, table: str, sql: str, columns: list[str],
                  chunk_rows: int | None) -> pd.DataFrame:
    """``sql`` (which has a WHERE clause) over ``table``, in rowid ranges of ``chunk_rows`` rows.

    rowid is the table's B-tree key, so every chunk is a range seek (a ``start`` range would be a
    full scan per chunk: nsys creates no index on start); chunks come back in rowid order, the
    order of a full scan, so the result is the same table as one read."""
    lo, hi = conn.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    if not chunk_rows:        # rowid bounds: the row count (upper bound), so arrays are sized once
        return _read(conn, sql, columns, copy=False,
                     rows_hint=(int(hi) - int(lo) + 1) if lo is not None else None)
    if lo is None:
        return _read(conn, sql, columns)
    parts = []
    for a in range(int(lo), int(hi) + 1, int(chunk_rows)):
        part = _read(conn, f"{sql} AND rowid >= {a} AND rowid < {a + int(chunk_rows)}", columns, copy=False,
                     rows_hint=int(chunk_rows))
        if len(part):
            parts.append(_int64(part, [c for c in columns if c.endswith(("_ns", "_id", "_pid"))
                                       and c != "graph_node_id"]))
    if not parts:
        return _read(conn, sql + " AND 0", columns)
    return _concat_columns(parts)


def read_gpu_ops(conn: sqlite3.Connection, chunk_rows: int | None = None) -> pd.DataFrame:
    """Kernels, memcpys, memsets and graph-level launches as one table (read in rowid chunks of
    ``chunk_rows`` rows when given: bounded memory, same table)."""
    frames = []
    for kind, table in GPU_OP_TABLES.items():
        cols = table_columns(conn, table)
        if not {"start", "end", "correlationId"} <= set(cols):
            continue
        pid = "globalPid" if "globalPid" in cols else ("(globalTid & ~16777215)" if "globalTid" in cols else "0")
        dev = "deviceId" if "deviceId" in cols else "-1"
        stream = "streamId" if "streamId" in cols else "-1"
        node = "graphNodeId" if "graphNodeId" in cols else "NULL"
        if kind == "kernel":
            name = _name_expr(cols)
        elif kind == "graph":
            name = "graphId" if "graphId" in cols else "NULL"
        else:
            name = "NULL"
        sql = (f"SELECT {pid}, {dev}, {stream}, correlationId, {node}, {name}, start, end "
               f"FROM {table} WHERE start IS NOT NULL AND end IS NOT NULL")
        frame = _read_chunked(conn, table, sql, GPU_OP_COLUMNS[1:], chunk_rows)
        frame.insert(0, "kind", kind_column(kind, len(frame)))
        frames.append(frame)
    if not frames:
        empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in GPU_OP_COLUMNS})
        empty["kind"] = kind_column("kernel", 0)
        return empty
    ops = _concat_columns(frames)
    ops = _int64(ops, ["global_pid", "device_id", "stream_id", "correlation_id", "name_id",
                       "start_ns", "end_ns"])
    ops["graph_node_id"] = pd.to_numeric(ops["graph_node_id"], errors="coerce").astype("Int64")
    return ops


def read_calls(conn: sqlite3.Connection) -> pd.DataFrame:
    """CUDA runtime and driver API calls (the launch side of every GPU op)."""
    cols = table_columns(conn, RUNTIME_TABLE)
    names = ["global_tid", "correlation_id", "name_id", "start_ns", "end_ns"]
    if not {"start", "end", "globalTid", "correlationId"} <= set(cols):
        frame = pd.DataFrame({c: pd.Series(dtype="int64") for c in names})
    else:
        name = "nameId" if "nameId" in cols else "NULL"
        frame = _read(conn, f"SELECT globalTid, correlationId, {name}, start, end FROM {RUNTIME_TABLE} "
                            "WHERE start IS NOT NULL AND end IS NOT NULL", names, copy=False,
                      rows_hint=_rows_hint(conn, RUNTIME_TABLE))
        frame = _int64(frame, names)
    frame["global_pid"] = frame["global_tid"].to_numpy(dtype="int64") & PID_OF_TID
    return frame


def read_nvtx(conn: sqlite3.Connection, strings: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
    """NVTX ranges (push/pop and start/end, nsys' projection rules) and marks."""
    cols = set(table_columns(conn, "NVTX_EVENTS"))
    range_cols = ["global_tid", "global_pid", "domain", "name", "style", "start_ns", "end_ns",
                  "end_missing", "int_value"]
    mark_cols = ["global_tid", "global_pid", "domain", "text", "time_ns", "int_value"]
    if not {"start", "eventType"} <= cols:
        return (pd.DataFrame({c: pd.Series(dtype="object") for c in range_cols}),
                pd.DataFrame({c: pd.Series(dtype="object") for c in mark_cols}))
    sel = {
        "start": "start",
        "end": "end" if "end" in cols else "NULL",
        "eventType": "eventType",
        "text": "text" if "text" in cols else "NULL",
        "textId": "textId" if "textId" in cols else "NULL",
        "globalTid": "globalTid" if "globalTid" in cols else "0",
        "endGlobalTid": "endGlobalTid" if "endGlobalTid" in cols else "NULL",
        "domainId": "domainId" if "domainId" in cols else "0",
        "intValue": ("COALESCE(" + ", ".join(c for c in ("int64Value", "uint64Value", "int32Value",
                                                          "uint32Value") if c in cols) + ")")
        if cols & {"int64Value", "uint64Value", "int32Value", "uint32Value"} else "NULL",
    }
    events = _read(conn, "SELECT " + ", ".join(sel.values()) + " FROM NVTX_EVENTS", list(sel), copy=False,
                   rows_hint=_rows_hint(conn, "NVTX_EVENTS"))
    if events.empty:
        return (pd.DataFrame({c: pd.Series(dtype="object") for c in range_cols}),
                pd.DataFrame({c: pd.Series(dtype="object") for c in mark_cols}))
    events = _int64(events, ["start", "eventType", "globalTid", "domainId"])
    events["globalPid"] = events["globalTid"].to_numpy(dtype="int64") & PID_OF_TID
    text_ids = pd.to_numeric(events["textId"], errors="coerce")
    looked_up = pd.Series(strings.reindex(text_ids.fillna(-1).astype("int64")).to_numpy(), index=events.index)
    events["label"] = events["text"].where(events["text"].notna(), looked_up)

    # domain names: a domain-create event per process ("domainId is unique only per process")
    created = events[events["eventType"] == DOMAIN_CREATE_EVENT]
    domain_names = {(int(p), int(d)): (str(t) if t is not None and t == t else "")
                    for p, d, t in zip(created["globalPid"], created["domainId"], created["label"])}

    def domain_of(frame: pd.DataFrame) -> np.ndarray:
        # per distinct (process, domain) pair, not per event (millions of ranges)
        pid = frame["globalPid"].to_numpy(dtype="int64")
        dom = frame["domainId"].to_numpy(dtype="int64")
        pcode, puniq = pd.factorize(pid)
        dcode, duniq = pd.factorize(dom)
        codes, uniq = pd.factorize(pcode.astype("int64") * (len(duniq) + 1) + dcode)
        uniq = [(int(np.asarray(puniq)[u // (len(duniq) + 1)]), int(np.asarray(duniq)[u % (len(duniq) + 1)]))
                for u in np.asarray(uniq)]
        names = np.array([("" if d == 0 else domain_names.get((int(p), int(d)), f"domain{d}"))
                          for p, d in uniq] + [""], dtype=object)
        return names[codes] if len(codes) else np.zeros(0, dtype=object)

    # nsys' projection keeps ranges that end on their own thread; a missing end becomes the
    # largest NVTX timestamp of the report
    is_range = events["eventType"].isin(list(RANGE_EVENT_STYLES)) & events["endGlobalTid"].isna()
    ranges = events[is_range]
    max_ts = int(np.nanmax(pd.to_numeric(pd.concat([events["start"], events["end"]]), errors="coerce")))
    end = pd.to_numeric(ranges["end"], errors="coerce")
    range_frame = pd.DataFrame({
        "global_tid": ranges["globalTid"].to_numpy(dtype="int64"),
        "global_pid": ranges["globalPid"].to_numpy(dtype="int64"),
        "domain": domain_of(ranges),
        "name": ranges["label"].fillna("").astype(str).to_numpy(dtype=object),
        "style": ranges["eventType"].map(RANGE_EVENT_STYLES).to_numpy(dtype=object),
        "start_ns": ranges["start"].to_numpy(dtype="int64"),
        "end_ns": end.fillna(max_ts).to_numpy(dtype="int64"),
        "end_missing": end.isna().to_numpy(),
        "int_value": pd.to_numeric(ranges["intValue"], errors="coerce").to_numpy(),
    })
    marks = events[events["eventType"].isin(MARK_EVENTS)]
    mark_frame = pd.DataFrame({
        "global_tid": marks["globalTid"].to_numpy(dtype="int64"),
        "global_pid": marks["globalPid"].to_numpy(dtype="int64"),
        "domain": domain_of(marks),
        "text": marks["label"].fillna("").astype(str).to_numpy(dtype=object),
        "time_ns": marks["start"].to_numpy(dtype="int64"),
        "int_value": pd.to_numeric(marks["intValue"], errors="coerce").to_numpy(),
    })
    return range_frame.reset_index(drop=True), mark_frame.reset_index(drop=True)


def read_processes(conn: sqlite3.Connection) -> pd.DataFrame:
    cols = table_columns(conn, "PROCESSES")
    names = ["global_pid", "pid", "name"]
    if not {"globalPid", "pid"} <= set(cols):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in names})
    frame = _read(conn, "SELECT globalPid, pid, " + ("name" if "name" in cols else "NULL")
                  + " FROM PROCESSES", names)
    return _int64(frame, ["global_pid", "pid"])


def read_devices(conn: sqlite3.Connection) -> pd.DataFrame:
    """CUDA ordinals as each process saw them, mapped to physical GPUs where nsys recorded it."""
    names = ["pid", "cuda_id", "gpu_id", "gpu_name", "bus"]
    gpu_cols = table_columns(conn, "TARGET_INFO_GPU")
    gpus = pd.DataFrame(columns=["gpu_id", "gpu_name", "bus"])
    if "id" in gpu_cols:
        gpus = _read(conn, "SELECT id, " + ("name" if "name" in gpu_cols else "NULL") + ", "
                     + ("busLocation" if "busLocation" in gpu_cols else "NULL") + " FROM TARGET_INFO_GPU",
                     ["gpu_id", "gpu_name", "bus"])
    dev_cols = table_columns(conn, "TARGET_INFO_CUDA_DEVICE")
    if {"gpuId", "cudaId", "pid"} <= set(dev_cols):
        mapping = _read(conn, "SELECT pid, cudaId, gpuId FROM TARGET_INFO_CUDA_DEVICE",
                        ["pid", "cuda_id", "gpu_id"])
        return mapping.merge(gpus, on="gpu_id", how="left")[names]
    return pd.DataFrame({c: pd.Series(dtype="object") for c in names})


def read_meta(conn: sqlite3.Connection) -> dict:
    meta: dict = {"schema_version": None, "nsys_version": None, "utc_start_ns": None,
                  "cuda_graph_trace": None}
    version = safety.export_schema_version(conn)
    meta["schema_version"] = ".".join(map(str, version)) if version else None
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if {"name", "value"} <= set(table_columns(conn, table)):
            row = conn.execute(f"SELECT value FROM {table} WHERE name='EXPORT_PRODUCT_VERSION'").fetchone()
            if row:
                meta["nsys_version"] = row[0]
    if "utcEpochNs" in table_columns(conn, "TARGET_INFO_SESSION_START_TIME"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        if row and row[0] is not None:
            meta["utc_start_ns"] = int(row[0])
    if {"name", "value"} <= set(table_columns(conn, "META_DATA_CAPTURE")):
        row = conn.execute("SELECT value FROM META_DATA_CAPTURE "
                           "WHERE name LIKE '%CUDA_GRAPH_TRACE_OPTIONS:MODE' LIMIT 1").fetchone()
        if row:
            meta["cuda_graph_trace"] = str(row[0]).lower()
    return meta


def count_cross_thread_ranges(conn: sqlite3.Connection) -> int:
    if not {"endGlobalTid", "eventType"} <= set(table_columns(conn, "NVTX_EVENTS")):
        return 0
    types = ",".join(map(str, RANGE_EVENT_STYLES))
    row = conn.execute(f"SELECT count(*) FROM NVTX_EVENTS WHERE endGlobalTid IS NOT NULL "
                       f"AND eventType IN ({types})").fetchone()
    return int(row[0] or 0)


def read_report(path: str, chunk_rows: int | None = None) -> ReportTables:
    """Open ``path`` read-only and read every table the analysis uses (GPU ops in chunks of
    ``chunk_rows`` rows when given, see :func:`read_gpu_ops`)."""
    conn = safety.open_report(path)
    try:
        strings = read_strings(conn)
        ops = read_gpu_ops(conn, chunk_rows)
        calls = read_calls(conn)
        ranges, marks = read_nvtx(conn, strings)
        return ReportTables(path=str(path), strings=strings, gpu_ops=ops, calls=calls, ranges=ranges,
                            marks=marks, processes=read_processes(conn), devices=read_devices(conn),
                            meta=read_meta(conn), cross_thread_ranges=count_cross_thread_ranges(conn))
    except sqlite3.DatabaseError as exc:
        raise safety.CorruptReport(f"{path}: cannot read the report ({exc})") from exc
    finally:
        fastread.close(conn)
        conn.close()
