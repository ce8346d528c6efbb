"""Seeded mutations of real nsys exports (issue 45): row-level, schema, file and size families. Each
mutation takes a copy of an export (a path it may change) and a ``random.Random``; it returns a short
description. The checker (:func:`check`) runs ``analyze-trace FILE --json OUT`` and states the
invariants: exit 0 with conservation per rank and no negative or non-finite time in the JSON, or a
documented exit code with one line on stderr; never an internal error, a hang past the bound, or a
changed byte in the input or a file beside it.

The default run of each fuzzer applies every mutation kind once, then :func:`seeds` random cases (as
many as before, issue 42); ``SPECPROF_FUZZ_EXAMPLES=N`` runs N random cases instead, and ``pytest -m slow tests/fuzz`` the
long runs."""
from __future__ import annotations

import hashlib
import json
import math
import os
import random
import sqlite3
import subprocess
from pathlib import Path

from helpers import cli_process

DOCUMENTED_EXITS = {0, 2, 3, 4, 5, 6, 7, 11, 12}
EXAMPLES_VARIABLE = "SPECPROF_FUZZ_EXAMPLES"


def seeds(default: int) -> range:
    """The seeds of a fuzzer's random cases in the default run: ``default`` of them, or as many as
    ``SPECPROF_FUZZ_EXAMPLES`` says."""
    return range(int(os.environ.get(EXAMPLES_VARIABLE, default)))


BYTE_KINDS = ("truncate", "flip", "zero_range", "empty")
"""The byte-level damages :func:`damage_bytes` does to a file."""


def damage_bytes(f: Path, kind: str, rng: random.Random) -> None:
    """``f`` damaged in place as ``kind`` (:data:`BYTE_KINDS`): cut at a random length, 1-20 bits flipped,
    up to 4 KiB zeroed, or emptied (the columnar and live-log fuzzers share it)."""
    data = bytearray(f.read_bytes())
    if kind == "truncate":
        f.write_bytes(bytes(data[: rng.randrange(0, max(1, len(data) - 1))]))
    elif kind == "flip":
        for _ in range(rng.randint(1, 20)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
    elif kind == "zero_range":
        a = rng.randrange(len(data))
        b = min(len(data), a + rng.randint(1, 4096))
        data[a:b] = bytes(b - a)
        f.write_bytes(bytes(data))
    elif kind == "empty":
        f.write_bytes(b"")
    else:
        raise ValueError(f"no byte damage {kind!r}")
OP_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
CALLS = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"


def _loose(c: sqlite3.Connection, table: str) -> None:
    """Recreate ``table`` without its constraints (so that duplicate keys and odd types can go in)."""
    c.executescript(f"CREATE TABLE _t AS SELECT * FROM {table}; DROP TABLE {table}; ALTER TABLE _t RENAME TO {table};")


def _rows(c, table, rng, k):
    ids = [r[0] for r in c.execute(f"SELECT rowid FROM {table}")]
    return rng.sample(ids, min(k, len(ids))) if ids else []


def m_null_times(c, rng):
    _loose(c, OP_TABLE)
    rows = _rows(c, OP_TABLE, rng, 5)
    c.executemany(f"UPDATE {OP_TABLE} SET start = NULL WHERE rowid = ?", [(r,) for r in rows])
    return "NULL kernel starts"


def m_text_ids(c, rng):
    _loose(c, "StringIds")
    c.execute("INSERT INTO StringIds(id, value) VALUES ('abc', 'x')")
    return "a text id in StringIds"


def m_dup_strings(c, rng):
    _loose(c, "StringIds")
    c.execute("INSERT INTO StringIds SELECT * FROM StringIds LIMIT 7")
    return "duplicated StringIds rows"


def m_huge_times(c, rng):
    rows = _rows(c, CALLS, rng, 50)
    c.executemany(f"UPDATE {CALLS} SET end = ? WHERE rowid = ?", [(2 ** 62, r) for r in rows])
    return "API calls ending at 2**62"


def m_span_kernels(c, rng):
    rows = _rows(c, OP_TABLE, rng, 3)
    c.executemany(f"UPDATE {OP_TABLE} SET start = 0, end = ? WHERE rowid = ?", [(2 ** 62, r) for r in rows])
    c.execute("DELETE FROM ANALYSIS_DETAILS") if _has(c, "ANALYSIS_DETAILS") else None
    return "kernels spanning 2**62 ns, no session length"


def m_nonfinite(c, rng):
    _loose(c, OP_TABLE)
    rows = _rows(c, OP_TABLE, rng, 3)
    c.executemany(f"UPDATE {OP_TABLE} SET globalPid = '1e400' WHERE rowid = ?", [(r,) for r in rows])
    return "non-finite globalPid"


def m_negative(c, rng):
    rows = _rows(c, OP_TABLE, rng, 5)
    c.executemany(f"UPDATE {OP_TABLE} SET end = start - 1000 WHERE rowid = ?", [(r,) for r in rows])
    return "kernels ending before they start"


def m_delete_calls(c, rng):
    rows = _rows(c, CALLS, rng, 200)
    c.executemany(f"DELETE FROM {CALLS} WHERE rowid = ?", [(r,) for r in rows])
    return "API calls deleted (dangling correlation ids)"


def m_dup_ops(c, rng):
    _loose(c, OP_TABLE)
    c.execute(f"INSERT INTO {OP_TABLE} SELECT * FROM {OP_TABLE} WHERE rowid IN "
              f"(SELECT rowid FROM {OP_TABLE} LIMIT 20)")
    return "duplicated kernel rows"


def m_odd_marks(c, rng):
    texts = ["rank=99999999999999999999 world=4", "accept_len=5 reqs=99999999999999999999", "accept_len=-3",
             "rank=1 world=0", "spec_config algo=EAGLE3 steps=99999999999", "accept_len=2 reqs=1 lens=9,9,9,9",
             "spec_steps=99999999999999999999 cycle=1", "spec_steps=3 cycle=99999999999999999999999",
             "spec_steps=2 cycle=1", "spec_steps=0 cycle=2", "spec_steps=", "spec_config algo=EAGLE3 steps=3 adaptive=1"]
    _loose(c, NVTX)
    rows = [r[0] for r in c.execute(f"SELECT rowid FROM {NVTX} WHERE eventType = 34 LIMIT 10")]
    c.executemany(f"UPDATE {NVTX} SET text = ?, textId = NULL WHERE rowid = ?",
                  [(rng.choice(texts), r) for r in rows])
    return "odd NVTX marks"


def m_unclosed(c, rng):
    rows = [r[0] for r in c.execute(f"SELECT rowid FROM {NVTX} WHERE eventType = 59 ORDER BY random() LIMIT 3")]
    c.executemany(f"UPDATE {NVTX} SET end = NULL WHERE rowid = ?", [(r,) for r in rows])
    return "unclosed NVTX ranges"


def m_drop_table(c, rng):
    t = rng.choice([CALLS, "StringIds", NVTX, "TARGET_INFO_GPU", "META_DATA_EXPORT"])
    if _has(c, t):
        c.execute(f"DROP TABLE {t}")
    return f"table {t} dropped"


def m_view_table(c, rng):
    c.executescript(f"ALTER TABLE {OP_TABLE} RENAME TO k_real; "
                    f"CREATE VIEW {OP_TABLE} AS SELECT * FROM no_such_table;")
    return "a view named like the kernel table"


def m_lower_name(c, rng):
    c.executescript(f"ALTER TABLE {OP_TABLE} RENAME TO t_tmp; ALTER TABLE t_tmp RENAME TO {OP_TABLE.lower()};")
    return "a lower-case kernel table"


def m_deep_nesting(c, rng):
    tid, s0, e0 = c.execute(f"SELECT globalTid, start, end FROM {NVTX} WHERE eventType = 59 AND end IS NOT NULL "
                            "ORDER BY end - start DESC LIMIT 1").fetchone()
    n = 20000
    c.executemany(f"INSERT INTO {NVTX}(eventType, start, end, globalTid, text) VALUES (59, ?, ?, ?, ?)",
                  [(s0 + i, e0 - i, tid, ("draft", "verify", "x")[i % 3]) for i in range(n)])
    return f"{n} nested NVTX ranges on one thread"


def m_version_rows(c, rng):
    value = rng.choice(["abc", "99.99.99", "", None, "3", "-1.-2"])
    for t in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if _has(c, t):
            c.execute(f"UPDATE {t} SET value = ? WHERE name = 'EXPORT_SCHEMA_VERSION'", (value,))
    return f"export schema version {value!r}"


def m_type_swap(c, rng):
    table = rng.choice([OP_TABLE, CALLS, NVTX])
    if not _has(c, table):
        return "no table to swap types in"
    _loose(c, table)
    cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
    col = rng.choice(cols)
    value = rng.choice(["x", 1.5, -(2 ** 63), 2 ** 63 - 1, None, b"\x00\xff", "", "1e400", -1])
    rows = _rows(c, table, rng, rng.choice([1, 5, 50]))
    c.executemany(f'UPDATE {table} SET "{col}" = ? WHERE rowid = ?', [(value, r) for r in rows])
    return f"{table}.{col} = {value!r} on {len(rows)} rows"


def m_delete_strings(c, rng):
    rows = _rows(c, "StringIds", rng, 30)
    c.executemany("DELETE FROM StringIds WHERE rowid = ?", [(r,) for r in rows])
    return "StringIds rows deleted (dangling name ids)"


def m_empty_table(c, rng):
    t = rng.choice([OP_TABLE, CALLS, NVTX, "StringIds", "TARGET_INFO_GPU", "ANALYSIS_DETAILS",
                    "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"])
    if _has(c, t):
        c.execute(f"DELETE FROM {t}")
    return f"table {t} emptied"


def m_many_marks(c, rng):
    tid = c.execute(f"SELECT globalTid FROM {NVTX} WHERE eventType = 34 LIMIT 1").fetchone()
    if tid is None:
        return "no marks to copy"
    t0 = c.execute(f"SELECT min(start) FROM {NVTX}").fetchone()[0] or 0
    n = 50000
    c.executemany(f"INSERT INTO {NVTX}(eventType, start, globalTid, text) VALUES (34, ?, ?, ?)",
                  [(t0 + i, tid[0], f"accept_len={i % 7} reqs={1 + i % 3} cycle={i}") for i in range(n)])
    return f"{n} accept marks"


def m_odd_event_types(c, rng):
    _loose(c, NVTX)
    rows = _rows(c, NVTX, rng, 20)
    c.executemany(f"UPDATE {NVTX} SET eventType = ? WHERE rowid = ?", [(rng.choice([99, -1, 60, 75, 33]), r)
                                                                          for r in rows])
    return "odd NVTX event types"


ROW_AND_SCHEMA = [m_null_times, m_text_ids, m_dup_strings, m_huge_times, m_span_kernels, m_nonfinite, m_negative,
                  m_delete_calls, m_dup_ops, m_odd_marks, m_unclosed, m_drop_table, m_view_table, m_lower_name,
                  m_deep_nesting, m_version_rows, m_type_swap, m_delete_strings, m_empty_table, m_many_marks,
                  m_odd_event_types]


def _has(c, t):
    return c.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND lower(name)=lower(?)", (t,)).fetchone()


def _pk(c, t):
    return any(r[5] for r in c.execute(f"PRAGMA table_info({t})"))


def mutate_sql(path: Path, rng: random.Random) -> str:
    fns = rng.sample(ROW_AND_SCHEMA, rng.randint(1, 2))
    c = sqlite3.connect(path)
    done = []
    try:
        for fn in fns:
            try:
                done.append(fn(c, rng))
                c.commit()
            except sqlite3.Error as exc:       # a table an earlier mutation removed: not applicable
                c.rollback()
                done.append(f"{fn.__name__} not applicable ({exc})")
    finally:
        c.close()
    return "; ".join(done)


FILE_KINDS = ("truncate", "flip", "zero_page", "garbage_shm", "garbage_journal")
"""The damages :func:`mutate_file` does to an SQLite file or beside it."""


def mutate_file(path: Path, rng: random.Random, kind: str | None = None) -> str:
    """``path`` damaged as ``kind`` (:data:`FILE_KINDS`; a random one when None)."""
    data = bytearray(path.read_bytes())
    kind = kind or rng.choice(list(FILE_KINDS))
    if kind == "truncate":
        path.write_bytes(bytes(data[: rng.randint(100, len(data) - 1)]))
    elif kind == "flip":
        for _ in range(rng.randint(1, 20)):
            i = rng.randrange(100, len(data))
            data[i] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif kind == "zero_page":
        page = int.from_bytes(data[16:18], "big") or 65536
        k = rng.randrange(1, max(2, len(data) // page))
        data[k * page:(k + 1) * page] = bytes(min(page, len(data) - k * page))
        path.write_bytes(bytes(data))
    elif kind == "garbage_shm":
        Path(str(path) + "-shm").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    elif kind == "garbage_journal":
        Path(str(path) + "-journal").write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    else:
        raise ValueError(f"no file damage {kind!r}")
    return f"file: {kind}"


def edited_copy(src: Path, dest: Path, edit) -> Path:
    """``src`` copied to ``dest`` and changed by ``edit(connection)`` (committed); returns ``dest``."""
    import shutil

    shutil.copy(src, dest)
    c = sqlite3.connect(dest)
    try:
        edit(c)
        c.commit()
    finally:
        c.close()
    return dest


def digest(path: Path) -> dict:
    if path.is_dir():                   # a columnar export: every file in it
        return {q.name: hashlib.sha256(q.read_bytes()).hexdigest() for q in sorted(path.iterdir()) if q.is_file()}
    out = {}
    for p in [path] + [Path(str(path) + s) for s in ("-wal", "-shm", "-journal")]:
        if p.exists():
            out[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _times(obj, where=""):
    """Every (key, value) of a time in the JSON (keys ending in _ns), recursively."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k.endswith("_ns"):
                yield f"{where}.{k}", v
            else:
                yield from _times(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _times(v, where)


def check(path: Path, out_json: Path, timeout_s: float = 60.0) -> tuple[int, str]:
    """Runs the analyzer (``python -m analyze.cli``, a process of its own: tests/helpers/cli_process.py); returns
    (exit code, stderr). Raises AssertionError on a broken invariant."""
    before = digest(path)
    try:
        r = cli_process.run([str(path), "--json", str(out_json), "-q", "--force"], timeout=timeout_s,
                            env=dict(os.environ, PYTHONHASHSEED="0"))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hang: more than {timeout_s:g} s") from None
    assert digest(path) == before, "the input or a file beside it changed"
    assert r.returncode in DOCUMENTED_EXITS, f"exit {r.returncode}: {r.stderr.strip()[-400:]}"
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-400:]
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.splitlines() if ln.startswith("analyze-trace: error")]
        assert len(lines) == 1, r.stderr
        return r.returncode, r.stderr
    doc = json.loads(out_json.read_text())
    for key, v in _times(doc):
        assert math.isfinite(v), (key, v)
    # durations and sums of GPU time are never negative (signed figures, e.g. lags and offsets, may be)
    for section in ("totals", "phases", "kernels", "cycle_kernels", "nvtx_projection", "decode_breakdown"):
        for key, v in _times(doc.get(section) or []):
            if key.endswith(("offset_ns", "start_ns", "end_ns")):
                continue
            assert v >= 0, (section, key, v)
    for t in doc.get("totals") or []:
        if t.get("exclusive_attributed_ns") is not None:
            assert t["exclusive_attributed_ns"] + t["unattributed_ns"] == t["busy_ns"], t
        assert t["kernel_ns"] >= 0 and t["busy_ns"] >= 0, t
    return 0, r.stderr
