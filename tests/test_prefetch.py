"""The API calls read while analyze-trace starts up (read/prefetch.py): taken by the analysis for
the same statement on the same, unchanged file, by the reader that made it, never otherwise; the
output is the same as without the early read; no early read where the analysis would not use
pages.py on an immutable report."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from analyze import cli
from analyze.read import connection, pages, prefetch, statements

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
        sql = statements.calls_statement(connection.table_columns(conn, statements.RUNTIME_TABLE))
        return conn.path, sql
    finally:
        conn.close()


def test_the_analysis_takes_the_early_read_and_writes_the_same(tmp_path, monkeypatch):
    reads: list[str] = []
    module, name = pages, "read_table"
    real_read = getattr(module, name)

    def counting(conn, sql):
        reads.append(sql)
        return real_read(conn, sql)

    monkeypatch.setattr(module, name, counting)
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


def _wait_for_read(key) -> object:
    """The early read of ``key`` once done (its rows, before anything takes them)."""
    read = prefetch._PENDING[key]
    read.thread.join()
    return read.table


@pytest.mark.parametrize("change", ["replaced", "touched"])
def test_a_changed_file_is_read_again(tmp_path, change):
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    assert prefetch.start_calls(path)
    where, sql = _statement(path)
    assert _wait_for_read(prefetch._key(where, sql)) is not None     # read: only the change refuses it
    if change == "replaced":
        other = tmp_path / "other.sqlite"
        shutil.copy(REAL / "h200_shim_4rank_single.sqlite", other)
        os.replace(other, path)                          # another file under the same name
    else:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))   # written since
    assert prefetch.take(where, sql, "pages") is None
    assert prefetch.start_calls(path)
    table = prefetch.take(where, sql, "pages")
    conn = connection.open_report(path)
    try:
        assert table.num_rows == conn.execute(f"SELECT count(*) FROM {statements.RUNTIME_TABLE}").fetchone()[0]
    finally:
        conn.close()
    assert prefetch.take(where, sql, "pages") is None            # taken once


def test_only_the_same_statement_file_and_reader_take_it(tmp_path):
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    other = tmp_path / "other.sqlite"
    shutil.copy(REPORT, other)
    assert prefetch.start_calls(path)
    where, sql = _statement(path)
    assert prefetch.take(where, sql + " WHERE 1", "pages") is None and prefetch.pending() == 1
    assert prefetch.take(str(other), sql, "pages") is None and prefetch.pending() == 1
    assert prefetch.take(where, sql, "stdlib") is None and prefetch.pending() == 1   # made by pages
    link = tmp_path / "link.sqlite"
    link.symlink_to(path)
    assert prefetch.take(str(link), sql, "pages").num_rows > 0       # the same file by another name
    assert prefetch.pending() == 0


@pytest.mark.parametrize("case", ["wal", "not_a_report", "missing", "directory", "stdlib", "adbc", "no_calls",
                                  "no_reader"])
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
    elif case == "no_reader":
        monkeypatch.setattr(prefetch, "readers", lambda: ())
    elif case == "no_calls":
        import sqlite3
        con = sqlite3.connect(path)
        con.execute(f"DROP TABLE {statements.RUNTIME_TABLE}")
        con.commit()
        con.close()
    before = path.read_bytes() if path.is_file() else None
    assert prefetch.start_calls(path) is False
    assert prefetch.pending() == 0
    if before is not None:
        assert path.read_bytes() == before


@pytest.mark.parametrize("case", ["not_sqlite", "output_replaces_input", "early_read_fails"])
def test_errors_and_output_are_those_without_an_early_read(case, tmp_path, monkeypatch, capsys):
    """Exit code, stderr and stdout with the early read equal those without it: on an input the
    early read refuses, on an error after it started, and when the early read itself fails (the
    analysis then reads the calls)."""
    path = tmp_path / "r.sqlite"
    if case == "not_sqlite":
        path.write_text("not sqlite\n")
    else:
        shutil.copy(REPORT, path)
    argv = [str(path)] + (["--json", str(path)] if case == "output_replaces_input" else [])
    if case == "early_read_fails":
        for module, name in [(pages, "read_table")]:
            def fails_early(conn, sql, _real=getattr(module, name)):
                import threading

                if threading.current_thread().name == "specprof-prefetch":
                    raise RuntimeError("no early read")
                return _real(conn, sql)

            monkeypatch.setattr(module, name, fails_early)
    started: list[bool] = []
    start = prefetch.start_calls
    monkeypatch.setattr(prefetch, "start_calls", lambda p: started.append(start(p)) or started[-1])
    early = cli.main(argv), capsys.readouterr()
    assert started == [case != "not_sqlite"]
    monkeypatch.setattr(prefetch, "start_calls", lambda p: False)
    late = cli.main(argv), capsys.readouterr()
    assert early[0] == late[0] and early[1].err == late[1].err and early[1].out == late[1].out
    assert (early[0] == 0) == (case == "early_read_fails")


def test_which_runs_read_early():
    parse = cli.build_parser().parse_args
    assert cli.early_read_path(parse(["r.sqlite"])) == "r.sqlite"
    assert cli.early_read_path(parse(["r.sqlite", "--memory-budget", "1GB", "-q"])) == "r.sqlite"
    for argv in (["a.sqlite", "b.sqlite"], ["r.sqlite", "--cache"], ["r.sqlite", "--scheduler", "tcp://x:1"], []):
        assert cli.early_read_path(parse(argv)) is None


def test_an_error_does_not_wait_for_the_early_read(tmp_path, monkeypatch, capsys):
    """The analysis stops on an output that would replace its input while the early read still runs:
    the error comes at once (the read is dropped, not waited for)."""
    import threading
    import time

    release = threading.Event()
    real_read = pages.read_table

    def slow(conn, sql):
        release.wait(30)
        return real_read(conn, sql)

    monkeypatch.setattr(pages, "read_table", slow)
    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    before = path.read_bytes()
    t0 = time.monotonic()
    code = cli.main([str(path), "-q", "--json", str(path)])          # the output would replace the input
    elapsed = time.monotonic() - t0
    release.set()
    assert code != 0 and elapsed < 20 and prefetch.pending() == 0 and path.read_bytes() == before
    assert capsys.readouterr().err.count("\n") == 1


def test_auto_budget_takes_the_memory_available_before_the_early_read(tmp_path, monkeypatch):
    """The estimate of the whole analysis holds the libraries and the calls already; the kernel's
    figure taken once rows were read early (or while they are being read) counts them as used: the
    auto decision takes the figure from before the early read started, for that file only, whether
    the rows were taken yet or not."""
    from analyze import memory
    from analyze.run import api

    path = tmp_path / "r.sqlite"
    shutil.copy(REPORT, path)
    other = tmp_path / "other.sqlite"
    shutil.copy(REPORT, other)
    need = api.estimate_whole_bytes(str(path))
    fits = int(need / api.AUTO_FIT_SHARE) + 1
    assert prefetch.available_before(str(path)) is None
    monkeypatch.setattr(memory, "available_bytes", lambda: fits)      # before the early read
    assert prefetch.start_calls(path)
    monkeypatch.setattr(memory, "available_bytes", lambda: fits // 2)  # later: the rows count as used
    assert prefetch.available_before(str(path)) == fits
    assert prefetch.available_before(str(tmp_path / "." / "r.sqlite")) == fits      # the same file
    assert api.auto_budget(str(path)) == (None, None)                  # whole
    assert api.auto_budget(str(other))[0] is not None                  # another file: the kernel's figure
    where, sql = _statement(path)
    assert prefetch.take(where, sql, "pages") is not None
    assert api.auto_budget(str(path)) == (None, None)                  # taken: still the figure from before
    prefetch.forget()
    assert prefetch.available_before(str(path)) is None
    assert api.auto_budget(str(path))[0] is not None
