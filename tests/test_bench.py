"""bench/: the benchmark measures (never extrapolates), stops what runs too long and says so, and
its bare reads fetch the very rows analyze-trace reads. The end-to-end run is marked slow."""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bare_read, run, tile_real  # noqa: E402

REAL = ROOT / "fixtures" / "real" / "h200_4proc_eager.sqlite"


def test_timed_measures_wall_cpu_peak_and_stops_past_the_timeout(tmp_path):
    r = run.timed([sys.executable, "-c", "x = bytearray(60 * 2**20); sum(range(3 * 10**6))"])
    assert r["rc"] == 0 and not r["timed_out"]
    assert r["wall_s"] > 0 and r["cpu_s"] > 0 and r["peak_mib"] >= 60
    r = run.timed([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert r["timed_out"] and r["wall_s"] < 10 and "cpu_s" not in r


def test_median_run_keeps_every_wall_time():
    runs = [{"wall_s": w, "rc": 0, "timed_out": False} for w in (3.0, 1.0, 2.0)]
    m = run.median_run(runs)
    assert m["wall_s"] == 2.0 and m["walls_s"] == [3.0, 1.0, 2.0]


def test_ratios_and_table_use_only_measured_runs():
    def r(w, cpu=1.0, read=False, timed_out=False):
        return {"wall_s": w, "cpu_s": cpu, "rc": 0, "timed_out": timed_out, "peak_mib": 100.0, "label": "x",
                "read": read}
    row = {"file_kind": "synth", "target_kernels": 10, "file": "f", "file_mib": 1.0, "rows": {"kernels": 1_000_000},
           "runs": {"bare_adbc_1": r(2.0, read=True), "bare_connectorx_2": r(1.0, read=True),
                    "analyze": r(1.5, 3.0), "nsys25_proj": r(30.0, 30.0)}}
    rt = run.ratios(row)
    assert rt["analyze_over_read"] == 1.5 and rt["nsys_proj_over_analyze"] == 20.0
    assert run.fastest_read(row)[0] == "bare_connectorx_2"
    row["runs"]["nsys25_proj"] = {"wall_s": None, "rc": -9, "timed_out": True, "label": "nsys"}
    rt = run.ratios(row)
    assert "nsys_proj_over_analyze" not in rt and rt["nsys_proj_over_analyze_min"] == run.TIMEOUT_S / 1.5
    md = run.markdown({"machine": run.machine(), "command": "python -m bench.run", "date": "today", "repeat": 3,
                       "timeout_s": run.TIMEOUT_S, "rows": [row]})
    assert "> 30 min" in md and "(est.)" not in md and "estimated" not in md


def test_readme_table_replaced_between_the_marks(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"a\n{run.README_BEGIN}\nold\n{run.README_END}\nb\n")
    assert run.update_readme("new table\n", readme)
    assert readme.read_text() == f"a\n{run.README_BEGIN}\nnew table\n{run.README_END}\nb\n"
    other = tmp_path / "other.md"
    other.write_text("no marks\n")
    assert not run.update_readme("x", other) and other.read_text() == "no marks\n"


def test_bare_read_statements_are_those_of_analyze_trace_and_read_the_same_rows(tmp_path):
    sqls = bare_read.record(str(REAL))
    assert any("CUPTI_ACTIVITY_KIND_KERNEL" in s for s in sqls) and any("NVTX_EVENTS" in s for s in sqls)
    assert not any("LIMIT" in s for s in sqls)
    con = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    want = sum(len(con.execute(s).fetchall()) for s in sqls)
    con.close()
    assert bare_read.read("pages", 1, sqls, str(REAL)) == want
    assert bare_read.read("pages", 2, sqls, str(REAL)) == want
    assert bare_read.for_connectorx("SELECT a, NULL, COALESCE(b, c), d FROM t WHERE x") == \
        "SELECT a, IFNULL(COALESCE(b, c), 0), d FROM t WHERE x"
    assert bare_read.split_select("SELECT a, f(b, c), d FROM t") == (["a", "f(b, c)", "d"], "FROM t")
    for backend, module in (("adbc", "adbc_driver_sqlite"), ("connectorx", "connectorx")):
        if run.have_module(module):          # (pip install .[bench]; skipped where absent)
            assert bare_read.read(backend, 2, sqls, str(REAL)) == want, backend


def test_bare_read_contenders_are_those_installed(monkeypatch):
    """ADBC and connectorx are bench-only (the [bench] extra): each is a contender only where it is
    installed; pages.py always is."""
    for have in ([], ["connectorx"], ["adbc_driver_sqlite"], ["adbc_driver_sqlite", "connectorx"]):
        monkeypatch.setattr(run, "have_module", lambda name, have=have: name in have)
        want = (["adbc"] if "adbc_driver_sqlite" in have else []) + (["connectorx"] if "connectorx" in have else [])
        assert run.bare_backends() == want + ["pages"]


def test_tiled_real_trace_has_eight_ranks_and_the_source_kernels_times_tiles(tmp_path):
    out = tmp_path / "tiled.sqlite"
    before = REAL.read_bytes()
    tile_real.build(REAL, out, kernels=12_000)
    assert REAL.read_bytes() == before
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    src = sqlite3.connect(f"file:{REAL}?mode=ro", uri=True)
    k_src = src.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    tiles = -(-12_000 // (2 * k_src))
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 2 * k_src * tiles
    assert con.execute("SELECT count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 8
    starts = [r[0] for r in con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY rowid")]
    con_ops = sum(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for (t,) in con.execute(
        "SELECT name FROM sqlite_master WHERE name IN ('CUPTI_ACTIVITY_KIND_KERNEL', "
        "'CUPTI_ACTIVITY_KIND_MEMCPY', 'CUPTI_ACTIVITY_KIND_MEMSET')").fetchall())
    assert starts == sorted(starts)
    src.close()
    con.close()
    from analyze.run import api
    a = api.load(str(out))
    assert sorted(a.ranks["rank"]) == list(range(8)) and set(a.ranks["source"]) == {"mark"}
    # every tiled op is inside the lengthened session: none left out
    assert not [n.code for n in a.notes if n.code in ("outside_session", "bad_timestamps", "duplicate_rows")]
    assert len(a.gpu_ops) == con_ops
    # twins are exact copies: the same busy time as their source rank
    busy = a.totals.set_index("rank")["busy_ns"]
    assert all(busy[r] == busy[r + 4] for r in range(4))


def test_tiled_sglang_trace_is_eight_copies_of_its_one_process(tmp_path):
    """The real SGLang server trace (one process, CUDA graphs) as 8 ranks: each rank is the
    source's process, once per tile, to the nanosecond; its rank mark and the domains' creation
    once per process, every other mark (the accepted-token marks) in every tile, with the decode-
    cycle numbers counting on."""
    from analyze.render import text
    from analyze.run import api

    src_path = ROOT / "fixtures" / "real" / "sglang_server.sqlite"
    before = src_path.read_bytes()
    out = tile_real.build(src_path, tmp_path / "tiled.sqlite", kernels=100_000)
    assert src_path.read_bytes() == before
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    src = sqlite3.connect(f"file:{src_path}?mode=ro", uri=True)
    count = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    k_src = src.execute(count).fetchone()[0]
    tiles = -(-100_000 // (8 * k_src))
    assert tiles == 2 and con.execute(count).fetchone()[0] == 8 * k_src * tiles
    marks = "SELECT {} FROM NVTX_EVENTS LEFT JOIN StringIds s ON s.id = textId WHERE eventType = 34 AND "
    src_rank_marks = src.execute(marks.format("count(*)") + "coalesce(text, s.value) LIKE 'rank=%'").fetchone()[0]
    src_other_marks = src.execute(marks.format("count(*)") + "coalesce(text, s.value) NOT LIKE 'rank=%'").fetchone()[0]
    assert sorted(set(r[0] for r in con.execute(marks.format("coalesce(text, s.value)") + "text LIKE 'rank=%'"))) == \
        [f"rank={r} world=8 device=0" for r in range(8)]
    assert con.execute(marks.format("count(*)") + "coalesce(text, s.value) LIKE 'rank=%'").fetchone()[0] == \
        8 * src_rank_marks
    assert con.execute(marks.format("count(*)") + "coalesce(text, s.value) NOT LIKE 'rank=%'").fetchone()[0] == \
        8 * tiles * src_other_marks
    src.close()
    con.close()
    one, a = api.load(str(src_path)), api.load(str(out))
    assert sorted(a.ranks["rank"]) == list(range(8)) and set(a.ranks["source"]) == {"mark"}
    assert not [n.code for n in a.notes if n.code in ("outside_session", "bad_timestamps", "duplicate_rows")]
    busy = a.totals.set_index("rank")["busy_ns"]
    assert set(busy) == {tiles * int(one.totals["busy_ns"].iloc[0])}
    assert set(a.cycles.groupby("rank").size()) == {tiles * len(one.cycles)}
    # the cycle numbers count on from tile to tile: each cycle gets its own accept mark's tokens
    # and requests, as in one longer run (not every tile's marks summed on the first tile's cycles)
    for col in ("tokens", "requests"):
        assert set(a.cycles.groupby("rank")[col].sum()) == {tiles * one.cycles[col].sum()}, col
        assert a.cycles[col].max() == one.cycles[col].max(), col
    # every rank alike: the set-up outside the cycles is one figure, not a range
    outside = " ".join(text.render(a, width=200).split("Outside decode cycles: ", 1)[1].split("\n")[:2])
    each = text.render(one, width=200).split("Outside decode cycles: ", 1)[1].split(" ms", 1)[0]
    assert outside.startswith(f"{each} ms of GPU work per rank") and "on each rank: prefill" in outside


@pytest.mark.slow
def test_bench_end_to_end_small(tmp_path):
    """The whole benchmark on a 20k-kernel file of each kind: every command measured, ratios in
    the table, nothing estimated."""
    scripts = run.nsys_scripts_dir(None)
    argv = ["--sizes", "2e4", "--real-sizes", "2e4", "--repeat", "1", "--data", str(tmp_path), "--no-readme", "--no-nsys22"]
    saved = {p: p.read_bytes() for p in (run.HERE / "results.json", run.HERE / "results.md", run.HERE / "scaling.png")
             if p.exists()}
    try:
        assert run.main(argv) == 0
        res = json.loads((run.HERE / "results.json").read_text())
    finally:
        for p, b in saved.items():
            p.write_bytes(b)
    assert {r["file_kind"] for r in res["rows"]} == {"synth", "real"}
    for row in res["rows"]:
        runs = row["runs"]
        for key in ("analyze", "analyze_json", "analyze_budget", "sqlite_scan") + tuple(
                f"bare_{b}_{t}" for b in run.bare_backends() for t in (1, 2)):
            assert runs[key]["rc"] == 0 and runs[key]["wall_s"] > 0, key
        if scripts is not None:
            assert runs["nsys25_proj"]["rc"] == 0 and Path(row["file"]).with_name("bench_out").joinpath(
                "nvtx_gpu_proj_sum.csv").stat().st_size > 0
        assert "estimated" not in json.dumps(row)
    shutil.rmtree(tmp_path, ignore_errors=True)


def test_python_is_byte_compiled_beforehand_even_where_bytecode_is_not_written(tmp_path, monkeypatch):
    """As `pip install` leaves a package: every module has its .pyc beside it, where an interpreter
    looks for it, also where PYTHONDONTWRITEBYTECODE is set (imports would then compile every run);
    a folder that fails to compile is left out, not fatal."""
    import os
    import subprocess

    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "sub" / "b.py").write_text("Y = 2\n")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "c.py").write_text("def (:\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert run.compile_python([pkg, tmp_path / "absent", tmp_path / "broken"]) == [str(pkg)]
    out = subprocess.run([sys.executable, "-c", "import pkg.a, pkg.sub.b; print(pkg.a.__cached__); "
                          "print(pkg.sub.b.__cached__)"], env=dict(os.environ), cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout.split()
    assert len(out) == 2 and all(Path(c).is_file() and Path(c).is_relative_to(pkg) for c in out)
    assert all(p.is_dir() for p in run.own_packages())


def test_sizes_per_file_kind(tmp_path):
    """--sizes for the synthetic files, --real-sizes for the real eager trace, --sglang-sizes for the
    SGLang trace (--real-sizes when not given), each ascending; an unknown --files kind stops the
    run before any file is made."""
    ap_defaults = ["--no-readme", "--no-nsys22"]
    a = argparse.Namespace(sizes="1e7,1e6", real_sizes="1e6", sglang_sizes="1e7,1e6")
    assert run.kind_sizes(a) == {"synth": [1_000_000, 10_000_000], "real": [1_000_000],
                                 "sglang": [1_000_000, 10_000_000]}
    a.sglang_sizes = None
    assert run.kind_sizes(a)["sglang"] == [1_000_000]
    with pytest.raises(SystemExit, match="unknown --files kind 'eager'"):
        run.main(["--files", "synth,eager", "--data", str(tmp_path / "data"), *ap_defaults])
    assert not (tmp_path / "data").exists()
