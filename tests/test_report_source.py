"""The map task's one seam to its report (analyze/read/source.py, issue 42): opened once."""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest

import analyze
from analyze.errors import MissingInput
from analyze.read import connection, source

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
GRAPHS = REAL / "sglang_graphs.sqlite"


def count_opens(monkeypatch):
    """Openings of a report by the analysis, by the function that asked (the parallel readers'
    own connections, ``on_own_connection``, apart)."""
    opened = []
    real = connection.open_report

    def spy(*args, **kwargs):
        caller = traceback.extract_stack(limit=2)[0].name      # the function that called open_report
        opened.append(caller)
        return real(*args, **kwargs)

    import analyze.read.capture as capture_mod
    import analyze.read.report as report_mod

    for mod in (connection, report_mod, capture_mod, source):
        monkeypatch.setattr(mod, "open_report", spy)
    return opened


@pytest.mark.skipif(not GRAPHS.exists(), reason="fixtures not unpacked")
def test_one_analysis_opens_its_report_once(monkeypatch):
    opened = count_opens(monkeypatch)
    a = analyze.load(str(GRAPHS))
    assert int(a.totals["gpu_ops"].sum()) > 0
    main = [c for c in opened if c != "on_own_connection"]
    assert main == ["_open"], opened          # the ReportSource's one opening (sizes, checks, tables)


@pytest.mark.skipif(not GRAPHS.exists(), reason="fixtures not unpacked")
def test_a_source_closes_what_it_opened_and_reads_like_the_functions(tmp_path):
    from analyze.read import report

    with source.ReportSource(GRAPHS) as src:
        assert src.row_counts() == report.row_counts(str(GRAPHS))
        src.require_gpu_activity()
        tables = src.tables()
        conn = src._conn
    assert src._conn is None
    with pytest.raises(Exception):
        conn.execute("SELECT 1")              # closed
    whole = report.read_report(str(GRAPHS))
    assert tables.gpu_ops.equals(whole.gpu_ops) and tables.calls.equals(whole.calls)


def test_a_missing_report_has_no_sizes_and_says_why(tmp_path):
    src = source.ReportSource(tmp_path / "nope.sqlite")
    assert src.row_counts() is None
    with pytest.raises(MissingInput):
        src.require_gpu_activity()
