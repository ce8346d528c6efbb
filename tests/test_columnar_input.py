"""nsys's columnar exports as inputs (analyze/read/columnar.py, issue 42): ``parquetdir``/``arrowdir``
directories and nsys 2022.4's one-file ``arrow`` export give the results of their SQLite twin."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from analyze.read import columnar
from helpers import cli_process
from fixtures import columnar as write_columnar
from fixtures import nsys_record

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"


def run_cli(*args, env=None) -> tuple[int, str, str]:
    proc = cli_process.run([*map(str, args)], env=env)
    return proc.returncode, proc.stdout, proc.stderr


def tree_digest(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def without_paths(obj, *paths: str):
    text = json.dumps(obj, sort_keys=True)
    for p in paths:
        text = text.replace(json.dumps(str(p))[1:-1], "INPUT")
    return text


def needs(name: str):
    return pytest.mark.skipif(not (REAL / name).exists(), reason=f"{name} not unpacked")


def sqlite_tables(path, skip=()) -> dict:
    """{table: (columns, rows in rowid order)} of a SQLite file."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = bytes             # text compared byte for byte (invalid UTF-8 included)
    try:
        out = {}
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            t = t.decode() if isinstance(t, bytes) else t
            if t in skip:
                continue
            cols = [r[1].decode() if isinstance(r[1], bytes) else r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            q = f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{t}" ORDER BY rowid'
            out[t] = (cols, conn.execute(q).fetchall())
        return out
    finally:
        conn.close()


@needs("sglang_graphs.sqlite")
def test_a_parquet_export_gives_the_results_of_its_sqlite_twin(tmp_path):
    """The real SGLang export written as a parquetdir (text as binary, ids unsigned, as nsys 2022.4's
    columnar export types them): the report's --json, whatif's and advise's are the SQLite's, and
    ``diff EXPORT SQLITE`` finds no change at all. The export is only read."""
    src = REAL / "sglang_graphs.sqlite"
    export = write_columnar.write(src, tmp_path / "graphs_pqtdir")
    copy = export.with_name(export.name + ".sqlite")
    before = tree_digest(export)
    for args in (["{}", "-q", "--json", "{out}"],
                 ["whatif", "{}", "--steps", "1..4", "--boot", "20", "--json", "{out}"],
                 ["advise", "{}", "--json", "{out}"]):
        outs = []
        for k, report in enumerate((export, src)):
            out = tmp_path / f"{args[0]}_{k}.json"
            argv = [str(report) if a == "{}" else str(out) if a == "{out}" else a for a in args]
            rc, _, err = run_cli(*argv)
            assert rc == 0, (args[0], err)
            outs.append(json.loads(out.read_text()))
        assert without_paths(outs[0], copy, export) == without_paths(outs[1], src), args[0]
    assert '"verify_ns"' in without_paths(outs[1], src)       # a real result, not two empty ones
    rc, _, err = run_cli("diff", export, src, "--json", tmp_path / "diff.json")
    assert rc == 0, err
    summary = json.loads((tmp_path / "diff.json").read_text())["summary"]
    assert len(summary) >= 5 and all(r["delta"] == 0 and r["before"] == r["after"] for r in summary)
    assert any(r["figure"] == "verify_ns" and r["before"] > 0 for r in summary)
    assert tree_digest(export) == before


@needs("sglang_graphs.sqlite")
def test_an_arrowdir_export_with_string_text_copies_every_table_exactly(tmp_path):
    src = REAL / "sglang_graphs.sqlite"
    export = write_columnar.write(src, tmp_path / "graphs_arrowdir", "arrowdir", "string")
    copy = columnar.sqlite_copy(export)
    got = sqlite_tables(copy, skip=(columnar.KEY_TABLE,))
    want = sqlite_tables(src)
    assert got.keys() == want.keys() and len(want) >= 20
    for t in want:
        assert got[t] == want[t], t
    assert len(want["CUPTI_ACTIVITY_KIND_KERNEL"][1]) > 1000


@needs("sglang_graphs.sqlite")
def test_the_copy_is_made_once_remade_when_the_export_changes_and_goes_to_the_cache_when_read_only(
        tmp_path, monkeypatch):
    export = write_columnar.write(REAL / "sglang_graphs.sqlite", tmp_path / "x" / "e_pqtdir")
    copy = columnar.sqlite_copy(export)
    assert copy == export.with_name("e_pqtdir.sqlite")
    mtime = copy.stat().st_mtime_ns
    assert columnar.sqlite_copy(export) == copy and copy.stat().st_mtime_ns == mtime     # reused
    kernels = export / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    os.utime(kernels, ns=(kernels.stat().st_atime_ns, kernels.stat().st_mtime_ns + 10**9))
    again = columnar.sqlite_copy(export)
    assert again == copy and copy.stat().st_mtime_ns != mtime                            # remade
    assert columnar.copy_key(copy) == columnar.export_key(export)
    # a directory that cannot be written (here: under /proc, which not even root writes): the user cache
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "cache"))
    places = columnar._copy_places(export, columnar.export_key(export))
    monkeypatch.setattr(columnar, "_copy_places",
                        lambda p, key: [Path("/proc/specprof-test/e_pqtdir.sqlite"), places[1]])
    cached = columnar.sqlite_copy(export)
    assert cached.parent == tmp_path / "cache" / "columnar" and cached.is_file()
    assert columnar.copy_key(cached) == columnar.export_key(export)


def test_a_corrupt_table_file_is_one_line_and_exit_6(tmp_path):
    export = tmp_path / "bad_pqtdir"
    export.mkdir()
    (export / "StringIds.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    rc, _, err = run_cli(export, "-q")
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 6 and len(lines) == 1 and "does not read" in lines[0] and "Traceback" not in err, err
    assert not list(tmp_path.glob("*.sqlite")) and not list(tmp_path.glob(".*tmp"))     # nothing half-written left


def test_a_directory_of_parquet_files_that_is_no_export_is_still_a_live_log_candidate(tmp_path):
    from analyze.run import live

    (tmp_path / "rank0.parquet").write_bytes(b"")
    assert live.is_live_path(tmp_path)
    (tmp_path / "StringIds.parquet").write_bytes(b"")
    assert not live.is_live_path(tmp_path) and columnar.table_files(tmp_path) is not None


@pytest.mark.nsys
def test_nsys_2022_arrow_export_equals_its_sqlite_export(tmp_path):
    """A real nsys export in both formats, of one report recorded here: every table of nsys's SQLite
    export equals the copy's (columns, rows, order, NULLs), and the report of both is the same."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys not on PATH")
    code = ("from nvtx_annotate import _nvtx\n"
            "_nvtx.mark('rank=0 world=1 device=cpu')\n"
            "for i in range(5):\n    _nvtx.push('verify'); _nvtx.push('draft'); _nvtx.pop(); _nvtx.pop()\n"
            "_nvtx.mark('accept_len=3 reqs=2 cycle=1 lens=1,2')\n")
    rec, rep = nsys_record.record(tmp_path / "t", [sys.executable, "-c", code], trace="nvtx,osrt", cwd=ROOT)
    assert rep.exists(), rec.stderr[-2000:]
    for typ, out in (("sqlite", "t.sqlite"), ("arrow", "t_arrow")):
        proc = subprocess.run(["nsys", "export", "--type", typ, "-o", str(tmp_path / out), str(rep)],
                              capture_output=True, text=True, timeout=300)
        assert (tmp_path / out).exists(), proc.stderr[-2000:]
    arrow = tmp_path / "t_arrow"
    if not columnar.is_arrow_stream_file(arrow):
        pytest.skip("this nsys writes another arrow layout")
    copy = columnar.sqlite_copy(arrow)
    a = sqlite3.connect(tmp_path / "t.sqlite")
    b = sqlite3.connect(copy)
    tables_a = {r[0] for r in a.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    tables_b = {r[0] for r in b.execute("SELECT name FROM sqlite_master WHERE type='table'")} - {columnar.KEY_TABLE}
    compared = 0
    for t in sorted(tables_a & tables_b):
        cols = [r[1] for r in a.execute(f'PRAGMA table_info("{t}")')]
        assert cols == [r[1] for r in b.execute(f'PRAGMA table_info("{t}")')], t
        q = f'SELECT {", ".join(chr(34) + c + chr(34) for c in cols)} FROM "{t}" ORDER BY rowid'
        rows_a, rows_b = a.execute(q).fetchall(), b.execute(q).fetchall()
        if t == "EXPORT_META_DATA":          # the export's own file name and duration differ, of course
            rows_a, rows_b = ([r for r in rows if not r[0].startswith(("EXPORT_TIME", "EXPORT_OUT", "EXPORT_TYPE"))]
                              for rows in (rows_a, rows_b))
        assert rows_a == rows_b, t
        compared += 1
    assert {"NVTX_EVENTS", "StringIds", "TARGET_INFO_SESSION_START_TIME"} <= tables_a & tables_b
    assert compared >= 5
    rc_a, out_a, _ = run_cli(tmp_path / "t.sqlite")
    rc_b, out_b, _ = run_cli(arrow)
    assert rc_a == rc_b == 0 or rc_a == rc_b == 7
    assert "verify" in out_a and out_b.replace(str(copy), "X") == out_a.replace(str(tmp_path / "t.sqlite"), "X")


# --- a review of the first version (2026-12-05) ----------------------------------------------------

@needs("sglang_graphs.sqlite")
def test_a_directory_of_exports_reads_each_export_not_its_stale_copy(tmp_path):
    """Beside a directory of exports their copies are written; a later run must still take the
    exports (their copies remade when they changed), an export added later too, and a report of the
    user's own in the same directory."""
    from analyze.read.inputs import find_reports
    from analyze.read.nsys_export import expand_inputs

    runs = tmp_path / "runs"
    a = write_columnar.write(REAL / "sglang_graphs.sqlite", runs / "a_pqtdir")
    shutil.copy(REAL / "sglang_server.sqlite", runs / "own.sqlite")
    assert expand_inputs([runs]) == [str(runs / "a_pqtdir.sqlite"), str(runs / "own.sqlite")]
    b = write_columnar.write(REAL / "sglang_graphs.sqlite", runs / "b_pqtdir")
    assert find_reports(runs) == [a, b, runs / "own.sqlite"]          # not the copy a_pqtdir.sqlite
    old_key = columnar.copy_key(runs / "a_pqtdir.sqlite")
    kernels = a / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    os.utime(kernels, ns=(kernels.stat().st_atime_ns, kernels.stat().st_mtime_ns + 10**9))
    assert expand_inputs([runs]) == [str(runs / f) for f in ("a_pqtdir.sqlite", "b_pqtdir.sqlite", "own.sqlite")]
    assert columnar.copy_key(runs / "a_pqtdir.sqlite") not in (None, old_key)     # remade


@needs("sglang_graphs.sqlite")
def test_a_users_file_under_the_copys_name_is_never_replaced(tmp_path, monkeypatch):
    export = write_columnar.write(REAL / "sglang_graphs.sqlite", tmp_path / "e_pqtdir")
    mine = tmp_path / "e_pqtdir.sqlite"
    mine.write_bytes(b"my notes, not a copy")
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "cache"))
    copy = columnar.sqlite_copy(export)
    assert mine.read_bytes() == b"my notes, not a copy"
    assert copy.parent == tmp_path / "cache" / "columnar"


def test_text_that_is_not_utf8_is_copied_byte_for_byte(tmp_path):
    """A synthetic export with a name that is not valid UTF-8, as a parquetdir with binary text: the
    copy holds the same bytes as the SQLite (the same note, the same names), no crash."""
    from fixtures.synth import TraceSpec, write_trace

    paths, _ = write_trace(TraceSpec(ranks=1, cycles=2, invalid_utf8=True), tmp_path)
    src = Path(paths[0])
    export = write_columnar.write(src, tmp_path / "bad_utf8_pqtdir")
    copy = columnar.sqlite_copy(export)
    got = sqlite_tables(copy, skip=(columnar.KEY_TABLE,))
    conn = sqlite3.connect(src)
    conn.text_factory = bytes
    want_strings = conn.execute("SELECT id, value FROM StringIds ORDER BY rowid").fetchall()
    conn2 = sqlite3.connect(copy)
    conn2.text_factory = bytes
    assert conn2.execute("SELECT id, value FROM StringIds ORDER BY rowid").fetchall() == want_strings
    assert any(b"\xff" in v or b"\xfe" in v or b"\x80" in v for _, v in want_strings)
    assert "StringIds" in got
    rc_a, _, _ = run_cli(src, "-q", "--json", tmp_path / "a.json")
    rc_b, _, _ = run_cli(export, "-q", "--json", tmp_path / "b.json")
    assert rc_a == rc_b == 0
    a = without_paths(json.loads((tmp_path / "a.json").read_text()), src)
    b = without_paths(json.loads((tmp_path / "b.json").read_text()), copy)
    assert a == b and "not valid UTF-8" in a


def test_a_real_nsys_2025_parquetdir_id_beyond_2_63_reads_as_nsys_sqlite_export_stores_it(tmp_path):
    """nsys 2025.3.1's parquetdir export holds DIAGNOSTIC_EVENT.globalPid unsigned, two rows of it
    0xfe00000000000000 (beyond SQLite's integers); nsys's SQLite export of the same report stores them as
    the signed integer of the same bits. The real file, its SQLite twin's rows recorded beside it."""
    real = REAL / "nsys2025_parquetdir_diag"
    want = json.loads((real / "sqlite_rows.json").read_text())["tables"]
    out = tmp_path / "diag.sqlite"
    assert columnar.write_sqlite(real, out) == 3 == len(want)
    conn = sqlite3.connect(out)
    for table, t in want.items():
        cols = ", ".join(f'"{c}"' for c in t["columns"])
        got = conn.execute(f'SELECT {cols} FROM "{table}" ORDER BY rowid').fetchall()
        assert got == [tuple(r) for r in t["rows"]], table
    pids = [r[0] for r in conn.execute("SELECT globalPid FROM DIAGNOSTIC_EVENT")]
    conn.close()
    assert len(pids) == 40 and pids.count(-144115188075855872) == 2 and -144115188075855872 % 2 ** 64 == 0xfe << 56


def test_unsigned_ids_beyond_2_63_round_trip_through_the_copy(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    export = tmp_path / "big_pqtdir"
    export.mkdir()
    pq.write_table(pa.table({"id": pa.array([1], pa.uint64()), "value": pa.array([b"x"])}),
                   export / "StringIds.parquet")
    pq.write_table(pa.table({"globalTid": pa.array([2 ** 63 + 5, 7, None], pa.uint64())}),
                   export / "ThreadNames.parquet")
    out = tmp_path / "c.sqlite"
    columnar.write_sqlite(export, out)
    conn = sqlite3.connect(out)
    assert [r[0] for r in conn.execute('SELECT globalTid FROM ThreadNames ORDER BY rowid')] == [-(2 ** 63) + 5, 7, None]
    conn.close()


@needs("sglang_graphs.sqlite")
def test_the_export_directory_given_as_dot_or_with_a_slash(tmp_path):
    export = write_columnar.write(REAL / "sglang_graphs.sqlite", tmp_path / "e_pqtdir")
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", ".", "-q", "--json", str(tmp_path / "a.json")],
                          capture_output=True, text=True, cwd=export,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "e_pqtdir.sqlite").exists()
    rc, _, err = run_cli(str(export) + "/", "-q")
    assert rc == 0, err


def test_a_truncated_arrow_stream_export_is_corrupt_not_a_shorter_report(tmp_path):
    """nsys 2022.4's one-file arrow export cut short between two tables: exit 6 (before, the reader
    took the cut for the end of the file and analysed what came before it)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    full = tmp_path / "full_arrow"
    with open(full, "wb") as f:
        for name in ("StringIds", "ThreadNames"):
            t = pa.table({"id": pa.array([1, 2], pa.int32()), "value": pa.array([b"a", b"b"])},
                         metadata={"table_name": name})
            with ipc.new_stream(f, t.schema) as w:
                w.write_table(t)
    assert columnar.is_arrow_stream_file(full)
    copy = columnar.sqlite_copy(full)
    assert set(sqlite_tables(copy, skip=(columnar.KEY_TABLE,))) == {"StringIds", "ThreadNames"}
    data = full.read_bytes()
    cut = tmp_path / "cut_arrow"
    cut.write_bytes(data[: len(data) // 2 + 3])
    rc, _, err = run_cli(cut, "-q")
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 6 and len(lines) == 1, err


@needs("sglang_graphs.sqlite")
def test_the_copy_reads_a_batch_at_a_time_and_equals_the_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(columnar, "INSERT_BATCH_ROWS", 97)
    export = write_columnar.write(REAL / "sglang_graphs.sqlite", tmp_path / "e_pqtdir")
    copy = columnar.sqlite_copy(export)
    got = sqlite_tables(copy, skip=(columnar.KEY_TABLE,))
    want = sqlite_tables(REAL / "sglang_graphs.sqlite")
    assert got == want
