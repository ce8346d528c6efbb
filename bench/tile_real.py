"""A real export made big: a real trace's processes copied to 8 processes, tiled in time.

    python -m bench.tile_real OUT.sqlite --kernels 1000000 [--source REPORT.sqlite]

The default source is the demo trace (analyze/data/h200_4proc_eager.sqlite.xz: nsys 2025.3.1 on an
H200, 4 processes with NVTX decode_cycle > draft > draft_step, verify > allreduce, accept; 2,728
kernels, 10,856 runtime calls, 1,068 NVTX events); the benchmark also tiles the real SGLang server
trace (fixtures/real/sglang_server: SGLang 0.5.17, EAGLE-3, CUDA graphs, one process). A source of
P processes (P dividing 8) gets 8 / P - 1 copies of each process (copy k: process and thread ids + 8k
in the globalTid's pid and tid fields), so one tile holds 8 processes; tiles follow each other in
time (shifted by the source's activity span plus 1 ms) with correlation ids shifted past the
previous tile's, until the kernel count is reached. Domain-create events and the ``rank=R world=W``
marks appear once per process (in the first tile), rewritten as ``rank=R+kW world=8`` (the rest of
the mark kept); every other event is tiled, the decode-cycle numbers (the ``decode_cycle`` ranges'
int64 payload K and the accept marks' ``cycle=K``) counting on from tile to tile. The activity tables are rewritten in start order (as nsys writes them), the session
(``ANALYSIS_DETAILS.duration``, ``stopTime``) lengthened by the tiles; the other
tables (strings, processes, devices, metadata) are those of the source plus the copies' rows.
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
TWIN = 8                      # process and thread id offset of each further copy of a process
PROCESSES_PER_TILE = 8
TILED = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
         "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS")
GAP_NS = 1_000_000


def default_source() -> Path:
    from analyze import demo
    return Path(demo.demo_trace())


def _cols(db, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def _twin_tid(col: str, twin: str) -> str:
    # globalTid = hw<<56 | vm<<48 | pid<<24 | tid: copy k's pid and tid are both + k * TWIN
    return f"CASE WHEN {col} IS NULL THEN NULL ELSE {col} + {twin} * {(TWIN << 24) + TWIN} END"


def _twin_pid(col: str, twin: str) -> str:
    return f"CASE WHEN {col} IS NULL THEN NULL ELSE {col} + {twin} * {TWIN << 24} END"


def _int_field(txt: str, key: str) -> tuple[str, str, str]:
    """SQL for a mark text's part up to and including ``key`` (e.g. ``' cycle='``), the integer
    right after it, and the rest of the text after that integer."""
    at = f"instr({txt}, '{key}')"
    after = f"substr({txt}, {at} + {len(key)})"
    value = f"CAST({after} AS INTEGER)"
    return f"substr({txt}, 1, {at} + {len(key) - 1})", value, f"substr({after}, length(CAST({value} AS TEXT)) + 1)"


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
        if not gpids or PROCESSES_PER_TILE % len(gpids):
            raise ValueError(f"{source}: {len(gpids)} processes with kernels; tiling needs 1, 2, 4 or 8")
        copies = PROCESSES_PER_TILE // len(gpids)
        present = [t for t in TILED if db.execute("SELECT 1 FROM sqlite_master WHERE name=?", (t,)).fetchone()]
        lo = min(db.execute(f"SELECT min(start) FROM {t}").fetchone()[0] or 0 for t in present)
        hi = max(db.execute(f"SELECT max(coalesce(end, start)) FROM {t}").fetchone()[0] or 0 for t in present)
        period = hi - lo + GAP_NS
        corr = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
        per_tile = copies * db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        tiles = max(1, -(-int(kernels) // per_tile))
        db.execute("CREATE TEMP TABLE tile (i INTEGER PRIMARY KEY, twin INTEGER)")
        db.executemany("INSERT INTO temp.tile VALUES (?, ?)",
                       [(c * copies + w, w) for c in range(tiles) for w in range(copies)])
        # the rank marks rewritten for 8 processes (text, not a registered string); they and the
        # domains' creation appear once per process, in the first tile
        txt = "coalesce(o.text, s.value)"
        is_mark = f"(o.eventType = 34 AND {txt} LIKE 'rank=% world=%')"
        rank = _int_field(txt, "rank=")[1]
        _, world, rest = _int_field(txt, " world=")
        # decode-cycle numbers (the cycle ranges' int64 payload, the accept marks' cycle=K) go on
        # counting from tile to tile, as in one longer run
        k_top = db.execute("SELECT max(int64Value) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0] \
            if "NVTX_EVENTS" in present else None
        k_shift = f"(t.i / {copies}) * {int(k_top or 0) + 1}"
        numbered = f"(o.eventType = 34 AND {txt} LIKE '% cycle=%' AND t.i >= {copies})" if k_top is not None \
            else "0"
        head, k, tail = _int_field(txt, " cycle=")
        mark_text = (f"CASE WHEN {is_mark} THEN 'rank=' || ({rank} + {world} * t.twin) || "
                     f"' world={PROCESSES_PER_TILE}' || {rest} "
                     f"WHEN {numbered} THEN {head} || ({k} + {k_shift}) || {tail} ELSE o.text END")
        for table in present:
            cols = _cols(db, table)
            db.execute(f"CREATE TEMP TABLE orig AS SELECT * FROM {table}")
            db.execute(f"DELETE FROM {table}")
            exprs = []
            for c in cols:
                e = f"o.{c}"
                if c in ("start", "end"):
                    e = f"o.{c} + (t.i / {copies}) * {period}"
                elif c == "correlationId":
                    e = f"o.{c} + (t.i / {copies}) * {corr}"
                elif c in ("globalTid", "endGlobalTid"):
                    e = _twin_tid(f"o.{c}", "t.twin")
                elif c == "globalPid":
                    e = _twin_pid(f"o.{c}", "t.twin")
                elif table == "NVTX_EVENTS" and c == "text":
                    e = mark_text
                elif table == "NVTX_EVENTS" and c == "textId":
                    e = f"CASE WHEN {is_mark} OR {numbered} THEN NULL ELSE o.textId END"
                elif table == "NVTX_EVENTS" and c == "int64Value" and k_top is not None:
                    e = f"CASE WHEN o.eventType IN (59, 60) THEN o.int64Value + {k_shift} ELSE o.int64Value END"
                exprs.append(e)
            join = " LEFT JOIN StringIds AS s ON s.id = o.textId" if table == "NVTX_EVENTS" else ""
            once = (f" WHERE t.i < {copies} OR NOT (o.eventType = 75 OR {is_mark})" if table == "NVTX_EVENTS"
                    else "")
            start = exprs[cols.index("start")]
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
                       f"FROM temp.tile AS t CROSS JOIN temp.orig AS o{join}{once} ORDER BY {start}, t.i, o.rowid")
            db.execute("DROP TABLE temp.orig")
        db.execute("CREATE TEMP TABLE copy (k INTEGER PRIMARY KEY)")
        db.executemany("INSERT INTO temp.copy VALUES (?)", [(k,) for k in range(1, copies)])
        for table, pid_col, tid_col in (("PROCESSES", "globalPid", None), ("ThreadNames", None, "globalTid")):
            cols = _cols(db, table)
            if not cols:
                continue
            exprs = [(f"pid + {TWIN} * c.k" if c == "pid" else _twin_pid(c, "c.k") if c == pid_col else
                      _twin_tid(c, "c.k") if c == tid_col else c) for c in cols]
            key = "globalPid" if table == "PROCESSES" else "(globalTid & ~16777215)"
            where = f"{key} IN ({', '.join(str(int(g)) for g in gpids)})"
            db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
                       f"FROM {table} CROSS JOIN temp.copy AS c WHERE {where}")
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
                       + ", ".join(f"pid + {TWIN} * c.k" if c == "pid" else c for c in cols)
                       + " FROM TARGET_INFO_CUDA_DEVICE CROSS JOIN temp.copy AS c")
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
