"""Only the calls that launched something (and the graph-capture calls) are prepared when a report
has many more API calls than GPU ops (read/report.prepare_after_ops, run/launches.needed_calls):
every table, note and per-op row equals the analysis that prepares every call, on real H200
exports (CUDA graphs with capture calls, eager, several processes) and on synthetic odd cases."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.read import report
from analyze.run import api, launches
from analyze.timeline import cycles
from fixtures.synth import TraceSpec, write_trace

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
        mask = needed(calls, *a)
        kept.append((len(calls), len(calls) if mask is None else int(mask.sum())))
        return mask

    with monkeypatch.context() as m:
        m.setattr(report, "CALLS_PER_OP_PREPARED_AFTER", 0 if after_ops else 10 ** 9)
        m.setenv("SPECPROF_READ_THREADS", str(threads))
        m.setattr(launches, "needed_calls", spy)
        return api.load(path), kept


def _same_links(a: np.ndarray, b: np.ndarray) -> None:
    """``call_pos`` counts the prepared calls (sorted by thread and start), so it differs when fewer
    are prepared; the calls left out launched nothing, so the same ops are linked, ops of one call
    in one are ops of one call in the other, and the calls' order is kept."""
    assert np.array_equal(a < 0, b < 0)
    x, y = a[a >= 0], b[b >= 0]
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    assert np.array_equal(x[1:] == x[:-1], y[1:] == y[:-1]) and (np.diff(y) >= 0).all()


def _same(a, b) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(a.table(name), b.table(name), obj=name)
    pd.testing.assert_frame_equal(a.ranges, b.ranges, obj="ranges")
    pd.testing.assert_frame_equal(a.gpu_ops.drop(columns="call_pos"), b.gpu_ops.drop(columns="call_pos"),
                                  obj="gpu_ops")
    _same_links(a.gpu_ops["call_pos"].to_numpy(), b.gpu_ops["call_pos"].to_numpy())
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
    """Capture calls launch nothing: kept anyway, so the capturing cycle is still flagged
    graph_capture (the cycle table's warm-up reasons are the same)."""
    spec = TraceSpec(ranks=2, cycles=6, capture_cycles=[2, 4], missing_runtime=2, negative_globaltid=True,
                     overlap=True, unclosed_range=True, start_end_ranges=True, host_gap_ns=20_000)
    (path,), _ = write_trace(spec, tmp_path)
    every, _ = _load(str(path), monkeypatch, after_ops=False, threads=1)
    launching, kept = _load(str(path), monkeypatch, after_ops=True, threads=1)
    assert kept and kept[0][1] < kept[0][0]
    _same(every, launching)
    reasons = launching.table("cycles")["warmup_reason"]
    assert (reasons == cycles.GRAPH_CAPTURE).sum() == 2 * spec.ranks


def _reference_mask(calls: pd.DataFrame, op_pid, op_corr, capture_ids) -> np.ndarray:
    ops = set(zip(np.asarray(op_pid).tolist(), np.asarray(op_corr).tolist()))
    return np.array([(p, c) in ops or n in set(capture_ids) for p, c, n in
                     zip(calls["global_pid"].tolist(), calls["correlation_id"].tolist(), calls["name_id"].tolist())])


@pytest.mark.parametrize("seed", range(6))
def test_needed_calls_against_a_set_lookup(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    monkeypatch.setattr(launches, "BLOCK_ROWS", int(rng.integers(1, 64)))     # blocks of calls
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
    got = launches.needed_calls(calls, op_pid, op_corr, strings)
    assert np.array_equal(np.ones(n, dtype=bool) if got is None else got, want)
    assert got is None or not got.all()


def test_ids_too_spread_prepare_every_call(monkeypatch):
    calls = pd.DataFrame({"global_pid": [1, 1], "correlation_id": [0, 10 ** 6], "name_id": [0, 0]})
    monkeypatch.setattr(launches, "PRESENCE_MAX_BYTES", 1000)
    assert launches.needed_calls(calls, np.array([1]), np.array([0]), pd.Series(["a"])) is None


def test_schedule_rule():
    plan = [report.OpRead("kernel", "K", "", 1, 101, 100), report.OpRead("memcpy", "M", "", 1, 11, 10)]
    assert report.prepare_after_ops(221, plan) and not report.prepare_after_ops(220, plan)
    assert not report.prepare_after_ops(10 ** 6, []) and not report.prepare_after_ops(None, plan)
