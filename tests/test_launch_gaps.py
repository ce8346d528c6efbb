"""timeline/launch_gaps.py: the launch-gap figures advise cites are the same whether they come from a
per-op table a rank at a time or from a report analysed in chunks (the map step's GapStream, no
per-op table): on real reports the whole Advice of a chunked analysis equals the whole analysis'
(it lost the CUDA-graph and launch-gap evidence before); the exact median and the carry across
chunks checked against NumPy on random ops."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import analyze
from analyze import notes as N
from analyze.run import api
from analyze.timeline import launch_gaps as LG
from analyze.tools.advise import model as M
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 3000), st.integers(LG.SMALL_GAP_NS - 3, LG.SMALL_GAP_NS + 3),
                          st.integers(0, 10**10)), min_size=0, max_size=60),
       st.integers(1, 4))
def test_median_and_sums_equal_numpy_over_any_split(values, parts):
    gaps = np.array(values, dtype="float64")
    whole = LG.GapStats()
    whole.add(gaps, len(gaps), 3)
    split = LG.GapStats()
    for piece in np.array_split(gaps, parts):
        part = LG.GapStats()
        part.add(piece, len(piece), 1)
        split.merge(part)
    want = float(np.median(gaps)) if len(gaps) else 0.0
    assert whole.median_ns() == split.median_ns() == want
    big = gaps[gaps > LG.LAUNCH_GAP_NS]
    assert whole.launch_gaps == split.launch_gaps == len(big)
    assert whole.launch_gap_ns == split.launch_gap_ns == float(big.sum())


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(0, 40), st.integers(-1, 2)),
                    min_size=0, max_size=80),
       windows=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 300), st.integers(0, 80)), min_size=0,
                        max_size=10),
       cuts=st.lists(st.integers(0, 320), max_size=5))
def test_stream_in_time_chunks_equals_the_per_op_table(ops, windows, cuts):
    """Ops fed a rank at a time in time chunks (cut at any starts) give the figures advise computes
    from the whole per-op table; marks -1 are ops launched outside every cycle range."""
    rank = np.array([o[0] for o in ops], dtype="int64")
    start = np.array([o[1] for o in ops], dtype="int64")
    end = start + np.array([o[2] for o in ops], dtype="int64")
    mark = np.array([o[3] for o in ops], dtype="int8")
    cycles = pd.DataFrame({"rank": [w[0] for w in windows], "cycle": np.arange(len(windows)),
                           "start_ns": [w[1] for w in windows], "end_ns": [w[1] + w[2] for w in windows]},
                          dtype="int64")
    table = pd.DataFrame({"rank": rank, "start_ns": start, "end_ns": end,
                          "cycle_range": np.where(mark >= 0, 1, -1),
                          "graph_node_id": pd.array(np.where(mark >= 1, 5, 0), dtype="Int64").astype("Int64"),
                          "kind": np.where(mark == 2, "graph", "kernel")})
    table.loc[mark < 1, "graph_node_id"] = pd.NA
    want = LG.stats_from_op_table(table, cycles).figures(len(cycles))
    stream = LG.GapStream(cycles)
    bounds = sorted(set(cuts)) + [10**9]
    lo = -1
    for hi in bounds:                                    # time chunks: starts in [lo, hi)
        for r in range(3):
            sel = np.flatnonzero((rank == r) & (start >= lo) & (start < hi) & (mark >= 0))
            sel = sel[np.argsort(start[sel], kind="stable")]
            stream.feed(r, start[sel], end[sel], mark[sel])
        lo = hi
    assert stream.stats.figures(len(cycles)) == want


# each input at one chunk size, the two sizes alternating (every input at both took twice the time
# for no boundary case the other size misses: 23 rows cuts every input into hundreds of chunks)
@pytest.mark.parametrize("reports, rows", [(["h200_4proc_eager.sqlite"], 97), (["sglang_server.sqlite"], 23),
                                           (["h200_shim_graphs_node.sqlite"], 23),
                                           ([f"h200_shim_4rank_rank{i}.sqlite" for i in range(4)], 97)],
                         ids=["eager-4proc-97", "sglang-server-23", "graphs-node-23", "4-reports-97"])
def test_chunked_advice_equals_the_whole(monkeypatch, reports, rows):
    """Under a memory budget (dozens to hundreds of chunks, cycles cut between them) the Advice is
    the whole analysis' own: findings, checks, evidence, suggestions and the whatif it cites (whose
    draft step count comes from the draft kernels' repetition where the trace has no draft_step
    ranges: the map step keeps those rows for it)."""
    paths = [str(REAL / r) for r in reports]
    whole = analyze.load(paths if len(paths) > 1 else paths[0])
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", rows)
    chunked = analyze.load(paths if len(paths) > 1 else paths[0], memory_budget=1)
    # no per-op table: the ops spilled (one store per chunked report), the whole analysis' store is its table
    assert chunked.gpu_ops.empty and chunked.ops.frame is None and len(chunked.ops) == len(whole.gpu_ops)
    assert whole.ops.frame is whole.gpu_ops
    chunks = [n.count for n in chunked.notes if n.code == N.CHUNKED]
    assert len(chunks) == len(paths) and min(chunks) >= 3         # several chunks per report
    want = M.advise(whole, message_sizes=False).to_dict()
    got = M.advise(chunked, message_sizes=False).to_dict()
    assert got == want
    host = [f for f in want["findings"] if f["rule"] == "host_bound"]
    assert host and host[0]["evidence"].get("cuda_graphs") is not None


def test_whatif_of_a_chunked_analysis_equals_the_whole(monkeypatch):
    """`analyze-trace whatif` on a report analysed in chunks (a report too big for memory, or a
    budget): the real SGLang server trace has no draft_step ranges, so the step count comes from
    the draft kernels' repetition, read from the spilled ops (opstore) as from the per-op table."""
    from analyze.tools import sides
    from analyze.tools.whatif import model as W

    path = str(REAL / "sglang_server.sqlite")
    loaded = analyze.load(path)
    whole = W.whatif(sides.side_from_analysis(loaded), range(1, 6), n_boot=0)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 97)     # ~85 chunks, cycles cut between them
    chunked_analysis = analyze.load(path, memory_budget=1)
    read = sides.whatif_ops(chunked_analysis)            # whatif's rows only, not every op
    assert chunked_analysis.gpu_ops.empty and 0 < len(read) < len(loaded.gpu_ops) / 2
    chunked = W.whatif(sides.side_from_analysis(chunked_analysis), range(1, 6), n_boot=0)
    assert chunked["profiles"][0]["steps"] == whole["profiles"][0]["steps"] == 2
    pd.testing.assert_frame_equal(chunked["predictions"], whole["predictions"])


def test_whatif_reads_the_lowest_rank_that_has_gpu_data():
    """The rank whatif models is the lowest of the cycles with GPU data (its Side's): when every cycle of
    rank 0 lost its GPU data, the op store is asked for rank 1's ops, and whatif answers as it does from
    the whole per-op table."""
    import dataclasses

    from analyze.tools import sides
    from analyze.tools.whatif import model as W

    a = shared_loads.load(str(REAL / "h200_shim_4rank_single.sqlite"))
    a.cycles.loc[a.cycles["rank"] == 0, "warmup_reason"] = "no_gpu_ops"
    read = sides.whatif_ops(a)
    assert len(read) and set(read["rank"]) == {1}
    side = sides.side_from_analysis(a)
    got = W.whatif(side, range(1, 6), n_boot=0)
    want = W.whatif(dataclasses.replace(side, gpu_ops=a.gpu_ops), range(1, 6), n_boot=0)
    pd.testing.assert_frame_equal(got["predictions"], want["predictions"])
