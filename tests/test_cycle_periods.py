"""The decode cycle's GPU period: from its GPU start to the next cycle's GPU start on the rank (the
rank's last cycle: its own window end), split exactly into the exclusive time of every phase,
``other`` GPU work (ops of no phase in it, those launched between cycles included) and GPU idle;
the warm-up flag and its reason; the GPU busy time outside every period per rank. Known answers
from fixtures/synth.py, whole and in many time-ordered chunks; sums exact on the real exports."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.run import api
from analyze.timeline import cycles as cycles_mod
from helpers import shared_loads
from fixtures.synth import TraceSpec, write_trace

REAL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real")

SPECS = {
    # ops launched between cycles (other), side streams overlapping the phases, graphs on
    "between_and_overlap": TraceSpec(ranks=2, cycles=5, between_cycle_kernels=3, overlap=True,
                                     cuda_graph_mode="node"),
    # a graph captured inside cycle 2, a host stall before cycle 4 (cycle 3's period: an outlier)
    "capture_and_stall": TraceSpec(ranks=2, cycles=8, capture_cycles=[2], host_stall_ns={4: 5_000_000}),
    # nsys lost the CUDA data of the last 3 cycles: no_gpu_ops rows, the cycle before is truncated
    "lost_cuda_data": TraceSpec(ranks=2, cycles=7, lost_last_cycles=3, between_cycle_kernels=1),
    "per_rank_files": TraceSpec(ranks=3, cycles=4, one_file=False, between_cycle_kernels=2,
                                clock_offsets_ns=[0, 4_000_000, -2_500_000]),
}


def period_parts(cycles: pd.DataFrame, phase_names: list[str]) -> list[str]:
    return [f"period_{p}_ns" for p in list(phase_names) + ["other"]] + ["period_idle_ns"]


@pytest.fixture(scope="module", params=sorted(SPECS))
def case(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(request.param)
    paths, truth = write_trace(SPECS[request.param], out)
    whole = analyze.load(paths, memory_budget=None)
    saved = api.MIN_CHUNK_ROWS
    api.MIN_CHUNK_ROWS = 9
    try:
        chunked = analyze.load(paths, memory_budget=1)
    finally:
        api.MIN_CHUNK_ROWS = saved
    return request.param, whole, chunked, truth


def test_periods_and_warmup_equal_the_known_answers(case):
    name, whole, chunked, truth = case
    assert any(n.code == "chunked" and n.count > 5 for n in chunked.notes)
    for result in (whole, chunked):
        cyc = result.cycles.set_index(["rank", "cycle"])
        for rt in truth["ranks"]:
            assert len(cyc.loc[rt["rank"]]) == len(rt["cycles"]), name
            for c in rt["cycles"]:
                got = cyc.loc[(rt["rank"], c["cycle"])]
                where = (name, rt["rank"], c["cycle"])
                assert got["warmup_reason"] == c["warmup_reason"] and bool(got["warmup"]) == c["warmup"], where
                if not c["has_gpu"]:
                    assert pd.isna(got["gpu_period_ns"]) and pd.isna(got["start_ns"]), where
                    assert int(got["accepted_tokens"]) == c["accepted_tokens"], where
                    continue
                for f in ("gpu_period_start_ns", "gpu_period_end_ns", "gpu_period_ns", "period_idle_ns"):
                    assert int(got[f]) == c[f], (where, f)
                for p, ns in c["period_phase_ns"].items():
                    assert int(got[f"period_{p}_ns"]) == ns, (where, p)
        totals = result.totals.set_index("rank")
        for rt in truth["ranks"]:
            assert int(totals.loc[rt["rank"], "outside_cycles_busy_ns"]) == rt["outside_cycles_busy_ns"], name


def test_the_parts_add_up_to_the_period_and_busy(case):
    name, whole, chunked, _ = case
    for result in (whole, chunked):
        cyc = cycles_mod.with_gpu(result.cycles)
        parts = cyc[period_parts(cyc, result.phase_names)].to_numpy(dtype="int64")
        assert (parts >= 0).all()
        assert (parts.sum(axis=1) == cyc["gpu_period_ns"].to_numpy()).all(), name
        # periods tile the rank's decode time: consecutive, never overlapping
        for _, g in cyc.groupby("rank"):
            s, e = g["gpu_period_start_ns"].to_numpy(), g["gpu_period_end_ns"].to_numpy()
            assert (s[1:] == e[:-1]).all() and (e >= s).all()
        # per rank: busy = the busy part of every period + the busy time outside them
        busy_in = (cyc["gpu_period_ns"] - cyc["period_idle_ns"]).groupby(cyc["rank"]).sum()
        t = result.totals.set_index("rank")
        assert ((busy_in.reindex(t.index).fillna(0) + t["outside_cycles_busy_ns"]) == t["busy_ns"]).all()
    pd.testing.assert_frame_equal(whole.cycles, chunked.cycles)
    pd.testing.assert_frame_equal(whole.totals, chunked.totals)


def test_warmup_reasons_of_the_synthetic_cases():
    """What each case flags, said plainly (the truth above is computed by the generator)."""
    import tempfile

    seen = {}
    for name in ("capture_and_stall", "lost_cuda_data"):
        with tempfile.TemporaryDirectory() as out:
            paths, _ = write_trace(SPECS[name], out)
            cyc = analyze.load(paths).cycles
        seen[name] = cyc[cyc["rank"] == 0].set_index("cycle")["warmup_reason"].to_dict()
    assert seen["capture_and_stall"] == {0: "first", 1: None, 2: "graph_capture", 3: "outlier", 4: None, 5: None,
                                         6: None, 7: None}
    assert seen["lost_cuda_data"] == {0: "first", 1: None, 2: None, 3: "truncated", 4: "no_gpu_ops",
                                      5: "no_gpu_ops", 6: "no_gpu_ops"}


REAL_CYCLES = ["h200_4proc_eager", "h200_shim_graphs_node", "h200_shim_4rank_single", "h200_sweep2_steps3",
               "sglang_server", "sglang_graphs", "sglang_eager", "sglang_vocab64"]


@pytest.mark.parametrize("name", REAL_CYCLES)
def test_real_exports_periods_add_up_whole_and_chunked(name, monkeypatch):
    path = os.path.join(REAL, name + ".sqlite")
    if not os.path.exists(path):
        pytest.skip(f"{path} absent")
    whole = api.load(path, memory_budget=None)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 200)
    chunked = api.load(path, memory_budget=1)
    pd.testing.assert_frame_equal(whole.cycles, chunked.cycles)
    pd.testing.assert_frame_equal(whole.totals, chunked.totals)
    cyc = cycles_mod.with_gpu(whole.cycles)
    assert len(cyc) > 0
    parts = cyc[period_parts(cyc, whole.phase_names)].to_numpy(dtype="int64")
    assert (parts >= 0).all() and (parts.sum(axis=1) == cyc["gpu_period_ns"].to_numpy()).all()
    window = cyc[[f"{p}_ns" for p in list(whole.phase_names) + ["other"]] + ["gap_ns"]].to_numpy(dtype="int64")
    assert (window.sum(axis=1) == cyc["duration_ns"].to_numpy()).all()
    t = whole.totals.set_index("rank")
    busy_in = (cyc["gpu_period_ns"] - cyc["period_idle_ns"]).groupby(cyc["rank"]).sum()
    assert ((busy_in.reindex(t.index).fillna(0) + t["outside_cycles_busy_ns"]) == t["busy_ns"]).all()
    assert (t["outside_cycles_busy_ns"] >= 0).all()
    first = whole.cycles.groupby("rank").head(1)
    assert (first["warmup_reason"] == "first").all()


def test_sglang_lost_cycles_are_flagged():
    """SGLang SIGKILLs its scheduler at shutdown and nsys loses the CUDA data of the last cycles:
    those cycle ranges are rows flagged no_gpu_ops (no GPU figures), the cycle holding the last
    recorded op is truncated; the server run (profile window closed by /stop_profile) has none."""
    for name, lost in (("sglang_graphs", 48), ("sglang_eager", 17), ("sglang_server", 0)):
        path = os.path.join(REAL, name + ".sqlite")
        if not os.path.exists(path):
            pytest.skip(f"{path} absent")
        cyc = shared_loads.load(path).cycles
        reasons = cyc["warmup_reason"].value_counts().to_dict()
        assert reasons.get("no_gpu_ops", 0) == lost, (name, reasons)
        assert reasons.get("truncated", 0) == (1 if lost else 0), (name, reasons)
        assert reasons.get("first") == 1
        gone = cyc[cyc["warmup_reason"] == "no_gpu_ops"]
        assert gone["busy_ns"].isna().all() and gone["gpu_period_ns"].isna().all()
        assert (cyc["warmup"] == cyc["warmup_reason"].notna()).all()
        steady = cyc[~cyc["warmup"]]
        assert len(steady) >= 13 and not steady["gpu_period_ns"].isna().any()
        np.testing.assert_array_equal(cycles_mod.with_gpu(cyc)["cycle"].to_numpy(),
                                      np.arange(len(cyc) - lost))


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 400), st.integers(0, 60), st.integers(-1, 3)),
                    max_size=50),
       intervals=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 450), st.integers(0, 120)), max_size=12),
       cuts=st.lists(st.integers(0, 450), max_size=4),
       code_type=st.sampled_from(["int8", "int16"]))
def test_interval_split_equals_clipped_unions(ops, intervals, cuts, code_type):
    """cycles.IntervalSplit over time-ordered chunks (any cut points), on any ops and any intervals
    (overlapping, empty, beyond the ops): per interval the union of the rank's ops clipped to it,
    and of the ops of phases 0..i, as computed op by op. Phase codes as the map step gives them
    (int8) and wider; 3 is ``other``, -1 no phase (in no union but the busy one); phases with no
    op, and chunks where every op is in phases 0..i, take the reuse of an earlier union."""
    from analyze.attribute.intervals import union_length

    n_ph = 3
    rank = np.array([o[0] for o in ops], dtype="int64")
    s = np.array([o[1] for o in ops], dtype="int64")
    e = s + np.array([o[2] for o in ops], dtype="int64")
    ph = np.array([o[3] for o in ops], dtype=code_type)
    w_rank = np.array([i[0] for i in intervals], dtype="int64")
    w_lo = np.array([i[1] for i in intervals], dtype="int64")
    w_hi = w_lo + np.array([i[2] for i in intervals], dtype="int64")
    split = cycles_mod.IntervalSplit(w_rank, w_lo, w_hi, n_ph)
    edges = [-1] + sorted(cuts) + [10 ** 6]
    for a, b in zip(edges[:-1], edges[1:]):
        idx = np.flatnonzero((s > a) & (s <= b))
        idx = idx[np.lexsort((s[idx], rank[idx]))]
        for r in np.unique(rank[idx]):                  # a rank's ops of the chunk, as the map step feeds them
            mine = idx[rank[idx] == r]
            split.update_rank(int(r), s[mine], e[mine], ph[mine])
    busy, upto = split.result()
    for k in range(len(w_lo)):
        mine = rank == w_rank[k]
        cs, ce = np.clip(s, w_lo[k], w_hi[k]), np.clip(e, w_lo[k], w_hi[k])
        assert busy[k] == union_length(cs[mine], ce[mine])
        for i in range(n_ph):
            sel = mine & (ph >= 0) & (ph <= i)
            assert upto[i, k] == union_length(cs[sel], ce[sel]), (k, i)


def test_joined_accept_lengths_equal_a_grouped_join():
    """Each cycle row's marks' ``lens`` joined in order, marks without one left out, rows with none
    absent: as pandas' grouped join gives (random rows with 1-4 marks, None and NaN among them)."""
    rng = np.random.default_rng(7)
    rows = np.repeat(np.arange(0, 400, 2), rng.integers(1, 5, 200))
    pool = np.array(["1,2", "0", "3,3,1", None, np.nan, "2"], dtype=object)
    lens = pool[rng.integers(0, len(pool), len(rows))]
    got_rows, got = cycles_mod._joined_lengths(rows, lens)
    want = pd.Series(lens).groupby(rows, sort=True).agg(
        lambda s: ",".join(x for x in s if isinstance(x, str)) or None).dropna()
    assert got_rows.tolist() == want.index.tolist() and got.tolist() == want.tolist()
    assert any("," in x and x.count(",") > 2 for x in got)            # some rows joined several marks
    empty_rows, empty = cycles_mod._joined_lengths(np.array([3, 3, 5]), np.array([None, np.nan, None], dtype=object))
    assert len(empty_rows) == 0 and len(empty) == 0
