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
from fixtures import columnar as write_columnar

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"


def run_cli(*args, env=None) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", *map(str, args)], capture_output=True, text=True,
                          env=env)
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
    try:
        out = {}
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            if t in skip:
                continue
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
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
                 ["whatif", "{}", "--steps", "1..4", "--json", "{out}"],
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
    places = columnar._copy_places(export)
    monkeypatch.setattr(columnar, "_copy_places", lambda p: [Path("/proc/specprof-test/e_pqtdir.sqlite"), places[1]])
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
    rec = subprocess.run(["nsys", "profile", "-t", "nvtx,osrt", "--sample=none", "--cpuctxsw=none", "-o",
                          str(tmp_path / "t"), sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    rep = tmp_path / "t.nsys-rep"
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
