"""The API calls read while analyze-trace starts up (read/prefetch.py): taken by the analysis for
the same statement on the same, unchanged file, never otherwise; the output is the same as
without the early read; no early read where the analysis would not use connectorx on an
immutable report."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from analyze import cli
from analyze.read import connection, cxread, prefetch

pytest.importorskip("connectorx")
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
REPORT = REAL / "h200_4proc_eager.sqlite"


@pytest.fixture(autouse=True)
def _no_leftovers():
    prefetch.forget()
    yield
    assert prefetch.pending() == 0
    prefetch.forget()


def _statement(path) -> tuple[str, str]:
    conn = connection.open_report(path)
    try:
        sql = prefetch.calls_statement(connection.table_columns(conn, prefetch.RUNTIME_TABLE))
        return cxread.connection_string(conn.path, conn.immutable), sql
    finally:
        conn.close()


def test_the_analysis_takes_the_early_read_and_writes_the_same(tmp_path, monkeypatch):
    reads: list[str] = []
    real_read = cxread.read_table

    def counting(cs, sql):
        reads.append(sql)
        return real_read(cs, sql)

    monkeypatch.setattr(cxread, "read_table", counting)
    started: list[bool] = []
    start = prefetch.start_calls
    monkeypatch.setattr(prefetch, "start_calls", lambda p: started.append(start(p)) or started[-1])
    assert cli.main([str(REPORT), "-q", "--json", str(tmp_path / "early.json")]) == 0
    assert started == [True]
    calls_sql = _statement(REPORT)[1]
    assert reads.count(calls_sql) == 1                 # read once, early, and taken by the analysis
    assert prefetch.pending() == 0

    monkeypatch.setattr(prefetch, "start_calls", lambda p: False)
    reads.clear()
    assert cli.main([str(REPORT), "-q", "--json", str(tmp_path / "late.json")]) == 0
    assert reads.count(calls_sql) == 1
    early, late = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("early", "late"))
    assert early == late


def test_a_changed_file_is_read_again(tmp_path):
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    assert prefetch.start_calls(path)
    cs, sql = _statement(path)
    other = tmp_path / "other.sqlite"
    shutil.copy(REAL / "h200_shim_4rank_single.sqlite", other)
    os.replace(other, path)                          # another file under the same name
    assert prefetch.take(cs, sql) is None
    assert prefetch.start_calls(path)
    table = prefetch.take(cs, sql)
    conn = connection.open_report(path)
    try:
        assert table.num_rows == conn.execute(f"SELECT count(*) FROM {prefetch.RUNTIME_TABLE}").fetchone()[0]
    finally:
        conn.close()
    assert prefetch.take(cs, sql) is None            # taken once


def test_only_the_same_statement_takes_it(tmp_path):
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    assert prefetch.start_calls(path)
    cs, sql = _statement(path)
    assert prefetch.take(cs, sql + " WHERE 1") is None and prefetch.pending() == 1
    assert prefetch.take(cs.replace("&immutable=1", ""), sql) is None and prefetch.pending() == 1
    prefetch.forget()
    assert prefetch.pending() == 0


@pytest.mark.parametrize("case", ["wal", "not_a_report", "missing", "directory", "stdlib", "adbc", "no_calls"])
def test_no_early_read(case, tmp_path, monkeypatch):
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    if case == "wal":
        (tmp_path / "r.sqlite-wal").write_bytes(b"")
    elif case == "not_a_report":
        path.write_text("hello\n")
    elif case == "missing":
        path = tmp_path / "absent.sqlite"
    elif case == "directory":
        path = tmp_path
    elif case in ("stdlib", "adbc"):
        monkeypatch.setenv("SPECPROF_READER", case)
    elif case == "no_calls":
        import sqlite3
        con = sqlite3.connect(path)
        con.execute(f"DROP TABLE {prefetch.RUNTIME_TABLE}")
        con.commit()
        con.close()
    before = path.read_bytes() if path.is_file() else None
    assert prefetch.start_calls(path) is False
    assert prefetch.pending() == 0
    if before is not None:
        assert path.read_bytes() == before


def test_errors_are_the_analysis_own(tmp_path, capsys):
    """An input the early read cannot use gets the analysis' one line and exit code, as before."""
    bad = tmp_path / "bad.sqlite"
    bad.write_text("not sqlite\n")
    code = cli.main([str(bad), "-q"])
    err = capsys.readouterr().err
    assert code != 0 and "not an SQLite database" in err and err.count("\n") == 1


def test_an_error_does_not_wait_for_the_early_read(tmp_path, monkeypatch, capsys):
    """The analysis stops on an output that would replace its input while the early read still runs:
    the error comes at once (the read is dropped, not waited for)."""
    import threading
    import time

    release = threading.Event()
    real_read = cxread.read_table

    def slow(cs, sql):
        release.wait(30)
        return real_read(cs, sql)

    monkeypatch.setattr(cxread, "read_table", slow)
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    before = path.read_bytes()
    t0 = time.monotonic()
    code = cli.main([str(path), "-q", "--json", str(path)])          # the output would replace the input
    elapsed = time.monotonic() - t0
    release.set()
    assert code != 0 and elapsed < 20 and prefetch.pending() == 0 and path.read_bytes() == before
    assert capsys.readouterr().err.count("\n") == 1
