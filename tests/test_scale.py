"""Scale features give the same answers: fast reader vs stdlib, --jobs 1/2, chunked (memory
budget), Parquet cache, Dask; the input file is never modified. Small generated files, fast."""
from __future__ import annotations

import hashlib
import os
import stat

import numpy as np
import pandas as pd
import pytest

from analyze.cli import parse_size
from analyze.read import cache, fastread, report
from analyze.run import api
from fixtures.synth import TraceSpec, write_trace
from helpers import frames

TABLES = ("phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "ranks")


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("per_rank")
    paths, truth = write_trace(TraceSpec(ranks=2, cycles=6, one_file=False, cuda_graph_mode="node"), out)
    return [str(p) for p in paths], truth


@pytest.fixture(scope="module")
def scale_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("scale")
    paths, truth = write_trace(TraceSpec(ranks=4, total_kernels=60_000, cuda_graph_mode="node"), out)
    return str(paths[0]), truth


def same(a, b, ops: bool = True):
    for name in TABLES + ("alignment",):
        x, y = a.table(name).reset_index(drop=True), b.table(name).reset_index(drop=True)
        frames.assert_frame_equal(x, y, check_dtype=False, obj=name)
    if not ops:      # the chunked analysis keeps no per-op table
        return
    assert len(a.gpu_ops) == len(b.gpu_ops)
    for c in ("start_ns", "end_ns", "rank", "phase", "name", "range_id", "cycle_range"):
        assert (a.gpu_ops[c].to_numpy() == b.gpu_ops[c].to_numpy()).all(), c


def test_scale_file_matches_generator_truth(scale_file):
    path, truth = scale_file
    a = api.load(path)
    tot = a.totals.set_index("rank")
    for t in truth["ranks"]:
        row = tot.loc[t["rank"]]
        assert row["busy_ns"] == t["busy_ns"]
        assert row["kernel_ns"] == t["kernel_ns"]
        assert row["unattributed_ns"] == t["unattributed_ns"]
        ph = a.phases[a.phases["rank"] == t["rank"]].set_index("phase")
        for p, ns in t["exclusive_ns"].items():
            assert ph.loc[p, "exclusive_ns"] == ns, (t["rank"], p)
    assert int(a.totals["gpu_ops"].sum()) >= truth["total_kernels"]


def test_fast_reader_equals_stdlib_and_is_read_only(scale_file, monkeypatch):
    path, _ = scale_file
    before = sha(path)
    assert fastread.backend() == "pages"
    fastread.SERVED.clear()
    fast = report.read_report(path)
    assert set(fastread.SERVED) == {"pages"}
    monkeypatch.setenv("SPECPROF_READER", "stdlib")
    fastread.SERVED.clear()
    slow = report.read_report(path)
    assert set(fastread.SERVED) == {"stdlib"}
    for name in ("gpu_ops", "calls", "ranges", "marks"):
        frames.assert_frame_equal(getattr(fast, name), getattr(slow, name), obj=name)
    assert sha(path) == before
    assert not any(os.path.exists(path + s) for s in ("-journal", "-wal", "-shm"))


BUDGET_CODES = ("chunked", "not_time_ordered", "budget_below_floor")


def chunk_notes(a) -> list[str]:
    """The messages of the notes about --memory-budget, in order."""
    return [n.message for n in a.notes if n.code in BUDGET_CODES]


def chunk_count(a) -> int:
    return next(n.count for n in a.notes if n.code == "chunked")


def test_chunked_analysis_gives_identical_results(scale_file):
    path, _ = scale_file
    whole = api.load(path)
    # 60k ops in chunks of 50k rows (the smallest chunk)
    chunked = api.load(path, memory_budget=1)
    assert chunk_notes(chunked) == ["--memory-budget: analysed in 2 time-ordered chunks; the per-op table "
                                    "(gpu_ops) is not kept",
                                    "--memory-budget 1 bytes is below this report's floor, about 155 MB (its API "
                                    "calls and NVTX ranges are held whole): the GPU ops went in the smallest chunks"]
    same(whole, chunked, ops=False)
    # a budget above that floor: no such note, and the 60k ops fit one chunk
    roomy = api.load(path, memory_budget=10 ** 9)
    assert chunk_notes(roomy) == ["--memory-budget: analysed in 1 time-ordered chunk; the per-op table "
                                  "(gpu_ops) is not kept"]
    same(whole, roomy, ops=False)
    assert chunked.gpu_ops.empty and list(chunked.gpu_ops.columns) == list(whole.gpu_ops.columns)
    t = report.read_report(path, chunk_rows=7_000)
    frames.assert_frame_equal(t.gpu_ops, report.read_report(path).gpu_ops)


@pytest.mark.parametrize("rows", [1_237, 4_096])
def test_many_chunk_boundaries_give_identical_results(scale_file, monkeypatch, rows):
    """A budget that forces dozens of time-ordered chunks (sizes that do not divide the tables), so
    every boundary case (first/last chunk, a cycle or a rank straddling chunks) is crossed; the
    generator's exact figures hold for the chunked result too."""
    path, truth = scale_file
    whole = api.load(path)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", rows)
    chunked = api.load(path, memory_budget=1)
    n = chunk_count(chunked)
    assert n >= 60_000 // rows
    same(whole, chunked, ops=False)
    tot = chunked.totals.set_index("rank")
    for t in truth["ranks"]:
        assert tot.loc[t["rank"], "busy_ns"] == t["busy_ns"]
        ph = chunked.phases[chunked.phases["rank"] == t["rank"]].set_index("phase")
        for p, ns in t["exclusive_ns"].items():
            assert ph.loc[p, "exclusive_ns"] == ns, (t["rank"], p)
    for rows_read in (997, 4_096):
        t = report.read_report(path, chunk_rows=rows_read)
        frames.assert_frame_equal(t.gpu_ops, report.read_report(path).gpu_ops)


REAL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real")


@pytest.mark.parametrize("name", ["h200_4proc_eager", "h200_shim_graphs_node", "h200_1proc_graphs_graphlevel",
                                  "h200_shim_4rank_single", "h200_sweep2_steps3", "h200_diff_after"])
def test_chunked_analysis_of_real_exports_is_identical(name, monkeypatch):
    """Real nsys exports (their activity tables are in start order) cut into chunks of 200 rows:
    every table the same as the whole analysis."""
    path = os.path.join(REAL, name + ".sqlite")
    whole = api.load(path)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 200)
    chunked = api.load(path, memory_budget=1)
    assert chunk_notes(chunked) and "time-ordered chunk" in chunk_notes(chunked)[0]
    same(whole, chunked, ops=False)
    assert [n for n in whole.notes] == [n for n in chunked.notes if n.code not in BUDGET_CODES]


def test_ops_out_of_time_order_fall_back_to_one_piece(tmp_path, monkeypatch):
    """A report whose kernel rows are not in start order cannot be cut by rowid into time slices:
    it is analysed in one piece (read in chunks), said in a note, with the same results."""
    from helpers.traces import kernels_newest_first

    path = kernels_newest_first(tmp_path / "shuffled.sqlite")
    whole = api.load(str(path))
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 500)
    chunked = api.load(str(path), memory_budget=1)
    assert chunk_notes(chunked) == ["--memory-budget: the GPU op tables are not in time order, so the report "
                                    "was analysed in one piece (only its read was chunked)"]
    same(whole, chunked)


def test_parallel_readers_give_the_same_tables(scale_file, monkeypatch):
    """Two reader threads (op table cut in rowid ranges, calls and NVTX on their own connections)
    read exactly what one reader reads."""
    path, _ = scale_file
    monkeypatch.setattr(report, "SPLIT_MIN_ROWS", 1_000)
    one, two = report.read_report(path, threads=1), report.read_report(path, threads=2)
    assert len(report.plan_gpu_op_reads(report.open_report(path), split=2)) > \
        len(report.plan_gpu_op_reads(report.open_report(path), split=1))
    for name in ("gpu_ops", "calls", "ranges", "marks", "processes", "devices"):
        frames.assert_frame_equal(getattr(one, name), getattr(two, name), obj=name)


@pytest.mark.parametrize("reader", ["pages", "stdlib"])
def test_read_only_views_equal_copies(scale_file, monkeypatch, reader):
    """``copy=False`` (integer columns as read-only views of the Arrow buffers) gives the frame
    ``copy=True`` gives, NULLs included, from either reader."""
    monkeypatch.setenv("SPECPROF_READER", reader)
    path, _ = scale_file
    conn = report.open_report(path)
    try:
        fastread.SERVED.clear()
        sql = ("SELECT globalPid, correlationId, graphNodeId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL "
               "WHERE start IS NOT NULL AND end IS NOT NULL")
        cols = ["a", "b", "c", "d", "e"]
        table = fastread.read_frame(conn, sql, cols)
        view = fastread.read_frame(conn, sql, cols, copy=False)
        frames.assert_frame_equal(view, table)
        assert len(table) > 10_000 and table["a"].dtype == np.int64
        nvtx = "SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS"
        frames.assert_frame_equal(fastread.read_frame(conn, nvtx, cols, copy=False),
                                      fastread.read_frame(conn, nvtx, cols))
        # (pages.py does not read ``IS NOT NULL`` conditions: the kernels' statement is the stdlib's)
        assert dict(fastread.SERVED) == ({"pages": 2, "stdlib": 2} if reader == "pages" else {"stdlib": 4})
    finally:
        conn.close()


def test_jobs_and_dask_give_identical_results(per_rank):
    paths, truth = per_rank
    one = api.load(paths, jobs=1)
    two = api.load(paths, jobs=2)
    same(one, two)
    assert sorted(one.ranks["rank"]) == [0, 1]
    assert one.totals.set_index("rank").loc[1, "busy_ns"] == truth["ranks"][1]["busy_ns"]
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        on_dask = api.load(paths, scheduler=cluster.scheduler_address)
    same(one, on_dask)


def test_cache_is_identical_and_never_touches_the_report(per_rank, tmp_path, monkeypatch):
    paths, _ = per_rank
    path = paths[0]
    before = sha(path)
    plain = api.load(path)
    first = api.load(path, cache=True)
    entry = cache.candidates(path)[0]
    assert (entry / "gpu_ops.parquet").is_file()
    again = api.load(path, cache=True)          # from Parquet now
    same(plain, first)
    same(plain, again)
    assert sha(path) == before


def test_cache_falls_back_to_user_dir_when_report_dir_is_read_only(tmp_path, monkeypatch):
    if os.geteuid() == 0:
        # root ignores directory permissions: make the check see a read-only directory instead
        monkeypatch.setattr(cache, "_writable", lambda d: False)
    src = tmp_path / "ro"
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=2), src)
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(tmp_path / "user-cache"))
    os.chmod(src, stat.S_IRUSR | stat.S_IXUSR)
    try:
        a = api.load(str(paths[0]), cache=True)
        b = api.load(str(paths[0]), cache=True)
    finally:
        os.chmod(src, stat.S_IRWXU)
    assert any(n.code == "cache_written_elsewhere" and "not writable" in n.message for n in a.notes)
    assert any(n.code == "cache_read_elsewhere" and n.message.startswith("cache: read from") for n in b.notes)
    assert not (src / (paths[0].name + ".specprof-cache")).exists()
    assert any((tmp_path / "user-cache").rglob("gpu_ops.parquet"))
    frames.assert_frame_equal(a.phases, b.phases, check_dtype=False)


def test_vectorised_exact_path_matches_per_range_loop():
    from analyze.project import projection as proj
    rng = np.random.default_rng(1)
    values = rng.integers(0, 100, size=200)
    call_end = np.sort(rng.integers(0, 1000, size=200))[rng.permutation(200)]
    lo = rng.integers(0, 150, size=40)
    hi = lo + rng.integers(0, 50, size=40)
    rend = rng.integers(0, 1000, size=40)
    levels = np.zeros(40, dtype="int64")
    exact = np.zeros(40, dtype=bool)
    for how in ("sum", "min", "max"):
        vec = proj.reduce_blocks(lo, hi, levels, exact, values, how, (call_end, rend))
        loop = proj.reduce_blocks(lo, hi, levels, exact, values, how,
                                  lambda i: call_end[lo[i]:hi[i]] <= rend[i])
        assert (vec == loop).all(), how
    labels = np.arange(40)
    a = proj.paint_blocks(200, lo, hi, levels, exact, labels, (call_end, rend))
    b = proj.paint_blocks(200, lo, hi, levels, exact, labels, lambda i: call_end[lo[i]:hi[i]] <= rend[i])
    assert (a == b).all()


def test_parse_size():
    assert parse_size("1GB") == 10 ** 9
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("2000") == 2000


def test_long_analysis_reports_its_stages(monkeypatch, capsys):
    """A report big enough to take over a second shows its stages on stderr (with --quiet, nothing)."""
    from pathlib import Path

    import analyze.run.api as api

    trace = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"
    monkeypatch.setattr(api, "STAGES_MIN_BYTES", 0)
    api.analyze_report(str(trace), progress=True)
    err = capsys.readouterr().err.splitlines()
    stages = [line.split(": ", 2)[2].rsplit(" (", 1)[0] for line in err]
    assert stages == ["reading", "linking ops to API calls", "projecting NVTX ranges and attributing phases",
                      "decode cycles", "done"]
    api.analyze_report(str(trace), progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("rows", [7, 1_000])
def test_nvtx_read_in_chunks_equals_whole(rows):
    """NVTX events read in rowid chunks (domain names from every domain-create event first, missing
    ends filled with the report's largest timestamp afterwards): the same ranges and marks."""
    for name in ("h200_4proc_eager", "cpu2022_shim", "h200_shim_4rank_single"):
        conn = report.open_report(os.path.join(REAL, name + ".sqlite"))
        try:
            strings = report.read_strings(conn)
            whole, chunked = report.read_nvtx(conn, strings), report.read_nvtx(conn, strings, chunk_rows=rows)
        finally:
            conn.close()
        for a, b in zip(whole, chunked):
            frames.assert_frame_equal(a, b, obj=name)


def test_hash_lookup_links_as_the_join():
    """Ops are linked to calls by a hash lookup of (process, correlation id) keys (whole, and chunk by
    chunk through call_keys): the join's call for every op, -1 for ops whose id or process has no
    call, the first call when an id repeats."""
    from analyze.project import projection

    rng = np.random.default_rng(5)
    pids = np.array([100 << 24, 200 << 24], dtype="int64")
    c_pid = rng.choice(pids, 5_000)
    c_corr = rng.integers(1, 3_000, 5_000)
    calls = pd.DataFrame({"global_tid": c_pid + 1, "global_pid": c_pid, "correlation_id": c_corr,
                          "start_ns": np.arange(5_000) * 10, "end_ns": np.arange(5_000) * 10 + 5})
    ranges = pd.DataFrame({"global_tid": np.zeros(0, dtype="int64"), "start_ns": np.zeros(0, dtype="int64"),
                           "end_ns": np.zeros(0, dtype="int64")})
    index = projection.build_call_index(calls, ranges)
    o_pid = np.concatenate([rng.choice(pids, 20_000), np.full(10, 300 << 24)])
    o_corr = np.concatenate([rng.integers(-5, 3_100, 20_000), np.arange(10)])
    hashed = projection.link_op_arrays(o_pid, o_corr, calls, index)
    keys_hashed = projection.call_keys(calls, index)
    assert isinstance(keys_hashed, projection.HashedCallKeys)
    merged = projection.link_ops(pd.DataFrame({"global_pid": o_pid, "correlation_id": o_corr}), calls, index)
    assert (hashed == merged).all()
    assert (projection.link_with_keys(o_pid, o_corr, keys_hashed) == merged).all()
    assert (merged[-10:] == -1).all() and (merged >= 0).sum() > 10_000


PUBLIC = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "public-traces")
PUBLIC_NCCL = ["GindaChen_nsys-ai__h100_2gpu_1s", "GindaChen_nsys-ai__mfu_2gpu_after",
               "GindaChen_nsys-ai__mfu_2gpu_before"]


@pytest.mark.parametrize("name", PUBLIC_NCCL)
def test_chunked_analysis_of_public_nccl_exports_is_identical(name, monkeypatch):
    """Third-party 2-GPU exports (read from ../shared, never copied here; sliced captures with
    missing runtime rows), cut into 300-row chunks: every table, NVTX ranges included, the same as
    the whole analysis. Their NCCL SendRecv kernels are taken as the collectives (a phase option),
    so the pairing of collectives across chunk boundaries is exercised too."""
    from analyze.attribute import phases

    path = os.path.join(PUBLIC, name + ".sqlite")
    if not os.path.exists(path):
        pytest.skip("../shared/public-traces not present")
    config = phases.load_config(options=["allreduce=kernels:ncclDevKernel_*"])
    whole = api.load(path, config)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 300)
    chunked = api.load(path, config, memory_budget=1)
    n = chunk_count(chunked)
    assert n >= 10        # chunks cut the biggest op table (kernels) every 300 rows
    same(whole, chunked, ops=False)
    frames.assert_frame_equal(whole.ranges, chunked.ranges, obj="ranges")
    assert whole.ranks["rank"].nunique() == 2
    n_nccl = int(whole.gpu_ops["name"].str.startswith("ncclDevKernel_").sum())
    assert len(whole.collectives) == (n_nccl if "mfu" in name else 0)


def test_auto_budget_chunks_only_what_would_not_fit(scale_file, monkeypatch):
    """The default memory_budget="auto": whole while the estimate fits the available memory; in
    time-ordered chunks (same tables, a note saying why) when it does not."""
    import sqlite3

    from analyze import memory

    path, _ = scale_file
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        count = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                 for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                           "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
    ops = count["CUPTI_ACTIVITY_KIND_KERNEL"] + count["CUPTI_ACTIVITY_KIND_MEMCPY"] + count["CUPTI_ACTIVITY_KIND_MEMSET"]
    need = api.estimate_whole_bytes(path)
    assert need == (api.BASE_BYTES + api.WHOLE_BYTES_PER_OP * ops + api.FLOOR_BYTES_PER_CALL
                    * count["CUPTI_ACTIVITY_KIND_RUNTIME"] + api.FLOOR_BYTES_PER_RANGE * count["NVTX_EVENTS"])
    whole = api.load(path, memory_budget=None)

    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * need)
    roomy = api.load(path)                                   # default: auto
    assert len(roomy.gpu_ops) == len(whole.gpu_ops) and not chunk_notes(roomy)
    assert not any(n.code == "auto_budget" for n in roomy.notes)

    monkeypatch.setattr(memory, "available_bytes", lambda: need)     # needs more than 80% of it
    short = api.load(path)
    assert short.gpu_ops.empty
    assert chunk_notes(short)[0].startswith("--memory-budget: analysed in")
    assert short.notes[-1].code == "auto_budget"
    assert short.notes[-1].message == (f"the whole analysis would need about {api._size(need)} and {api._size(need)} of "
                               f"memory is available: analysed as under --memory-budget {api._size(need // 2)} "
                               "(time-ordered chunks; the per-op table gpu_ops is not kept; --memory-budget none "
                               "analyses it whole)")
    same(whole, short, ops=False)
    forced = api.load(path, memory_budget=None)              # none: whole whatever the memory
    assert len(forced.gpu_ops) == len(whole.gpu_ops)
    # reports analysed at once share the memory: budgets and notes per report
    assert api.auto_budget(path, at_once=2)[0] == need // 4
    assert "(2 reports at once)" in api.auto_budget(path, at_once=2)[1].message
    monkeypatch.setattr(memory, "available_bytes", lambda: None)     # unknown: whole
    assert api.auto_budget(path) == (None, None)


def test_memory_budget_option_words():
    from analyze.cli import build_parser, parse_budget

    assert parse_budget("auto") == "auto" and parse_budget("None") is None and parse_budget("1GB") == 10 ** 9
    assert build_parser().parse_args(["r.sqlite"]).memory_budget == "auto"
    assert build_parser().parse_args(["r.sqlite", "--memory-budget", "none"]).memory_budget is None


def test_chunked_analysis_draws_the_timeline_from_its_spilled_ops(monkeypatch):
    """Without the per-op table, a chunked analysis' op store (the spilled ops) gives the ops of any
    window as the whole table has them, so the timeline can be drawn at any cycle."""
    import matplotlib
    matplotlib.use("Agg")
    from analyze.render import plots
    from analyze.timeline import cycles

    path = os.path.join(REAL, "h200_shim_4rank_single.sqlite")
    whole = api.load(path)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 200)
    chunked = api.load(path, memory_budget=1)
    assert chunked.gpu_ops.empty and chunked.ops.frame is None
    chosen = cycles.default_window_cycles(whole.cycles)
    assert len(chosen) == 2
    sel = whole.cycles[whole.cycles["cycle"].isin(chosen)]
    w0, w1 = sel["start_ns"].min(), sel["end_ns"].max()
    ops = whole.gpu_ops
    want = ops[(ops["end_ns"] > w0) & (ops["start_ns"] < w1)].sort_values(["rank", "start_ns"], kind="stable")
    got = chunked.ops.query(["rank", "start_ns", "end_ns", "phase", "name", "kind", "cycle_range"], window=(w0, w1))
    assert len(got) == len(want) > 0 and got["rank"].nunique() == 4
    for c in ("rank", "start_ns", "end_ns", "phase", "name", "kind", "cycle_range"):
        assert list(got[c]) == list(want[c]), c
    fig = plots.cycle_timeline(chunked)
    assert fig.axes[0].get_title() == f"GPU timeline per rank, cycles {chosen[0]}-{chosen[1]}"
    one = plots.cycle_timeline(chunked, cycles=chosen[0])            # any cycle, not only the default's
    assert one.axes[0].get_title() == f"GPU timeline per rank, cycle {chosen[0]}"
    assert [len(c.get_paths()) for c in one.axes[0].collections] == \
        [len(c.get_paths()) for c in plots.cycle_timeline(whole, cycles=chosen[0]).axes[0].collections]


def test_a_chunked_run_that_fails_leaves_no_cache_behind(tmp_path, monkeypatch):
    """--memory-budget with --cache writes the entry while the chunks go by: an error in a chunk's
    read aborts it (no temporary entry, no empty cache folder beside the report); the report is
    untouched and a later run writes the entry whole."""
    import shutil

    from analyze.read import cache
    from analyze.run import chunks

    path = tmp_path / "r.sqlite"
    shutil.copy(os.path.join(REAL, "h200_4proc_eager.sqlite"), path)
    before = sha(str(path))
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 400)
    real_read = chunks.SqliteChunks.read

    def failing(self, k):
        if k == 2:
            raise OSError("disk gone")
        return real_read(self, k)

    monkeypatch.setattr(chunks.SqliteChunks, "read", failing)
    with pytest.raises(OSError, match="disk gone"):
        api.load(str(path), memory_budget=1, cache=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.sqlite"]
    assert sha(str(path)) == before
    monkeypatch.setattr(chunks.SqliteChunks, "read", real_read)
    done = api.load(str(path), memory_budget=1, cache=True)
    assert (cache.candidates(str(path))[0] / "meta.json").is_file()
    same(api.load(str(path)), done, ops=False)
