"""What an export says about its own capture: nsys' diagnostics (``DIAGNOSTIC_EVENT``: "No CUDA events
collected", "Not all CUDA events might have been collected", a driver that CUPTI does not support,
...), whether it holds GPU activity the analysis can use (else the error that says why, in nsys' own
words where nsys said something), and its unified-memory migrations (memcpy rows nsys records for page
faults and prefetches, which no API call launched).

Only cheap queries: row existence (one B-tree step per table), the diagnostics table (hundreds of
rows), the memcpy table's copy kinds; the API calls are scanned only when an export has API calls but
no kernel rows.
"""
from __future__ import annotations

import os
import sqlite3

from analyze.errors import CorruptReport, KernelsMissing, NoCudaActivity, NvtxOnly
from analyze.read.connection import has_table, open_report, table_columns

SEVERITY = {0: "Unknown", 1: "Info", 2: "Warning", 3: "Error", 4: "Verbose"}
WARNING, ERROR = 2, 3
# diagnostics kept per report (grouped by severity and text), and processes listed per group
MAX_DIAGNOSTICS = 40
MAX_PIDS = 64

OP_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
             "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
UNIFIED_MEMORY_COUNTER = "CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER"
# ENUM_CUDA_MEMCPY_OPER: 11 Unified Host-to-Device, 12 Unified Device-to-Host, 13 Unified Device-to-Device
UVM_COPY_KINDS = (11, 12, 13)
# API calls that launch kernels (names carry version suffixes: cudaLaunchKernel_v7000)
LAUNCH_PATTERNS = ("cudaLaunchKernel%", "cudaLaunchCooperativeKernel%", "cudaLaunchKernelExC%", "cuLaunchKernel%",
                   "cuLaunchCooperativeKernel%", "cudaGraphLaunch%", "cuGraphLaunch%")
NVTX_EVENT_TYPES = (34, 59, 60, 70, 71)      # marks and ranges (not domain or category creation)
FLUSH_HINT = ("profile with --cuda-flush-interval=1000 (profile-trace's default), or stop the profile before the "
              "processes exit")


def _has_rows(conn: sqlite3.Connection, table: str, where: str = "") -> bool:
    if not has_table(conn, table):
        return False
    return conn.execute(f"SELECT 1 FROM {table} {where} LIMIT 1").fetchone() is not None


def diagnostics(conn: sqlite3.Connection) -> list[dict]:
    """nsys' warnings and errors, grouped: ``{"severity", "text", "count", "processes", "pids"}`` (the
    rows, the distinct processes they are about and, up to MAX_PIDS, their global pids; a report-wide
    message has none), errors first."""
    cols = set(table_columns(conn, "DIAGNOSTIC_EVENT"))
    if not {"severity", "text"} <= cols:
        return []
    pid = "globalPid" if "globalPid" in cols else "NULL"
    rows = conn.execute(f"SELECT severity, text, {pid} FROM DIAGNOSTIC_EVENT WHERE severity >= {WARNING} "
                        "AND typeof(severity) = 'integer' AND text IS NOT NULL").fetchall()
    groups: dict[tuple[int, str], dict] = {}
    seen: dict[tuple[int, str], set] = {}
    for severity, text, gpid in rows:
        key = (int(severity), str(text).strip())
        g = groups.setdefault(key, {"severity": key[0], "text": key[1], "count": 0, "processes": 0, "pids": []})
        g["count"] += 1
        if isinstance(gpid, int) and gpid > 0 and gpid not in seen.setdefault(key, set()):
            seen[key].add(gpid)
            g["processes"] += 1
            if len(g["pids"]) < MAX_PIDS:
                g["pids"].append(gpid)
    out = sorted(groups.values(), key=lambda g: (-g["severity"], -g["count"], g["text"]))
    return out[:MAX_DIAGNOSTICS]


def runtime_pids(conn: sqlite3.Connection) -> list[int]:
    """Processes with CUDA API calls (global pids)."""
    cols = set(table_columns(conn, RUNTIME))
    if "globalTid" not in cols:
        return []
    return sorted(int(r[0]) for r in conn.execute(
        f"SELECT DISTINCT globalTid & ~16777215 FROM {RUNTIME} WHERE typeof(globalTid) = 'integer'"))


def uvm_migrations(conn: sqlite3.Connection) -> int:
    """Memcpy rows that are unified-memory migrations (copy kinds 11-13): page faults, prefetches and
    evictions, which no API call launches."""
    if "copyKind" not in table_columns(conn, "CUPTI_ACTIVITY_KIND_MEMCPY"):
        return 0
    kinds = ",".join(map(str, UVM_COPY_KINDS))
    return int(conn.execute(f"SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN ({kinds})"
                            ).fetchone()[0] or 0)


def unified_memory_events(conn: sqlite3.Connection) -> int:
    """Rows of the unified-memory counter table (page faults, migrations as counter events)."""
    if not has_table(conn, UNIFIED_MEMORY_COUNTER):
        return 0
    return int(conn.execute(f"SELECT count(*) FROM {UNIFIED_MEMORY_COUNTER}").fetchone()[0] or 0)


def kernel_launch_calls(conn: sqlite3.Connection, graphs: bool = True) -> int:
    """API calls that launch kernels or (``graphs``) graphs (a scan of the API calls: only asked when
    no kernel was recorded)."""
    if not {"nameId"} <= set(table_columns(conn, RUNTIME)) or not {"id", "value"} <= set(table_columns(conn, "StringIds")):
        return 0
    patterns = LAUNCH_PATTERNS if graphs else tuple(p for p in LAUNCH_PATTERNS if "Graph" not in p)
    like = " OR ".join(f"value LIKE '{p}'" for p in patterns)
    return int(conn.execute(f"SELECT count(*) FROM {RUNTIME} WHERE nameId IN (SELECT id FROM StringIds WHERE {like})"
                            ).fetchone()[0] or 0)


def said(diags: list[dict], about_pids=(), limit: int = 3) -> str:
    """What nsys said, for a message: its CUDA-related warnings and errors (those about ``about_pids``
    first), each quoted once with the number of processes or rows it was given for."""
    cuda = [d for d in diags if any(w in d["text"] for w in ("CUDA", "CUPTI", "driver", "GPU", "Unified Memory"))]
    chosen = cuda or diags
    about = set(about_pids)
    chosen = sorted(chosen, key=lambda d: (not (about & set(d["pids"])), -d["severity"], -d["count"]))[:limit]
    parts = []
    for d in chosen:
        text = d["text"] if d["text"].endswith((".", "?", "!")) else d["text"] + "."
        n, per_process = (d.get("processes") or d["count"]), bool(d.get("processes"))
        what = ("process" if n == 1 else "processes") if per_process else ("time" if n == 1 else "times")
        parts.append(f'"{text}" ({SEVERITY.get(d["severity"], "?").lower()}, {n} {what})')
    return "; ".join(parts)


def require_gpu_activity(path: str | os.PathLike, *, usable_ops: int | None = None, conn=None) -> None:
    """Raise the error that says why ``path`` has no GPU activity the analysis can use; return when it
    has. ``usable_ops=0``: the export has op rows but the read left every one of them out.

    * op rows but none usable: CorruptReport (exit 6);
    * kernel launches among the API calls but no kernel row (the table dropped, or its data lost):
      KernelsMissing (exit 7) with what nsys said;
    * no op rows: NvtxOnly (NVTX ranges or marks present) or NoCudaActivity (exit 7): when CUDA API
      calls were traced the CUDA data was lost (nsys' words and the flush hint), when nsys said why
      (an unsupported driver, ...) its words, else the hint to trace CUDA. ``conn``: the report
      already open (read/source.py), left open."""
    own = conn is None
    conn = open_report(path, quick_check=False) if own else conn
    try:
        op_tables = [t for t in OP_TABLES if _has_rows(conn, t)]
        if op_tables and usable_ops == 0:
            raise CorruptReport(f"{path}: every GPU op row has a NULL or non-integer timestamp, an end before its "
                                "start or a time outside the session: nothing left to analyse", path)
        has_calls = _has_rows(conn, RUNTIME)
        if op_tables and OP_TABLES[0] not in op_tables and has_calls:
            # no kernel row, yet kernels were launched: one by one (a graph-level trace keeps its graph
            # launches in their own table, so only the launches outside graphs count there)
            graphs_traced = OP_TABLES[3] in op_tables
            launches = kernel_launch_calls(conn, graphs=not graphs_traced)
            if launches:
                words = said(diagnostics(conn), runtime_pids(conn))
                raise KernelsMissing(
                    f"{path}: {launches} kernel launches{' (outside CUDA graphs)' if graphs_traced else ''} were "
                    f"traced but the export holds no kernel rows ({OP_TABLES[0]} is missing or empty): kernel time "
                    "would read 0"
                    + (f"; nsys said: {words}" if words else "; the CUDA data was lost or the table was removed"), path)
        if op_tables:
            return           # kernels or graph launches recorded, or memcpys/memsets only with no kernel launched
        nvtx = _has_rows(conn, "NVTX_EVENTS", f"WHERE eventType IN ({','.join(map(str, NVTX_EVENT_TYPES))})") \
            if "eventType" in table_columns(conn, "NVTX_EVENTS") else False
        diags = diagnostics(conn)
        if has_calls:
            pids = runtime_pids(conn)
            n_calls = int(conn.execute(f"SELECT count(*) FROM {RUNTIME}").fetchone()[0] or 0)
            words = said(diags, pids)
            what = (f"no CUDA activity was saved although CUDA was traced ({n_calls} CUDA API calls in "
                    f"{len(pids)} process{'es' if len(pids) != 1 else ''})")
            tail = (f"; nsys said: {words}" if words else "") + \
                f": the processes probably exited before nsys saved their CUDA buffers; {FLUSH_HINT}"
            if nvtx:
                raise NvtxOnly(f"{path}: NVTX only, {what}{tail}", path)
            raise NoCudaActivity(f"{path}: no GPU activity: {what}{tail}", path)
        words = said(diags)
        if nvtx:
            raise NvtxOnly(f"{path}: NVTX only, no CUDA activity: "
                           + (f"nsys said: {words}" if words else "profile with -t cuda,nvtx"), path)
        raise NoCudaActivity(f"{path}: no GPU activity and no NVTX in this export "
                             + (f"(nsys said: {words})" if words else "(was it captured with -t cuda?)"), path)
    finally:
        if own:
            conn.close()
