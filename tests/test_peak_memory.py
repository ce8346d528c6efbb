"""What keeps a large report's peak down (docs/performance.md, issue 19) changes no value: the
per-op table's narrow id columns, the map step's op columns kept in read order with their sorting
permutation (spill.OpStore), and the block-by-block passes (call linking, the launching-call
presence, pid/device pairs, kernel-time sums). Each is checked against the plain computation, on
real H200 exports with blocks small enough that every pass crosses many block edges."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.attribute import attribution, intervals
from analyze.project import projection
from analyze.run import mapstep
from analyze.run.spill import OP_COLUMNS, OpStore
from helpers import frames

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TABLES = ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "alignment")
# CUDA graphs with capture calls; eager, 4 processes in one file; real SGLang with graphs
REAL_TRACES = ["h200_shim_graphs_node", "h200_4proc_eager", "sglang_graphs"]


def _same_results(a, b, *, op_dtypes: bool = True) -> None:
    for name in TABLES:
        frames.assert_frame_equal(a.table(name), b.table(name), obj=name)
    frames.assert_frame_equal(a.ranges, b.ranges, obj="ranges")
    frames.assert_frame_equal(a.gpu_ops, b.gpu_ops, obj="gpu_ops", check_dtype=op_dtypes)
    assert [(n.code, n.count, n.message) for n in a.notes] == [(n.code, n.count, n.message) for n in b.notes]


def test_narrow_ids():
    small = np.array([-1, 0, 7, 2 ** 31 - 1], dtype="int64")
    out = mapstep.narrow_ids(small)
    assert out.dtype == np.int32 and (out == small).all()
    wide = np.array([-1, 2 ** 31], dtype="int64")
    assert mapstep.narrow_ids(wide) is wide                        # a value that does not fit: kept as is
    low = np.array([-(2 ** 31) - 1], dtype="int64")
    assert mapstep.narrow_ids(low).dtype == np.int64
    assert mapstep.narrow_ids(np.zeros(0, dtype="int64")).dtype == np.int32


@pytest.mark.parametrize("name", REAL_TRACES)
def test_per_op_id_columns_are_int32_with_the_same_values(name, monkeypatch):
    path = str(REAL / f"{name}.sqlite")
    narrow = analyze.load(path)
    for c in mapstep.OP_ID_COLUMNS:
        assert narrow.gpu_ops[c].dtype == np.int32, c
    monkeypatch.setattr(mapstep, "narrow_ids", lambda values: np.asarray(values).astype("int64"))
    wide = analyze.load(path)
    assert all(wide.gpu_ops[c].dtype == np.int64 for c in mapstep.OP_ID_COLUMNS)
    _same_results(narrow, wide, op_dtypes=False)
    assert (narrow.gpu_ops["call_pos"] >= 0).mean() > 0.9           # real links, not all -1
    # the chunked analysis (no per-op table) declares the same dtypes for its empty one
    empty = mapstep.empty_op_table()
    assert all(empty[c].dtype == np.int32 for c in mapstep.OP_ID_COLUMNS)


@pytest.mark.parametrize("name", REAL_TRACES)
def test_small_blocks_change_nothing(name, monkeypatch):
    path = str(REAL / f"{name}.sqlite")
    whole = analyze.load(path)
    monkeypatch.setattr(projection, "KEY_BLOCK_ROWS", 997)
    monkeypatch.setattr(mapstep, "PAIR_BLOCK_ROWS", 613)
    blocked = analyze.load(path)
    _same_results(whole, blocked)


def test_many_processes_take_the_whole_array_paths(monkeypatch):
    """With more processes than intervals.FEW_GROUPS the per-group loops give way to whole-array
    passes (kernel-time sums, unions): the same tables."""
    path = str(REAL / "h200_4proc_eager.sqlite")
    few = analyze.load(path)
    monkeypatch.setattr(intervals, "FEW_GROUPS", 1)
    many = analyze.load(path)
    _same_results(few, many)


def _chunk_columns(rng, n):
    g = rng.integers(0, 5, n).astype("int32")
    s = rng.integers(0, 10 ** 9, n)
    cols = {"g": g, "s": s, "e": s + rng.integers(0, 10 ** 4, n), "ph": rng.integers(-1, 4, n).astype("int8"),
            "nc": rng.integers(0, 50, n).astype("int32")}
    order = np.lexsort((s, g))
    return cols, order, intervals.group_segments(g[order])


def test_op_store_in_memory_and_on_disk_agree():
    rng = np.random.default_rng(3)
    stores = [OpStore(on_disk=False), OpStore(on_disk=True)]
    chunks = [_chunk_columns(rng, n) for n in (1000, 0, 357)]
    try:
        for cols, order, runs in chunks:
            for store in stores:
                store.put(cols, mapstep.narrow_ids(order), runs)
        mem, disk = stores
        for k, (cols, order, runs) in enumerate(chunks):
            assert mem.sizes[k] == disk.sizes[k] == len(order)
            assert mem.runs(k) == disk.runs(k) == runs
            for name in OP_COLUMNS:
                want = cols[name][order]
                assert (mem.get(k, name) == want).all() and (disk.get(k, name) == want).all()
                for _, a, b in runs:
                    assert (mem.get_run(k, name, a, b) == want[a:b]).all()
                    assert (disk.get_run(k, name, a, b) == want[a:b]).all()
            # unordered: one order shared by every column of the chunk
            for store in stores:
                rows = sorted(zip(*(store.get_unordered(k, c).tolist() for c in OP_COLUMNS)))
                assert rows == sorted(zip(*(cols[c].tolist() for c in OP_COLUMNS)))
            assert mem.get_unordered(k, "s") is cols["s"]             # in memory: the chunk's own array
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize("n_groups", [3, 100])
def test_segment_duration_sums(n_groups):
    rng = np.random.default_rng(n_groups)
    g = np.sort(rng.integers(0, n_groups, 5000))
    s = rng.integers(-10 ** 12, 10 ** 12, 5000)
    e = s + rng.integers(0, 10 ** 9, 5000)
    segs = intervals.group_segments(g)
    mask = rng.random(5000) < 0.4
    for m in (None, mask):
        want = np.zeros(n_groups, dtype="int64")
        np.add.at(want, g if m is None else g[m], (e - s) if m is None else (e - s)[m])
        got = intervals.segment_duration_sums(segs, s, e, n_groups, m)
        assert got.dtype == np.int64 and (got == want).all()
        assert (got == intervals.segment_sums(segs, e - s, n_groups, m)).all()


@pytest.mark.parametrize("factorized", [False, True])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("block", [1, 7, 10 ** 6])
def test_pid_device_pairs_in_blocks_keep_first_occurrence_order(block, wide, factorized, monkeypatch):
    """Both ways of finding the pairs (a scatter over small device ordinals, hashing when they are
    spread wide), block by block and whole, with the processes coded here or by the caller (the
    map step's one ``pd.factorize``, whose uniques hold every block's)."""
    rng = np.random.default_rng(block)
    pid = rng.choice(np.array([5 << 24, 9 << 24, 2 << 24], dtype="int64"), 3000)
    dev = rng.integers(0, 4, 3000) * (10 ** 9 if wide else 1)
    monkeypatch.setattr(mapstep, "PAIR_BLOCK_ROWS", block)
    got = mapstep.pid_device_pairs(pid, dev, pd.factorize(pid) if factorized else None)
    want = pd.DataFrame({"global_pid": pid, "device_id": dev}).drop_duplicates(ignore_index=True)
    frames.assert_frame_equal(got.reset_index(drop=True), want, check_dtype=False)


@pytest.mark.parametrize("block", [1, 97, 1 << 17])
def test_linking_in_key_blocks(block, monkeypatch):
    """link_op_arrays / link_with_keys (hashed keys) equal the pandas join whatever the
    block size; ops of a process without calls and ids outside the calls' range link to nothing."""
    monkeypatch.setattr(projection, "KEY_BLOCK_ROWS", block)
    rng = np.random.default_rng(11)
    pids = np.array([100 << 24, 200 << 24], dtype="int64")
    c_pid = rng.choice(pids, 3000)
    calls = pd.DataFrame({"global_tid": c_pid + 1, "global_pid": c_pid, "correlation_id": rng.integers(1, 2000, 3000),
                          "start_ns": np.arange(3000) * 10, "end_ns": np.arange(3000) * 10 + 5})
    ranges = pd.DataFrame({c: np.zeros(0, dtype="int64") for c in ("global_tid", "start_ns", "end_ns")})
    index = projection.build_call_index(calls, ranges)
    o_pid = np.concatenate([rng.choice(pids, 8000), np.full(10, 300 << 24)])
    o_corr = np.concatenate([rng.integers(-5, 2100, 8000), np.arange(10)])
    want = projection.link_ops(pd.DataFrame({"global_pid": o_pid, "correlation_id": o_corr}), calls, index)
    keys = projection.call_keys(calls, index)
    assert isinstance(keys, projection.HashedCallKeys)
    for got in (projection.link_op_arrays(o_pid, o_corr, calls, index), projection.link_with_keys(o_pid, o_corr, keys)):
        assert got.dtype == np.int32 and (got == want).all()
    assert (want[-10:] == -1).all() and (want >= 0).sum() > 3000


def _chunked(path, monkeypatch):
    """``path`` analysed in many small time-ordered chunks (on-disk op store, carry-overs)."""
    from analyze.run import api
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 100)
    a = analyze.load(path, memory_budget=1)
    (chunks,) = [n.count for n in a.notes if n.code == "chunked"]
    assert chunks >= 3
    return a


TABLES = ("collectives", "cycles", "phases", "totals", "kernels", "ranks", "ranges")


@pytest.mark.parametrize("name", ["h200_4proc_eager", "h200_shim_4rank_single"])
def test_per_process_threads_change_nothing(name, monkeypatch):
    """The op pass goes a process per thread and the cycles' intervals a rank per thread
    (mapstep.SPLIT_THREADS): the same tables with one thread and with more threads than ranks,
    whole and in many chunks (a rank's chunks one after the other)."""
    path = str(REAL / f"{name}.sqlite")
    monkeypatch.setattr(mapstep, "SPLIT_THREADS", 1)
    one = analyze.load(path)
    one_chunked = _chunked(path, monkeypatch)
    monkeypatch.setattr(mapstep, "SPLIT_THREADS", 8)
    many = analyze.load(path)
    many_chunked = _chunked(path, monkeypatch)
    assert len(one.cycles) > 10 and one.ranks["rank"].nunique() >= 4
    for t in TABLES:
        frames.assert_frame_equal(one.table(t), many.table(t), obj=t)
        frames.assert_frame_equal(one_chunked.table(t), many_chunked.table(t), obj=t)
    frames.assert_frame_equal(one.gpu_ops, many.gpu_ops)
    frames.assert_frame_equal(one.cycles, one_chunked.cycles)


def test_per_process_threads_on_collectives_and_a_straggler(tmp_path, monkeypatch):
    """Passes on several threads find each collective with the phase of the op before it on its
    own process: one thread and eight give the same tables on a 4-rank trace whose ranks have
    collectives and a straggler."""
    from fixtures.synth import TraceSpec, write_trace
    paths, _ = write_trace(TraceSpec(ranks=4, cycles=6, straggler={2: 50_000}), tmp_path)
    path = str(paths[0])
    monkeypatch.setattr(mapstep, "SPLIT_THREADS", 1)
    one = analyze.load(path)
    monkeypatch.setattr(mapstep, "SPLIT_THREADS", 8)
    many = analyze.load(path)
    assert len(one.collectives) > 50 and one.collectives["rank"].nunique() == 4
    for t in TABLES:
        frames.assert_frame_equal(one.table(t), many.table(t), obj=t)


def test_collectives_per_process_pass_whole_chunked_and_many_processes(tmp_path, monkeypatch):
    """The collectives (each with the phase of the op before it on its process, carried over from
    chunk to chunk) are found a process at a time: the same table as the whole-array pass that many
    processes take, and as many small chunks, on a 4-rank trace with a straggler."""
    from fixtures.synth import TraceSpec, write_trace
    paths, _ = write_trace(TraceSpec(ranks=4, cycles=6, straggler={2: 50_000}), tmp_path)
    path = str(paths[0])
    per_process = analyze.load(path)
    assert len(per_process.collectives) > 50 and per_process.collectives["rank"].nunique() == 4
    assert (per_process.collectives["phase"] != "other").any()
    chunked = _chunked(path, monkeypatch)
    monkeypatch.setattr(intervals, "FEW_GROUPS", 1)
    whole_array = analyze.load(path)
    for other in (chunked, whole_array):
        for name in ("collectives", "cycles", "phases", "totals", "kernels"):
            frames.assert_frame_equal(per_process.table(name), other.table(name), obj=name)
    frames.assert_frame_equal(per_process.gpu_ops, whole_array.gpu_ops)


def test_ranks_renumbered_across_reports_keep_the_id_dtype(tmp_path):
    """Reports whose ranks come from process order are numbered across reports
    (run/multirank.renumber_ranks): the per-op rank stays int32, the other tables' int64."""
    from fixtures.synth import TraceSpec, write_trace
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=2, one_file=False, rank_marks=False,
                                     cuda_visible_devices=True), tmp_path)
    a = analyze.load([str(p) for p in paths])
    assert a.ranks["source"].tolist() == ["order", "order"]
    assert sorted(a.gpu_ops["rank"].unique().tolist()) == [0, 1]
    assert a.gpu_ops["rank"].dtype == np.int32
    assert a.phases["rank"].dtype == np.int64 and a.cycles["rank"].dtype == np.int64


@pytest.mark.parametrize("n_codes", [1, 8, 200, 40_000])
def test_sort_order_is_lexsort(n_codes):
    """attribution.sort_order is np.lexsort((start, code)): runs already in start order, a few runs
    out of order, many, ties (kept in the order read), many codes."""
    rng = np.random.default_rng(n_codes)
    n = 200_000
    code = rng.integers(0, n_codes, n).astype("int32")
    code[:2] = [0, n_codes - 1]
    for start in (np.cumsum(rng.integers(0, 3, n)),                 # in start order, with ties
                  rng.integers(0, 50, n),                            # out of order, many ties
                  np.where(code % 2 == 0, np.arange(n), n - np.arange(n))):   # some runs out of order
        order = attribution.sort_order(code, start)
        np.testing.assert_array_equal(order, np.lexsort((start, code)))


def test_sort_order_with_codes_missing_and_the_last_pair_out_of_order():
    """No op of code 0 (so the first run boundary is at row 0) and only the very last two ops of a
    run out of start order: that run is still sorted."""
    code = np.array([1, 1, 1, 2, 2, 2], dtype="int32")
    start = np.array([0, 1, 2, 5, 9, 7])
    np.testing.assert_array_equal(attribution.sort_order(code, start), np.lexsort((start, code)))
    code, start = np.array([3, 1, 3, 3]), np.array([4, 0, 6, 5])
    np.testing.assert_array_equal(attribution.sort_order(code, start), np.lexsort((start, code)))


def test_the_map_step_lets_go_of_the_reports_calls_after_its_checks(monkeypatch):
    """ReportMap keeps no reference to the report's API calls once the checks that read them are
    done (input_notes): from there on only the prepared calls are used, so what the map step
    allocates reuses the calls' memory (real tiled 1M: peak 0.67 -> 0.62 GB). With the launching
    calls prepared (after the op reads), the report's frame is garbage by the time the map step
    makes its call keys, and the result still carries the note the calls give, counted by the
    preparation (launches.needed_calls), not a second time by the checks."""
    import gc
    import weakref

    from analyze.attribute.phases import PhaseConfig
    from analyze.read import report
    from analyze.run import checks, launches
    from analyze.run.spill import OpStore

    config = PhaseConfig()
    path = str(REAL / "h200_4proc_eager.sqlite")

    def prepare(calls, ranges, ops=None, strings=None):
        return launches.prepare_launches(calls, ranges, config, ops=ops, strings=strings)

    tables = report.read_report(path)
    tables = tables._replace(prepared=prepare(tables.calls, tables.ranges, ops=tables.gpu_ops, strings=tables.strings))
    assert tables.prepared.shared_ids == 2714
    calls = weakref.ref(tables.calls)
    chunk = mapstep.chunk_of_frame(tables.gpu_ops)
    box = [tables._replace(gpu_ops=None)]
    del tables
    alive_at_keys = []
    call_keys = projection.call_keys

    def spy(*args):                     # made after the checks (and after a few small arrays)
        gc.collect()
        alive_at_keys.append(calls() is not None)
        return call_keys(*args)

    monkeypatch.setattr(projection, "call_keys", spy)

    def recount(*args):
        raise AssertionError("the shared ids counted again")

    monkeypatch.setattr(checks, "count_shared_ids", recount)
    step = mapstep.ReportMap(path, config, box, keep_ops=True, store=OpStore(on_disk=False), detail=True)
    assert alive_at_keys == [False]
    step.update(chunk)
    result = step.finish()
    # the note the calls give (the one this report has: 2714 ids shared across its 4 processes)
    assert [(n.code, n.count) for n in result.notes] == [("shared_correlation_ids", 2714)]


def test_launch_gaps_work_a_rank_at_a_time():
    """advise's launch gaps (cycle_gaps_in_start_order) after its one sort go a rank at a time: on 8
    ranks of 100k ops each the NumPy memory held at the peak (tracemalloc), the caller keeping
    every rank's rows and gaps, stays below 6 int64 arrays of the ops (12.6 when every temporary
    was full-size and the results were joined), the rows and gaps the same as cycle_of_arrays then
    op_gaps give (the rows in (rank, start) order)."""
    import tracemalloc

    from analyze.timeline import launch_gaps as LG
    from analyze.tools.advise import model as M

    n, n_ranks, n_cycles = 800_000, 8, 400
    per_rank = n // n_ranks
    rank = np.repeat(np.arange(n_ranks, dtype="int32"), per_rank)
    start = np.tile(np.arange(per_rank, dtype="int64") * 10, n_ranks)
    end = start + np.tile(np.array([5, 12, 3, 30], dtype="int64"), n // 4)
    step = per_rank // n_cycles * 10
    cycles = pd.DataFrame([(r, c, c * step, (c + 1) * step - 20) for r in range(n_ranks) for c in range(n_cycles)],
                          columns=["rank", "cycle", "start_ns", "end_ns"])
    tracemalloc.start()
    try:
        held = []                                     # what a caller keeps of each rank: its gaps
        for rows_of_rank, gaps_of_rank in LG.cycle_gaps_in_start_order(rank, start, end, cycles):
            held.append((rows_of_rank, gaps_of_rank))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 * 8 * n
    rows, gaps = (np.concatenate(part) for part in zip(*held))
    cycle = LG.cycle_of_arrays(rank.astype("int64"), start, cycles)
    keep = np.flatnonzero(cycle >= 0)
    assert len(keep) < n                               # ops between the windows are left out
    np.testing.assert_array_equal(rows, keep)          # already in (rank, start) order here
    np.testing.assert_array_equal(gaps, LG.op_gaps(rank[keep].astype("int64"), cycle[keep], start[keep], end[keep]))


def _calls_and_ops(rng, n_pids: int, calls_per_pid: int, id_stride: int, id_base_step: int, ops_per_call: float = 3):
    """Calls of ``n_pids`` processes whose correlation ids hold one id in ``id_stride`` (a real SGLang
    server's runtime calls: about one in 7.5), each process' ids from its own base, a few repeated;
    ops that launch from most ids, some from none, some of a process without calls."""
    pids = (np.arange(n_pids, dtype="int64") + 7) << 24
    c_pid = np.repeat(pids, calls_per_pid)
    base = np.repeat(np.arange(n_pids, dtype="int64") * id_base_step + 1, calls_per_pid)
    c_corr = base + np.tile(np.arange(calls_per_pid, dtype="int64") * id_stride, n_pids)
    c_corr[::97] = c_corr[1::97][:len(c_corr[::97])]          # repeated ids: the first call wins
    shuffle = rng.permutation(len(c_pid))                       # rows not grouped by process
    c_pid, c_corr = c_pid[shuffle], c_corr[shuffle]
    n = len(c_pid)
    calls = pd.DataFrame({"global_tid": c_pid + 1, "global_pid": c_pid, "correlation_id": c_corr,
                          "start_ns": np.arange(n) * 10, "end_ns": np.arange(n) * 10 + 5})
    ranges = pd.DataFrame({c: np.zeros(0, dtype="int64") for c in ("global_tid", "start_ns", "end_ns")})
    o_pick = rng.integers(0, n, int(ops_per_call * n))
    o_pid = np.concatenate([c_pid[o_pick], np.full(50, 3 << 24)])
    o_corr = np.concatenate([c_corr[o_pick] + rng.choice([0, 0, 0, 1, -1, 10**9], len(o_pick)), np.arange(50)])
    return calls, projection.build_call_index(calls, ranges), o_pid, o_corr


def test_call_keys_link_like_the_join_whole_and_in_chunks():
    """Processes with ids from their own bases (the global id range 2000x the calls), ops linked
    whole, in time-like chunks (sorted by id, each reaching a part of every process' range) and in
    random chunks: the pandas join's call for every op, -1 for ids between, past or before a
    process' calls and for a process without calls, the first call of a repeated id."""
    rng = np.random.default_rng(23)
    calls, index, o_pid, o_corr = _calls_and_ops(rng, n_pids=5, calls_per_pid=2000, id_stride=7,
                                                 id_base_step=10**7)
    keys = projection.call_keys(calls, index)
    assert isinstance(keys, projection.HashedCallKeys)
    c_corr = calls["correlation_id"].to_numpy()
    assert (int(c_corr.max()) - int(c_corr.min()) + 1) * len(keys.pids) > 1000 * len(calls)
    want = projection.link_ops(pd.DataFrame({"global_pid": o_pid, "correlation_id": o_corr}), calls, index)
    assert (want >= 0).sum() > 0.4 * len(want) and (want < 0).sum() > 0.3 * len(want)
    np.testing.assert_array_equal(projection.link_with_keys(o_pid, o_corr, keys), want)
    by_id = np.argsort(o_corr % 10**7, kind="stable")          # time-like: every process, a part of its ids
    for order in (by_id, rng.permutation(len(o_pid))):
        for part in np.array_split(order, 7):
            np.testing.assert_array_equal(projection.link_with_keys(o_pid[part], o_corr[part], keys), want[part])


def test_linking_calls_not_in_id_order_and_small_chunks():
    """Calls whose ids do not ascend within a process (threads interleaved; a repeated id's first
    call read stays the one linked): ops linked one at a time and in chunks of 3 equal the pandas
    join."""
    rng = np.random.default_rng(31)
    calls, index, o_pid, o_corr = _calls_and_ops(rng, n_pids=3, calls_per_pid=400, id_stride=3,
                                                 id_base_step=5000, ops_per_call=0.5)
    keys = projection.call_keys(calls, index)
    # the input's rows were shuffled: ids not in order within a process before the sort
    c_pid, c_corr = calls["global_pid"].to_numpy(), calls["correlation_id"].to_numpy()
    assert (np.diff(c_corr[c_pid == c_pid[0]]) < 0).any()
    want = projection.link_ops(pd.DataFrame({"global_pid": o_pid, "correlation_id": o_corr}), calls, index)
    order = np.argsort(o_corr, kind="stable")
    for size in (1, 3):
        got = np.concatenate([projection.link_with_keys(o_pid[p], o_corr[p], keys)
                              for p in np.array_split(order, -(-len(order) // size))])
        np.testing.assert_array_equal(got, want[order])


@pytest.mark.parametrize("n_pids", [127, 128, 129, 255, 256, 32_767, 32_768])
def test_linking_at_the_code_type_boundaries(n_pids):
    """Process counts where the codes' narrow type changes (int8, uint8/int16, int32): every process'
    ops are linked, the last one's too (at 128 and 32,768 the search needle n_pids wrapped in the
    codes' type and the last process' ops stayed unlinked)."""
    rng = np.random.default_rng(n_pids)
    calls, index, o_pid, o_corr = _calls_and_ops(rng, n_pids=n_pids, calls_per_pid=3, id_stride=2,
                                                 id_base_step=0, ops_per_call=1)
    mine = calls["global_pid"].to_numpy() == calls["global_pid"].max()      # ops of the last process' calls
    o_pid = np.r_[o_pid, calls["global_pid"].to_numpy()[mine]]
    o_corr = np.r_[o_corr, calls["correlation_id"].to_numpy()[mine]]
    keys = projection.call_keys(calls, index)
    want = projection.link_ops(pd.DataFrame({"global_pid": o_pid, "correlation_id": o_corr}), calls, index)
    np.testing.assert_array_equal(projection.link_with_keys(o_pid, o_corr, keys), want)
    assert (want[-int(mine.sum()):] >= 0).all()
