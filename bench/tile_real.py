"""A real export made big: the bundled H200 trace (4 processes, eager) as 8 processes, tiled in time.

    python -m bench.tile_real OUT.sqlite --kernels 1000000 [--source REPORT.sqlite]

The source is the demo trace (analyze/data/h200_4proc_eager.sqlite.xz: nsys 2025.3.1 on an H200,
4 processes with NVTX decode_cycle > draft > draft_step, verify > allreduce, accept; 2,728 kernels,
10,856 runtime calls, 1,068 NVTX events). Every process gets a twin (process id + 8, thread ids + 8
in the globalTid's pid and tid fields), so one tile holds 8 processes; tiles follow each other in
time (shifted by the source's activity span plus 1 ms) with correlation ids shifted past the
previous tile's, until the kernel count is reached. Domain-create events and the ``rank=R world=4``
marks appear once per process (in the first tile), rewritten as ``rank=R world=8`` with the twins
as ranks 4-7. The activity tables are rewritten in start order (as nsys writes them), the session
(``ANALYSIS_DETAILS.duration``, ``stopTime``) lengthened by the tiles; the other
tables (strings, processes, devices, metadata) are those of the source plus the twins' rows.
The source is opened read-only; the output is written to a temporary name and renamed into place.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TWIN = 8                      # process and thread id offset of a process' twin
TILED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
         "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
GAP_NS = 1_000_000


def default_source() -> Path:
    from analyze import demo
    return Path(demo.demo_trace())


def _cols(db, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def _twin_tid(col: str, twin: str) -> str:
    # globalTid = hw<<56 | vm<<48 | pid<<24 | tid: the twin's pid and tid are both + TWIN
    return f"CASE WHEN {col} IS NULL THEN NULL ELSE {col} + {twin} * {(TWIN << 24) + TWIN} END"


def _twin_pid(col: str, twin: str) -> str:
    return f"CASE WHEN {col} IS NULL THEN NULL ELSE {col} + {twin} * {TWIN << 24} END"


def build(source: Path, out: Path, kernels: int = 1_000_000) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)           # the source itself is only read
        db = sqlite3.connect(tmp)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        gpids = [r[0] for r in db.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")]
        present = [t for t in TILED if db.execute("SELECT 1 FROM sqlite_master WHERE name=?", (t,)).fetchone()]
        lo = min(db.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 0 for t in present)
        hi = max(db.execute(f"SELECT max(coalesce(end, start)) FROM {t}").fetchone()[0] or 0 for t in present)
        period = hi - lo + GAP_NS
        corr = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
        per_tile = 2 * db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        tiles = max(1, -(-int(kernels) // per_tile))
        db.execute("CREATE TEMP TABLE tile (i INTEGER PRIMARY KEY, twin INTEGER)")
        db.executemany("INSERT INTO temp.tile VALUES (?, ?)",
                       [(c * 2 + w, w) for c in range(tiles) for w in (0, 1)])
        # the rank marks rewritten for 8 processes (text, not a registered string)
        mark_text = ("CASE WHEN o.eventType = 34 AND coalesce(o.text, s.value) LIKE 'rank=% world=4' THEN "
                     "'rank=' || (CAST(substr(coalesce(o.text, s.value), 6, instr(coalesce(o.text, s.value), ' ') - 6)"
                     " AS INTEGER) + 4 * t.twin) || ' world=8' ELSE o.text END")
        for table in present:
            cols = _cols(db, table)
            db.execute(f"CREATE TEMP TABLE orig AS SELECT * FROM {table}")
            db.execute(f"DELETE FROM {table}")
            exprs = []
            for c in cols:
                e = f"o.{c}"
                if c in ("start", "end"):
                    e = f"o.{c} + (t.i / 2) * {period}"
                elif c == "correlationId":
                    e = f"o.{c} + (t.i / 2) * {corr}"
                elif c in ("globalTid", "endGlobalTid"):
                    e = _twin_tid(f"o.{c}", "t.twin")
                elif c == "globalPid":
                    e = _twin_pid(f"o.{c}", "t.twin")
                elif table == "NVTX_EVENTS" and c == "text":
                    e = mark_text
                elif table == "NVTX_EVENTS" and c == "textId":
                    e = ("CASE WHEN o.eventType = 34 AND coalesce(o.text, s.value) LIKE 'rank=% world=4' "
                         "THEN NULL ELSE o.textId END")
                exprs.append(e)
            join = " LEFT JOIN StringIds AS s ON s.id = o.textId" if table == "NVTX_EVENTS" else ""
            once = " WHERE t.i < 2 OR o.eventType NOT IN (34, 75)" if table == "NVTX_EVENTS" else ""
            start = exprs[cols.index("start")]
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
                       f"FROM temp.tile AS t CROSS JOIN temp.orig AS o{join}{once} ORDER BY {start}, t.i, o.rowid")
            db.execute("DROP TABLE temp.orig")
        for table, pid_col, tid_col in (("PROCESSES", "globalPid", None), ("ThreadNames", None, "globalTid")):
            cols = _cols(db, table)
            if not cols:
                continue
            exprs = [("pid + 8" if c == "pid" else _twin_pid(c, "1") if c == pid_col else
                      _twin_tid(c, "1") if c == tid_col else c) for c in cols]
            key = "globalPid" if table == "PROCESSES" else "(globalTid & ~16777215)"
            where = f"{key} IN ({', '.join(str(int(g)) for g in gpids)})"
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} FROM {table} WHERE {where}")
        # the capture session grows with the tiles (else the analysis leaves every op past the
        # source's session out, read/validate.py)
        cols = _cols(db, "ANALYSIS_DETAILS")
        if "duration" in cols:
            grow = (tiles - 1) * period
            db.execute(f"UPDATE ANALYSIS_DETAILS SET duration = duration + {grow}"
                       + (f", stopTime = stopTime + {grow}" if "stopTime" in cols else ""))
        cols = _cols(db, "TARGET_INFO_CUDA_DEVICE")
        if "pid" in cols:
            db.execute(f"INSERT INTO TARGET_INFO_CUDA_DEVICE ({', '.join(cols)}) SELECT "
                       + ", ".join("pid + 8" if c == "pid" else c for c in cols) + " FROM TARGET_INFO_CUDA_DEVICE")
        db.commit()
        db.execute("VACUUM")
        db.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tile_real", description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--kernels", type=float, default=1e6)
    ap.add_argument("--source", help="a real export (default: the bundled H200 demo trace)")
    a = ap.parse_args(argv)
    build(Path(a.source) if a.source else default_source(), Path(a.out), int(a.kernels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
