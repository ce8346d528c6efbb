"""One map task, one memory policy, every way of running it: inline, a process pool, the Parquet
cache (filled, then read) and Dask give the same tables, whole and under a memory budget (many
time-ordered chunks); ``"auto"`` decides the same on Dask as inline; a budgeted run with the
cache is chunked (it used to run whole) and its second run reads its chunks from the cache."""
from __future__ import annotations

import shutil

import pytest

from analyze import memory, opstore
from analyze import notes as N
from analyze.read import cache, report
from analyze.run import api, chunks
from fixtures.synth import TraceSpec, write_trace
from helpers import frames

TABLES = ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "alignment")
CACHE_CODES = (N.CACHE_READ_ELSEWHERE, N.CACHE_WRITTEN_ELSEWHERE, N.CACHE_NOT_WRITTEN)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("paths")
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=6, one_file=False, cuda_graph_mode="node", memcpy=True,
                                     memset=True, overlap=True), out)
    return [str(p) for p in paths]


def same_tables(a, b, ops: bool) -> None:
    for name in TABLES:
        frames.assert_frame_equal(a.table(name).reset_index(drop=True), b.table(name).reset_index(drop=True),
                                      obj=name)
    frames.assert_frame_equal(a.ranges, b.ranges, obj="ranges")
    if ops:
        frames.assert_frame_equal(a.gpu_ops, b.gpu_ops, obj="gpu_ops")
    else:
        assert a.gpu_ops.empty and b.gpu_ops.empty


def codes(a) -> list[tuple]:
    return [(n.code, n.count, n.input) for n in a.notes if n.code not in CACHE_CODES]


@pytest.mark.parametrize("budget", [None, 1], ids=["whole", "chunked"])
def test_inline_pool_cache_and_dask_are_identical(reports, tmp_path, monkeypatch, budget):
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 7)           # dozens of chunks per report under a budget
    copies = []
    for p in reports:                                         # the cache goes next to a copy
        copies.append(str(tmp_path / p.rsplit("/", 1)[-1]))
        shutil.copy(p, copies[-1])
    inline = api.load(reports, memory_budget=budget)
    if budget:
        chunk_counts = [n.count for n in inline.notes if n.code == N.CHUNKED]
        assert len(chunk_counts) == 2 and min(chunk_counts) > 10
    else:
        assert not N.has(inline.notes, N.CHUNKED) and len(inline.gpu_ops) > 0
    pool = api.load(reports, jobs=2, memory_budget=budget)
    filled = api.load(copies, cache=True, memory_budget=budget)
    assert all(cache.find_entry(c)[0] is not None for c in copies)
    read = api.load(copies, cache=True, memory_budget=budget)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=2,
                                  dashboard_address=None) as cluster:
        on_dask = api.load(reports, scheduler=cluster.scheduler_address, memory_budget=budget)
    every = list(opstore.COLUMNS)
    for other in (pool, on_dask):
        same_tables(inline, other, ops=not budget)
        assert codes(other) == codes(inline)
        # the op store, spilled under the budget: its file came back with the result from the pool's
        # processes and the Dask worker, and answers as the inline one does
        frames.assert_frame_equal(opstore.of(other).query(every), opstore.of(inline).query(every))
    if budget:
        assert opstore.of(inline).frame is None and len(opstore.of(inline)) == sum(
            len(api.load(p).gpu_ops) for p in reports)
    for other in (filled, read):           # same tables; the inputs are the copies
        for name in TABLES:
            x, y = inline.table(name).reset_index(drop=True), other.table(name).reset_index(drop=True)
            if "input" in x.columns:
                x, y = x.drop(columns="input"), y.drop(columns="input")
            frames.assert_frame_equal(x, y, obj=name)
        assert [c[:2] for c in codes(other)] == [c[:2] for c in codes(inline)]


def test_cached_chunks_are_read_from_the_cache(reports, tmp_path, monkeypatch):
    """Under a budget, a report with a cache entry is analysed from it: neither the export's op
    tables nor its calls and ranges are read again."""
    path = str(tmp_path / "r0.sqlite")
    shutil.copy(reports[0], path)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 11)
    first = api.load(path, cache=True, memory_budget=1)
    assert N.has(first.notes, N.CHUNKED) and cache.find_entry(path)[0] is not None

    def no_read(*a, **k):
        raise AssertionError("the export was read although its cache entry exists")

    monkeypatch.setattr(report, "read_report", no_read)
    monkeypatch.setattr(chunks.SqliteChunks, "read", no_read)
    again = api.load(path, cache=True, memory_budget=1)
    assert N.has(again.notes, N.CHUNKED)
    for name in TABLES:
        frames.assert_frame_equal(first.table(name), again.table(name), obj=name)
    whole_from_cache = api.load(path, cache=True, memory_budget=None)       # the same entry, whole
    assert len(whole_from_cache.gpu_ops) == int(first.totals["gpu_ops"].sum())
    for name in TABLES:
        frames.assert_frame_equal(first.table(name), whole_from_cache.table(name), obj=name)


def test_auto_budget_is_decided_the_same_on_dask(reports, monkeypatch):
    """``memory_budget="auto"`` on a Dask worker: the policy runs where the report is analysed (it
    used to be dropped, every report whole); here too little memory is available, so both chunk."""
    need = api.estimate_whole_bytes(reports[0])
    monkeypatch.setattr(memory, "available_bytes", lambda: need)
    inline = api.load(reports)
    assert N.has(inline.notes, N.AUTO_BUDGET) and N.has(inline.notes, N.CHUNKED)
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        on_dask = api.load(reports, scheduler=cluster.scheduler_address)
    assert codes(on_dask) == codes(inline)
    same_tables(inline, on_dask, ops=False)


def test_cached_ops_out_of_time_order_fall_back_to_one_piece(tmp_path, monkeypatch):
    """A report whose kernel rows are not in start order: chunks can be cut neither from the export
    nor from its cache entry; both runs are analysed in one piece, with the note, same tables."""
    from helpers.traces import kernels_newest_first

    path = kernels_newest_first(tmp_path / "shuffled.sqlite")
    whole = api.load(str(path), memory_budget=None)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 500)
    filled = api.load(str(path), cache=True, memory_budget=1)
    read = api.load(str(path), cache=True, memory_budget=1)
    for a in (filled, read):
        assert [n.code for n in a.notes if n.code in (N.NOT_TIME_ORDERED, N.CHUNKED)] == [N.NOT_TIME_ORDERED]
        same_tables(whole, a, ops=True)
