"""One definition of a steady decode cycle (analyze.timeline.cycles.steady): the report, whatif, diff and
advise count the same cycles on every real fixture (issue 42). Before, whatif and diff left out cycles
over 5x the median wall time (the first cycle kept), the report and advise the cycle table's flags."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.errors import TraceError
from analyze.timeline import cycles as C
from analyze.tools import sides
from analyze.tools.advise import model as advise_model
from analyze.tools.diff import model as diff_model
from analyze.tools.whatif import model as whatif_model
from analyze.views import decode
from helpers import real_fixtures, shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
REPORTS = [p for p in real_fixtures.reports() if "_rank" not in p.name]    # per-rank reports: as a set
SETS = [sorted(REAL.glob("h200_shim_4rank_rank*.sqlite"))]


def _load(paths):
    try:
        return analyze.load([str(p) for p in paths]) if isinstance(paths, list) else shared_loads.load(str(paths))
    except TraceError:          # NVTX-only exports and the like: nothing to count
        return None


@pytest.mark.parametrize("paths", REPORTS + [s for s in SETS if s], ids=lambda p: p.name if isinstance(p, Path)
                         else "+".join(x.stem for x in p))
def test_report_whatif_diff_advise_count_the_same_steady_cycles(paths):
    a = _load(paths)
    if a is None or a.cycles is None or a.cycles.empty:
        pytest.skip("this export has no decode cycles to count (not applicable)")
    steady = C.steady(a.cycles)
    rows = set(map(tuple, steady[["rank", "cycle"]].to_numpy().tolist()))
    numbers = set(steady["cycle"].tolist())
    # the report: per rank, its steady cycles (decode_summary) are the rows of the one definition
    summary = decode.decode_summary(a.cycles, a.totals, a.phase_names)
    if len(summary):
        want = pd.Series([r for r, _ in rows]).value_counts()
        assert {int(r): int(n) for r, n in zip(summary["rank"], summary["steady_cycles"])} == \
            {int(r): int(want.get(r, 0)) for r in summary["rank"]}
    assert set(map(tuple, decode.steady_cycles(a.cycles)[["rank", "cycle"]].to_numpy().tolist())) == rows
    # advise: its steady rows and its per-cycle table
    ctx = advise_model.build_context(a, whatif=False, message_sizes=False)
    assert set(map(tuple, ctx.cycles[["rank", "cycle"]].to_numpy().tolist())) == rows
    assert set(ctx.per_cycle["cycle"].tolist()) == numbers
    assert ctx.warmup_cycles == sum(C.left_out_counts(a.cycles).values())
    # diff (the run against itself): the cycles each side compares
    d = diff_model.diff_results(a, a, n_boot=10)
    if len(d["summary"]):
        all_rows = d["summary"][d["summary"]["rank"] == "all"]
        assert set(all_rows["cycles_before"]) == {len(numbers)}
    # whatif: the cycles it models
    side = sides.as_side(a)
    try:
        samples, left_out = whatif_model.profile_samples(side)
    except ValueError:
        return
    assert set(samples["cycle"].tolist()) == numbers
    # whatif's side holds the cycles with GPU data (timeline.cycles.with_gpu): the lost ones without any
    # are not its to count; the rest as the table says
    assert left_out == C.left_out_counts(C.with_gpu(a.cycles))
    assert {k: v for k, v in left_out.items() if k != C.LOST} == \
        {k: v for k, v in C.left_out_counts(a.cycles).items() if k != C.LOST}


def test_states_are_distinct_labels():
    """warm-up (first cycle, graph capture), lost (no GPU data), outlier: told apart, never all 'warm-up'."""
    cyc = pd.DataFrame({"rank": [0] * 6, "cycle": range(6),
                        "warmup_reason": ["first", None, "graph_capture", "outlier", "truncated", "no_gpu_ops"]})
    cyc["warmup"] = cyc["warmup_reason"].notna()
    assert C.states(cyc).tolist() == ["warmup", "steady", "warmup", "outlier", "lost", "lost"]
    assert C.left_out_counts(cyc) == {"warmup": 2, "outlier": 1, "lost": 2}
    assert C.steady(cyc)["cycle"].tolist() == [1]
    assert C.steady(cyc, keep_outliers=True)["cycle"].tolist() == [1, 3]
    assert C.left_out_counts(cyc, keep_outliers=True) == {"warmup": 2, "lost": 2}


def test_an_outlier_is_judged_against_its_own_batch_size():
    """A server's cycles span batch sizes: a batch-64 cycle 6x as long as the batch-1 median is no outlier
    (its own batch's median is its cost); a batch-1 cycle 6x its batch's median is; a batch size seen in
    fewer than OUTLIER_MIN_BATCH_CYCLES cycles (requests arriving one by one) is judged against all the
    rank's cycles."""
    n1, n64 = 12, 10
    period = np.r_[np.full(n1, 100), np.full(n64, 600), [610, 3100]].astype("int64")
    period[3] = 600                                       # a batch-1 cycle 6x its batch's median
    batch = np.r_[np.ones(n1), np.full(n64, 64.0), [7.0, 8.0]]
    n = len(period)
    reason = C.warmup_reasons(np.zeros(n, dtype="int64"), np.arange(n), np.ones(n, bool), period,
                              np.zeros(n, bool), batch)
    assert reason[0] == "first" and reason[3] == "outlier"
    assert pd.isna(reason[n1:n1 + n64]).all()             # batch 64 against its own median (600)
    assert pd.isna(reason[-2])                            # 610 against the rank's median (600): kept
    assert reason[-1] == "outlier"                        # 3100 > 5 x 600 (batch 8, one cycle)
    # without the batch sizes, all against the rank's median: the batch-64 cycles are outliers when
    # batch 1 dominates
    many = np.r_[np.full(30, 100), np.full(10, 600)]
    no_batch = C.warmup_reasons(np.zeros(40, dtype="int64"), np.arange(40), np.ones(40, bool), many,
                                np.zeros(40, bool))
    assert (no_batch[30:] == "outlier").all()
    with_batch = C.warmup_reasons(np.zeros(40, dtype="int64"), np.arange(40), np.ones(40, bool), many,
                                  np.zeros(40, bool), np.r_[np.ones(30), np.full(10, 64.0)])
    assert pd.isna(with_batch[30:]).all()


def test_a_cycle_left_out_on_one_rank_is_left_out_of_every_cross_rank_figure():
    """Rank 0's cycle 5 is an outlier, rank 1's is not: per rank the report keeps rank 1's row, but what
    averages over ranks per cycle (whatif, diff, advise: every_rank=True) leaves cycle 5 out on both, as
    left_out_counts counts it."""
    n = 12
    rows = []
    for rank in (0, 1):
        for k in range(n):
            rows.append(dict(rank=rank, cycle=k, start_ns=k * 1000, period_ns=1000, requests=1,
                             warmup_reason="first" if k == 0 else ("outlier" if (rank, k) == (0, 5) else None)))
    cyc = pd.DataFrame(rows)
    cyc["warmup"] = cyc["warmup_reason"].notna()
    assert len(C.steady(cyc)) == 2 * (n - 1) - 1
    both = C.steady(cyc, every_rank=True)
    assert sorted(set(both["cycle"])) == [k for k in range(1, n) if k != 5] and len(both) == 2 * (n - 2)
    assert C.left_out_counts(cyc) == {"warmup": 1, "outlier": 1}
    from analyze.tools.sides import Side
    samples, _ = whatif_model.profile_samples(Side("t", cyc.assign(tokens=2, accepted_tokens=1), pd.DataFrame(), []),
                                              memo={})
    assert 5 not in samples["cycle"].tolist() and len(samples) == n - 2


def test_flags_derived_once_over_the_whole_table():
    """A table without flags (an older result, a live log) gets them over the whole table: the first cycle
    of a later batch size is not a 'first' (with_flags), so a subset keeps the whole's flags."""
    cyc = pd.DataFrame({"rank": 0, "cycle": range(30), "start_ns": np.arange(30) * 1000, "period_ns": 1000,
                        "requests": [1] * 15 + [2] * 15})
    flagged = C.with_flags(cyc)
    assert flagged["warmup_reason"].tolist() == ["first"] + [None] * 29
    sub = flagged[flagged["requests"] == 2]
    assert len(C.steady(sub)) == 15                 # derived on the subset alone, its cycle 15 would be 'first'
    assert len(C.steady(cyc[cyc["requests"] == 2])) == 14


def test_cycle_steps_come_from_the_spec_steps_marks_by_cycle_number():
    """``spec_steps=S cycle=K`` marks (the shim's, for a --speculative-adaptive process) give the cycle range of
    the same process and input whose payload is K its step count; other processes' marks, other marks and
    cycles without one leave NA."""
    import pandas as pd

    from analyze.timeline.cycles import cycle_steps

    cyc = pd.DataFrame({"global_pid": [1, 1, 1, 2], "input": ["a", "a", "a", "a"], "int_value": [7, 8, 9, 7]},
                       index=[10, 11, 12, 13])
    marks = pd.DataFrame({"global_pid": [1, 1, 1, 2, 1], "input": ["a"] * 5, "time_ns": [1, 2, 3, 4, 5],
                          "text": ["spec_steps=3 cycle=7", "spec_steps=1 cycle=8", "accept_len=2 reqs=1 cycle=8",
                                   "spec_steps=5 cycle=99", "spec_steps=4"]})
    got = cycle_steps(cyc, marks)
    assert got.index.tolist() == [10, 11, 12, 13]
    assert got.tolist()[:2] == [3, 1] and got.isna().tolist() == [False, False, True, True]
