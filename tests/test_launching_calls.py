"""Only the calls that launched something (and the graph-capture calls) are prepared when a report
are prepared after the GPU ops are read (read/report.read_report, run/launches.needed_calls):
every table, note and per-op row equals the analysis that prepares every call, on real H200
exports (CUDA graphs with capture calls, eager, several processes) and on synthetic odd cases."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.project import projection
from analyze.read import report
from analyze.run import api, checks, launches
from analyze.timeline import cycles
from fixtures.synth import TraceSpec, write_trace
from helpers import frames

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TABLES = ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "alignment")
# graph replays with capture calls in their cycles, eager with 3.4 calls per op, 4 ranks in one file,
# real SGLang with CUDA graphs
REAL_TRACES = ["h200_shim_graphs_node", "h200_4proc_eager", "h200_shim_4rank_single", "sglang_graphs",
               "h200_moe_steps3"]


def _load(path: str, monkeypatch, *, after_ops: bool, threads: int):
    kept: list[tuple[int, int]] = []
    needed = launches.needed_calls

    def spy(calls, *a):
        found = needed(calls, *a)
        kept.append((len(calls), len(calls) if found.keep is None else int(found.keep.sum())))
        return found

    with monkeypatch.context() as m:
        m.setenv("SPECPROF_READ_THREADS", str(threads))
        # after_ops False: the reference that prepares every call (what the ids-spread-too-wide case does)
        m.setattr(launches, "needed_calls", spy if after_ops else every_call)
        return api.load(path), kept


def every_call(*args, **kwargs) -> launches.NeededCalls:
    """needed_calls keeping every call (and leaving the shared ids to checks.count_shared_ids)."""
    return launches.NeededCalls(None, None)


def _same(a, b) -> None:
    for name in TABLES:
        frames.assert_frame_equal(a.table(name), b.table(name), obj=name)
    frames.assert_frame_equal(a.ranges, b.ranges, obj="ranges")
    frames.assert_frame_equal(a.gpu_ops, b.gpu_ops, obj="gpu_ops")       # call_pos too: a row of the calls
    assert [(n.code, n.count, n.message, n.rank) for n in a.notes] == [(n.code, n.count, n.message, n.rank) for n in b.notes]


@pytest.mark.parametrize("name", REAL_TRACES)
@pytest.mark.parametrize("threads", [1, 2])
def test_real_reports_same_with_only_launching_calls(name, threads, monkeypatch):
    path = str(REAL / f"{name}.sqlite")
    every, none_kept = _load(path, monkeypatch, after_ops=False, threads=threads)
    launching, kept = _load(path, monkeypatch, after_ops=True, threads=threads)
    assert none_kept == []                               # every call prepared
    (n_calls, n_kept), = kept
    assert n_kept < 0.8 * n_calls                        # the filter did leave calls out
    _same(every, launching)


def test_capture_calls_are_kept_and_cycles_flagged(tmp_path, monkeypatch):
    """Capture and synchronize calls launch nothing: kept anyway, so the capturing cycle is still flagged
    graph_capture (the cycle table's warm-up reasons are the same) and the scheduler's waits are counted
    (host_wait_ns; this trace's only other calls are its cudaStreamSynchronize calls: every call is kept)."""
    spec = TraceSpec(ranks=2, cycles=6, capture_cycles=[2, 4], missing_runtime=2, negative_globaltid=True,
                     overlap=True, unclosed_range=True, start_end_ranges=True, host_gap_ns=20_000)
    (path,), _ = write_trace(spec, tmp_path)
    every, _ = _load(str(path), monkeypatch, after_ops=False, threads=1)
    launching, kept = _load(str(path), monkeypatch, after_ops=True, threads=1)
    assert kept and kept[0][1] == kept[0][0]
    _same(every, launching)
    assert launching.table("cycles")["host_wait_ns"].notna().all()
    reasons = launching.table("cycles")["warmup_reason"]
    assert (reasons == cycles.GRAPH_CAPTURE).sum() == 2 * spec.ranks


def _reference_mask(calls: pd.DataFrame, op_pid, op_corr, capture_ids) -> np.ndarray:
    ops = set(zip(np.asarray(op_pid).tolist(), np.asarray(op_corr).tolist()))
    return np.array([(p, c) in ops or n in set(capture_ids) for p, c, n in
                     zip(calls["global_pid"].tolist(), calls["correlation_id"].tolist(), calls["name_id"].tolist())])


@pytest.mark.parametrize("seed", range(6))
def test_needed_calls_against_a_set_lookup(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(projection, "KEY_BLOCK_ROWS", int(rng.integers(1, 64)))     # blocks of calls
    n = int(rng.integers(1, 400))
    pids = np.array([-(1 << 60), 5 << 24, 9 << 24])[rng.integers(0, 3, n)]
    corr = rng.integers(0, 60, n)
    names = rng.integers(0, 8, n)
    calls = pd.DataFrame({"global_pid": pids, "correlation_id": corr, "name_id": names})
    k = int(rng.integers(0, 300))
    op_pid = np.array([5 << 24, 9 << 24, 77 << 24])[rng.integers(0, 3, k)]     # one process without calls
    op_corr = rng.integers(-5, 70, k)                                           # ids outside the calls' range
    strings = pd.Series(["cudaLaunchKernel", "cudaStreamBeginCapture_v10000", "x", "cuGraphInstantiate",
                         "cudaEventRecord", "y", "z", "w"], index=np.arange(8))
    capture = cycles.capture_name_ids(strings)
    assert capture.tolist() == [1, 3]
    want = _reference_mask(calls, op_pid, op_corr, capture)
    got, shared = launches.needed_calls(calls, op_pid, op_corr, strings)
    assert np.array_equal(np.ones(n, dtype=bool) if got is None else got, want)
    assert got is None or not got.all()
    # the same pass counts the ids several processes' calls share, as checks.count_shared_ids does
    by_id: dict[int, set] = {}
    for p, c in zip(pids.tolist(), corr.tolist()):
        by_id.setdefault(c, set()).add(p)
    assert shared == sum(len(ps) > 1 for ps in by_id.values()) == checks.count_shared_ids(corr, pids)


def test_ids_too_spread_prepare_every_call(monkeypatch):
    calls = pd.DataFrame({"global_pid": [1, 1], "correlation_id": [0, 10 ** 6], "name_id": [0, 0]})
    monkeypatch.setattr(projection, "PRESENCE_MAX_BYTES", 1000)
    assert launches.needed_calls(calls, np.array([1]), np.array([0]), pd.Series(["a"])) == (None, None)


def test_call_pos_is_the_row_of_the_launching_call(monkeypatch):
    path = str(REAL / "h200_4proc_eager.sqlite")
    launching, kept = _load(path, monkeypatch, after_ops=True, threads=2)
    assert kept and kept[0][1] < kept[0][0]
    calls = report.read_report(path).calls
    ops = launching.gpu_ops
    linked = ops[ops["call_pos"] >= 0]
    assert len(linked) > 0.9 * len(ops)
    row = calls.iloc[linked["call_pos"].to_numpy()]
    assert (row["correlation_id"].to_numpy() == linked["correlation_id"].to_numpy()).all()
    assert (row["global_pid"].to_numpy() == linked["global_pid"].to_numpy()).all()
    assert (row["start_ns"].to_numpy() <= linked["start_ns"].to_numpy()).all()       # launched before it ran


def test_a_cache_hit_gives_the_cache_miss_tables(tmp_path):
    """A cache hit prepares with the ops known (so only the launching calls), a miss by the
    calls-per-op rule: the same tables and per-op rows either way."""
    import shutil

    path = tmp_path / "r.sqlite"
    shutil.copy(REAL / "sglang_graphs.sqlite", path)
    miss, hit = api.load(str(path), cache=True), api.load(str(path), cache=True)
    for name in TABLES:
        x, y = miss.table(name), hit.table(name)
        frames.assert_frame_equal(x.drop(columns="input", errors="ignore"), y.drop(columns="input", errors="ignore"),
                                      obj=name)
    frames.assert_frame_equal(miss.gpu_ops.drop(columns="input"), hit.gpu_ops.drop(columns="input"), obj="gpu_ops")


def _crossing_ranges_trace(out: Path) -> tuple[Path, int]:
    """A synthetic report plus two crossing phase ranges of one nesting level whose NVTX rows are
    not in start order (verify [50, 150) written after draft [120, 200), both inside prefill), a
    call that launches nothing inside verify only and one that launches a probe kernel inside
    both. Which range owns the probe must not depend on whether the first call is prepared."""
    import sqlite3

    (path,), _ = write_trace(TraceSpec(ranks=1, cycles=2), out)
    db = sqlite3.connect(path)
    t = db.execute("SELECT max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] + 1_000_000
    tid, = db.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 1").fetchone()
    corr = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 100
    probe = db.execute("SELECT max(id) FROM StringIds").fetchone()[0] + 1
    db.execute("INSERT INTO StringIds VALUES (?, 'probe_kernel')", (probe,))
    for name, a, b in (("prefill", 0, 100), ("draft", 120, 200), ("verify", 50, 150)):
        db.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, endGlobalTid, domainId) "
                   "VALUES (?, ?, 60, ?, ?, NULL, 0)", (t + a, t + b, name, tid))

    def copy_row(table: str, **values):
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        row = dict(zip(cols, db.execute(f"SELECT * FROM {table} LIMIT 1").fetchone()), **values)
        db.execute(f"INSERT INTO {table} ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
                   [row[c] for c in cols])

    copy_row("CUPTI_ACTIVITY_KIND_RUNTIME", globalTid=tid, start=t + 60, end=t + 61, correlationId=corr)
    copy_row("CUPTI_ACTIVITY_KIND_RUNTIME", globalTid=tid, start=t + 130, end=t + 135, correlationId=corr + 1)
    copy_row("CUPTI_ACTIVITY_KIND_KERNEL", start=t + 140, end=t + 145, correlationId=corr + 1,
             demangledName=probe, shortName=probe)
    db.commit()
    db.close()
    return path, t + 140


def test_crossing_ranges_out_of_row_order_keep_their_owner(tmp_path, monkeypatch):
    path, probe_start = _crossing_ranges_trace(tmp_path)
    every, _ = _load(str(path), monkeypatch, after_ops=False, threads=1)
    launching, kept = _load(str(path), monkeypatch, after_ops=True, threads=1)
    assert kept and kept[0][1] < kept[0][0]
    for a in (every, launching):
        probe = a.gpu_ops[a.gpu_ops["start_ns"] == probe_start]
        assert probe["phase"].tolist() == ["draft"]          # the later-starting of the two crossing ranges
    _same(every, launching)


@pytest.mark.parametrize("budget", [None, 10 ** 9])
def test_a_report_without_api_calls_is_analysed(tmp_path, budget):
    """GPU ops but no CUPTI_ACTIVITY_KIND_RUNTIME table: every op unlinked, with the note (the
    schedule's row count must not need the table)."""
    import shutil
    import sqlite3

    from analyze import notes as N

    path = tmp_path / "r.sqlite"
    shutil.copy(REAL / "h200_4proc_eager.sqlite", path)
    con = sqlite3.connect(path)
    con.execute(f"DROP TABLE {report.RUNTIME_TABLE}")
    con.commit()
    con.execute("VACUUM")
    con.close()
    a = api.load(str(path), memory_budget=budget)
    assert int(a.totals["gpu_ops"].sum()) == 3160
    assert N.has(a.notes, N.UNLINKED_OPS)


def _load_chunked(path: str, monkeypatch, *, after_ops: bool, threads: int, key_rows: int = 1 << 20):
    kept: list[tuple[int, int]] = []
    blocks: list[int] = []
    needed = launches.needed_calls_in_blocks

    def spy(calls, op_keys, strings):
        def counted():
            for pid, corr in op_keys:
                blocks.append(len(pid))
                yield pid, corr
        found = needed(calls, counted(), strings)
        kept.append((len(calls), len(calls) if found.keep is None else int(found.keep.sum())))
        return found

    with monkeypatch.context() as m:
        m.setattr(report, "OP_KEY_CHUNK_ROWS", key_rows)
        m.setattr(api, "MIN_CHUNK_ROWS", 400)                 # several op chunks
        m.setenv("SPECPROF_READ_THREADS", str(threads))
        m.setattr(launches, "needed_calls_in_blocks", spy if after_ops else every_call)
        return api.load(path, memory_budget=1), kept, blocks


@pytest.mark.parametrize("name", ["h200_4proc_eager", "h200_shim_graphs_node", "h200_moe_steps3"])
@pytest.mark.parametrize("threads", [1, 2])
def test_chunked_analysis_prepares_only_launching_calls_from_the_ops_keys(name, threads, monkeypatch):
    """--memory-budget reads the ops' (process, correlation id) in rowid blocks before the chunks
    (read/report.read_op_keys) and prepares only the calls that launched one: every table and note
    equals the chunked analysis that prepares every call, and the whole one's tables."""
    path = str(REAL / f"{name}.sqlite")
    every, none_kept, _ = _load_chunked(path, monkeypatch, after_ops=False, threads=threads)
    launching, kept, blocks = _load_chunked(path, monkeypatch, after_ops=True, threads=threads, key_rows=997)
    assert none_kept == []
    (n_calls, n_kept), = kept
    assert n_kept < 0.8 * n_calls
    n_ops = len(api.load(path, memory_budget=None).gpu_ops)
    assert len(blocks) > 1 and max(blocks) <= 997 and sum(blocks) >= n_ops   # every op's key, a block at a time
    _same(every, launching)
    assert launching.gpu_ops.empty
    assert next(n.count for n in launching.notes if n.code == "chunked") > 1
    whole = api.load(path, memory_budget=None)
    for t in TABLES:
        frames.assert_frame_equal(launching.table(t), whole.table(t), obj=t)


def test_chunked_analysis_from_the_cache_prepares_only_launching_calls(tmp_path, monkeypatch):
    """The same from a Parquet cache entry: the cached ops' keys, a row group at a time
    (cache.CachedOps.keys), and the same tables as the run that wrote the entry."""
    import shutil

    path = str(tmp_path / "eager.sqlite")
    shutil.copy(REAL / "h200_4proc_eager.sqlite", path)
    kept: list[tuple[int, int]] = []
    needed = launches.needed_calls_in_blocks

    def spy(calls, op_keys, strings):
        found = needed(calls, op_keys, strings)
        kept.append((len(calls), len(calls) if found.keep is None else int(found.keep.sum())))
        return found

    from analyze.read import cache

    monkeypatch.setattr(launches, "needed_calls_in_blocks", spy)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 400)
    from_cache = []
    cached_keys = cache.CachedOps.keys
    monkeypatch.setattr(cache.CachedOps, "keys", lambda self: from_cache.append(1) or cached_keys(self))
    first = api.load(path, memory_budget=1, cache=True)            # writes the entry
    assert from_cache == []
    again = api.load(path, memory_budget=1, cache=True)            # from it
    assert from_cache == [1]
    assert len(kept) == 2 and all(k < 0.8 * n for n, k in kept) and kept[0] == kept[1]
    for t in TABLES:
        frames.assert_frame_equal(again.table(t), first.table(t), obj=t)


def test_a_graph_launch_without_ops_is_prepared_too():
    """cycles.launch_excess_by_cycle takes the fastest graph launch of the report: a launch whose ops were lost
    or left out (CUPTI drops, invalid rows, an empty graph) is prepared in launching mode as when every call is,
    so the column is the same either way."""
    calls = pd.DataFrame({"global_pid": [1, 1, 1, 1], "correlation_id": [10, 11, 12, 13], "name_id": [0, 1, 1, 2]})
    strings = pd.Series(["cudaLaunchKernel_v7000", "cudaGraphLaunch_v10000", "cudaMemcpyAsync_v3020"], index=[0, 1, 2])
    keep, _ = launches.needed_calls(calls, np.array([1]), np.array([10]), strings)     # only call 10 launched an op
    assert keep.tolist() == [True, True, True, False]
