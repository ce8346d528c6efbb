"""Property tests: on any generated trace, per rank, the phases' exclusive GPU time plus the
unattributed time equals the busy time, and both equal the generator's exact answer."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

from hypothesis import HealthCheck, given, settings, strategies as st

import analyze
from helpers import shared_loads
from fixtures.synth import TraceSpec, write_trace

specs = st.builds(
    TraceSpec,
    ranks=st.integers(1, 3),
    cycles=st.integers(1, 3),
    draft_steps=st.integers(1, 4),
    verify_layers=st.integers(1, 3),
    one_file=st.booleans(),
    cuda_graph_mode=st.sampled_from([None, "node", "graph"]),
    overlap=st.booleans(),
    second_thread_ranges=st.booleans(),
    start_end_ranges=st.booleans(),
    unclosed_range=st.booleans(),
    unranged_kernels=st.integers(0, 3),
    zero_length_kernels=st.integers(0, 2),
    missing_runtime=st.integers(0, 2),
    memcpy=st.booleans(),
    memset=st.booleans(),
    seed=st.integers(0, 10_000),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs)
def test_exclusive_plus_unattributed_equals_busy(spec):
    with tempfile.TemporaryDirectory() as out:
        paths, truth = write_trace(spec, out)
        result = analyze.load(paths)
    named = result.phases[result.phases["phase"] != "other"].groupby("rank")["exclusive_ns"].sum()
    other = result.phases[result.phases["phase"] == "other"].set_index("rank")["exclusive_ns"]
    totals = result.totals.set_index("rank")
    for rt in truth["ranks"]:
        rank = rt["rank"]
        assert named[rank] + totals.loc[rank, "unattributed_ns"] == totals.loc[rank, "busy_ns"]
        assert other[rank] == totals.loc[rank, "unattributed_ns"]
        assert totals.loc[rank, "busy_ns"] == rt["busy_ns"]
        assert totals.loc[rank, "unattributed_ns"] == rt["unattributed_ns"]
        for phase, expected in rt["phases"].items():
            row = result.phases[(result.phases["rank"] == rank) & (result.phases["phase"] == phase)].iloc[0]
            assert row["exclusive_ns"] == expected["exclusive_ns"], (phase, spec)
            assert row["busy_ns"] == expected["busy_ns"], (phase, spec)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, rows=st.integers(1, 40))
def test_chunked_analysis_equals_whole_on_any_trace(spec, rows):
    """Any generated trace (overlaps, crossing start/end ranges, unclosed ranges, missing calls,
    zero-length kernels, graph launches), cut into time-ordered chunks of a few rows: every table
    equals the analysis in one piece."""
    import pandas as pd

    from analyze.run import api

    with tempfile.TemporaryDirectory() as out:
        paths, _ = write_trace(spec, out)
        whole = analyze.load(paths)
        saved = api.MIN_CHUNK_ROWS
        api.MIN_CHUNK_ROWS = rows
        try:
            chunked = analyze.load(paths, memory_budget=1)
        finally:
            api.MIN_CHUNK_ROWS = saved
    assert any(n.code == "chunked" and "time-ordered chunk" in n.message for n in chunked.notes)
    for name in ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives", "alignment"):
        pd.testing.assert_frame_equal(whole.table(name).reset_index(drop=True),
                                      chunked.table(name).reset_index(drop=True), check_dtype=False, obj=name)


@settings(max_examples=200, deadline=None)
@given(data=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1_000), st.integers(0, 100)), max_size=60),
       cuts=st.lists(st.integers(0, 1_000), max_size=5))
def test_streamed_union_equals_union(data, cuts):
    """intervals.union_step over time-ordered chunks (any cut points) gives each group's union."""
    import numpy as np

    from analyze.attribute.intervals import INT64_MIN, union_length, union_step

    g = np.array([d[0] for d in data], dtype="int64")
    s = np.array([d[1] for d in data], dtype="int64")
    e = s + np.array([d[2] for d in data], dtype="int64")
    reach, total = np.full(4, INT64_MIN, dtype="int64"), np.zeros(4, dtype="int64")
    edges = [-1] + sorted(cuts) + [10 ** 6]
    for a, b in zip(edges[:-1], edges[1:]):
        idx = np.flatnonzero((s > a) & (s <= b))
        idx = idx[np.lexsort((s[idx], g[idx]))]
        union_step(g[idx], s[idx], e[idx], reach, total)
    for k in range(4):
        assert total[k] == union_length(s[g == k], e[g == k])


def _collective_table_reference(coll):
    """The collective table by pandas groupby, as first written (the array version must agree)."""
    import numpy as np

    coll = coll.sort_values(["rank", "start_ns"], kind="stable")
    coll = coll.assign(collective=coll.groupby("rank").cumcount())
    n = coll.groupby("rank")["collective"].max().min() + 1
    coll = coll[coll["collective"] < n]
    last = coll.groupby("collective")["start_ns"].transform("max")
    duration = coll["end_ns"] - coll["start_ns"]
    lag = last - coll["start_ns"]
    wait = np.minimum(lag, duration)
    import pandas as pd
    out = pd.DataFrame({"collective": coll["collective"].to_numpy(), "rank": coll["rank"].to_numpy(),
                        "name": coll["name"].to_numpy(), "start_ns": coll["start_ns"].to_numpy(),
                        "end_ns": coll["end_ns"].to_numpy(), "duration_ns": duration.to_numpy(),
                        "arrival_lag_ns": lag.to_numpy(), "wait_ns": wait.to_numpy(),
                        "transfer_ns": (duration - wait).to_numpy(), "phase": coll["prev_phase"].to_numpy(),
                        "last_arrival": (lag == 0).to_numpy()})
    return out.sort_values(["collective", "rank"]).reset_index(drop=True)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 50), st.integers(0, 20),
                               st.sampled_from(["a", "b"]), st.sampled_from(["draft", "verify", "other"])),
                     max_size=60))
def test_collective_table_equals_groupby_reference(rows):
    """collectives.collective_table_from (arrays, instance-major) equals the groupby version on any
    ops: uneven counts per rank, equal start times, one rank only."""
    import pandas as pd

    from analyze.timeline import collectives

    coll = pd.DataFrame({"rank": pd.Series([r[0] for r in rows], dtype="int64"),
                         "name": pd.Series([r[3] for r in rows], dtype=object),
                         "start_ns": pd.Series([r[1] for r in rows], dtype="int64"),
                         "end_ns": pd.Series([r[1] + r[2] for r in rows], dtype="int64"),
                         "prev_phase": pd.Series([r[4] for r in rows], dtype=object)})
    got = collectives.collective_table_from(coll)
    if coll["rank"].nunique() < 2:
        assert got.empty
        return
    want = _collective_table_reference(coll)
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert got["name"].dtype == object and got["phase"].dtype == object


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), min_size=0, max_size=200), st.booleans())
def test_call_order_by_thread_then_start_is_the_stable_key_sort(calls, in_start_order):
    """projection.build_call_index's order: a radix sort by thread when the calls come in start
    order (as nsys writes them), the composite-key sort otherwise; the same stable order either way."""
    import numpy as np

    from analyze.project import projection

    if in_start_order:
        calls = sorted(calls, key=lambda c: c[1])
    tidx = np.array([c[0] for c in calls], dtype="int64")
    start = np.array([c[1] for c in calls], dtype="int64")
    key = tidx * 1000 + start
    got = projection._order_by_thread_then_start(tidx, start, key, 6)
    assert np.array_equal(got, np.argsort(key, kind="stable"))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), st.integers(0, 60), st.integers(0, 30)),
                min_size=0, max_size=150))
def test_launch_gaps_equal_the_grouped_pandas_reference(ops):
    """advise's op_gaps (a segmented running max in NumPy) against the pandas it replaced: sort by
    rank, cycle and start (stable), cummax of ends and the next start per (rank, cycle)."""
    import numpy as np
    import pandas as pd

    from analyze.timeline.launch_gaps import op_gaps

    frame = pd.DataFrame(ops, columns=["rank", "cycle", "start_ns", "dur"], dtype="int64")
    frame["end_ns"] = frame["start_ns"] + frame["dur"]
    ref = frame.sort_values(["rank", "cycle", "start_ns"], kind="stable")
    reach = ref.groupby(["rank", "cycle"], sort=False)["end_ns"].cummax()
    nxt = ref.groupby(["rank", "cycle"], sort=False)["start_ns"].shift(-1)
    want = (nxt - reach).dropna().clip(lower=0).to_numpy(dtype="float64")
    got = op_gaps(*(frame[c].to_numpy(dtype="int64") for c in ("rank", "cycle", "start_ns", "end_ns")))
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.none(), st.integers(-2 ** 54, 2 ** 54), st.sampled_from([0.5, float("inf")])),
                       max_size=40),
       block=st.integers(1, 7), as_int=st.booleans())
def test_nullable_int64_equals_to_numeric_int64(monkeypatch, values, block, as_int):
    """read.report._nullable_int64 (float columns a block at a time) against the pandas it stands
    for, ``pd.to_numeric(column, errors="coerce").astype("Int64")``: values and missing rows, for
    NULLs and integers past 2**53, with blocks of any size; where pandas refuses (fractions,
    infinities), those values are NULL."""
    import numpy as np
    import pandas as pd
    import pytest

    from analyze.read import report

    monkeypatch.setattr(report, "NULLABLE_BLOCK_ROWS", block)
    if as_int:
        column = pd.Series([v if isinstance(v, int) else 0 for v in values], dtype="int64")
    else:
        column = pd.Series([np.nan if v is None else float(v) for v in values], dtype="float64")
    try:
        want = pd.to_numeric(column, errors="coerce").astype("Int64").array
    except (TypeError, ValueError, OverflowError):
        # pandas refuses fractions, infinities and values past int64; nsys never writes them: they read
        # as NULL (issue 45: a graph node id of 2**63-1 crashed the analysis), whole values as themselves
        from analyze.read import validate

        got = report._nullable_int64(column)
        vals, ok = validate.integer_values(column.to_numpy())
        ok &= ~column.isna().to_numpy()
        assert got.isna().tolist() == (~ok).tolist()
        assert [x for x in got.tolist() if x is not pd.NA] == vals[ok].tolist()
        return
    got = report._nullable_int64(column)
    assert got.dtype == want.dtype
    assert got.isna().tolist() == want.isna().tolist()
    assert [x for x in got.tolist() if x is not pd.NA] == [x for x in want.tolist() if x is not pd.NA]


@settings(max_examples=200, deadline=None)
@given(types=st.lists(st.sampled_from([59, 70, 60, 71, 2 ** 40, -5]), max_size=80))
def test_range_styles_equal_the_style_of_each_event_type(types):
    """read.report.range_styles (a table indexed by type, or the distinct types where a type is
    negative or large) gives each event the style RANGE_EVENT_STYLES names for its type."""
    import numpy as np

    from analyze.read import report

    event_type = np.array(types, dtype="int64")
    got = report.range_styles(event_type)
    assert got.dtype == object and len(got) == len(types)
    assert got.tolist() == [report.RANGE_EVENT_STYLES.get(t) for t in types]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(-3, 40), max_size=60), dtype=st.sampled_from(["int64", "int32", "int8", "uint16",
                                                                                "uint64", "float64"]),
       huge=st.booleans())
def test_distinct_levels_equal_np_unique(values, dtype, huge):
    """projection.distinct_levels (np.bincount for small non-negative depths) equals np.unique,
    values and dtype, for negative depths, other integer widths, floats and depths past its limit."""
    import numpy as np

    from analyze.project import projection

    if dtype.startswith("uint"):
        values = [abs(v) for v in values]
    if huge and dtype in ("int64", "uint64") and values:
        values[0] = (1 << 20) + 5
    levels = np.array(values, dtype=dtype)
    got, want = projection.distinct_levels(levels), np.unique(levels)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(-50, 50), min_size=1, max_size=60), cuts=st.lists(st.booleans(), max_size=60),
       far=st.booleans())
def test_segmented_running_max_equals_a_loop_per_segment(values, cuts, far):
    """intervals.segmented_running_max (segments lifted apart in one accumulate, or one pass per
    segment where the lifted values would not fit 64 bits: ``far``) equals the running max taken
    segment by segment."""
    import numpy as np

    from analyze.attribute import intervals

    v = np.array(values, dtype="int64")
    if far:
        v[0] = 2 ** 62
    first = np.array([True] + [bool(c) for c in cuts[:len(values) - 1]] + [False] * (len(values) - 1 - len(cuts)))
    want, reach = [], None
    for x, f in zip(v.tolist(), first.tolist()):
        reach = x if f else max(reach, x)
        want.append(reach)
    np.testing.assert_array_equal(intervals.segmented_running_max(v, first), np.array(want, dtype="int64"))


@settings(max_examples=400, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(-2, 25), st.integers(0, 3)),
                     max_size=120),
       wanted=st.sets(st.integers(0, 4)), far=st.booleans(), given_order=st.booleans())
def test_outermost_per_code_equals_nesting_levels_per_code(rows, wanted, far, given_order):
    """attribution.outermost_per_code (one order, a segmented running max of ends) against what it
    replaced: per code, nesting_levels of that code's ranges == 0. Equal starts, equal ranges,
    nested and crossing ranges, ends 2**61 apart (``far``: the running max one group at a time);
    None exactly where a range ends before it starts."""
    import numpy as np

    from analyze.attribute import attribution
    from analyze.project import projection

    thread = np.array([r[0] for r in rows], dtype="int64")
    start = np.array([r[1] for r in rows], dtype="int64")
    end = start + np.array([r[2] for r in rows], dtype="int64")
    code = np.array([r[3] for r in rows], dtype="int64")
    if far and len(rows):
        end[0] = start[0] + 2 ** 61
    order = projection.thread_start_order(thread, start, end) if given_order and len(rows) else None
    got = attribution.outermost_per_code(thread, start, end, code, wanted, order)
    if len(rows) and wanted and bool((end < start).any()):
        assert got is None
        return
    assert got is not None and set(got) == set(wanted)
    for k in wanted:
        sel = np.flatnonzero(code == k)
        want = sel[projection.nesting_levels(thread[sel], start[sel], end[sel]) == 0]
        np.testing.assert_array_equal(got[k], want)


def test_launch_gaps_with_ranks_far_apart_keep_each_rank_apart():
    """Ranks 2**63 - 1 apart (rank - min rank would wrap in int64): _launch_gaps takes the old path
    and leaves the op of rank -2**62, which has no cycle, out (found by a differential review)."""
    import numpy as np
    import pandas as pd

    from analyze.timeline import launch_gaps as LG
    from analyze.tools.advise import model as M

    ops = pd.DataFrame({"cycle_range": [0, 0, 0], "rank": np.array([-2 ** 62, 2 ** 62, 2 ** 62], dtype="int64"),
                        "start_ns": [0, 10, 20], "end_ns": [1, 12, 25],
                        "graph_node_id": pd.array([None] * 3, dtype="Int64"), "kind": ["kernel"] * 3})
    cycles = pd.DataFrame({"rank": np.array([2 ** 62]), "cycle": [1], "start_ns": [0], "end_ns": [100]})
    assert LG.cycle_gaps_in_start_order(*(ops[c].to_numpy(dtype="int64") for c in ("rank", "start_ns", "end_ns")),
                                       cycles) is None
    got = LG.stats_from_op_table(ops, cycles).figures(len(cycles))
    assert got["ops_per_cycle"] == 2.0 and got["median_gap_ns"] == 8.0


def test_launch_gaps_with_int32_ranks_far_apart_keep_each_rank_apart():
    """The per-op table's int32 ranks -1 and 2**31 - 1 (rank - min rank would wrap in int32): the
    sort is by int64 codes there, so the op of rank -1, which has no cycle, stays out (found by a
    review: it had been counted in the other rank's cycle)."""
    import numpy as np
    import pandas as pd

    from analyze.timeline import launch_gaps as LG
    from analyze.tools.advise import model as M

    ops = pd.DataFrame({"cycle_range": [0, 0, 0], "rank": np.array([-1, 2 ** 31 - 1, 2 ** 31 - 1], dtype="int32"),
                        "start_ns": [0, 10, 20], "end_ns": [1, 12, 25],
                        "graph_node_id": pd.array([None] * 3, dtype="Int64"), "kind": ["kernel"] * 3})
    cycles = pd.DataFrame({"rank": np.array([2 ** 31 - 1]), "cycle": [1], "start_ns": [0], "end_ns": [100]})
    pieces = list(LG.cycle_gaps_in_start_order(*(ops[c].to_numpy() for c in ("rank", "start_ns", "end_ns")), cycles))
    assert [(list(rows), list(gaps)) for rows, gaps in pieces] == [([1, 2], [8.0])]
    got = LG.stats_from_op_table(ops, cycles).figures(len(cycles))
    assert got["ops_per_cycle"] == 2.0 and got["median_gap_ns"] == 8.0


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 80), st.integers(-3, 25), st.booleans(),
                              st.booleans(), st.booleans()), min_size=0, max_size=120),
       windows=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 80), st.integers(0, 30), st.integers(0, 9)),
                        min_size=0, max_size=14),
       ids_in_start_order=st.booleans())
def test_cycle_gaps_in_start_order_equal_cycle_of_then_op_gaps(ops, windows, ids_in_start_order):
    """advise's launch gaps with one sort by (rank, start) (cycle_gaps_in_start_order) against what
    it replaced, cycle_of_arrays then op_gaps (tested above against pandas): the same rows, the
    same gaps element for element, the same summary; overlapping windows, ties of starts, ends
    before starts, ranks without ops or cycles; None exactly where a rank's ids do not increase
    with start, given ops (then _launch_gaps takes the two functions)."""
    import numpy as np
    import pandas as pd

    from analyze.timeline import launch_gaps as LG
    from analyze.tools.advise import model as M

    cyc = pd.DataFrame(windows, columns=["rank", "start_ns", "len", "cycle"], dtype="int64")
    if ids_in_start_order:       # ids that grow with start on every rank (unique per rank)
        cyc = cyc.drop_duplicates(["rank", "start_ns"]).sort_values(["rank", "start_ns"], kind="stable")
        cyc["cycle"] = cyc.groupby("rank").cumcount() * 3 + cyc["rank"]
    cyc["end_ns"] = cyc["start_ns"] + cyc["len"]
    cyc = cyc.drop(columns="len").reset_index(drop=True)
    frame = pd.DataFrame([o[:3] for o in ops], columns=["rank", "start_ns", "dur"], dtype="int64")
    frame["end_ns"] = frame["start_ns"] + frame["dur"]
    frame["cycle_range"] = np.array([0 if o[3] else -1 for o in ops], dtype="int64")
    frame["graph_node_id"] = pd.array([7 if o[4] else None for o in ops], dtype="Int64")
    frame["kind"] = ["graph" if o[5] else "kernel" for o in ops]

    rank, start, end = (frame[c].to_numpy(dtype="int64") for c in ("rank", "start_ns", "end_ns"))
    cycle = LG.cycle_of_arrays(rank, start, cyc)
    keep = cycle >= 0
    want_gaps = LG.op_gaps(rank[keep], cycle[keep], start[keep], end[keep])
    found = LG.cycle_gaps_in_start_order(rank, start, end, cyc)
    by_rank = cyc.sort_values(["start_ns", "cycle"], kind="stable").groupby("rank")["cycle"]
    increasing = all((np.diff(g.to_numpy()) > 0).all() for _, g in by_rank)
    assert (found is None) == (not increasing and len(frame) > 0)
    if ids_in_start_order:
        assert found is not None
    if found is not None:
        pieces = list(found)                            # per rank with cycles, in rank order
        rows = np.concatenate([np.zeros(0, dtype="int64")] + [p[0] for p in pieces])
        gaps = np.concatenate([np.zeros(0)] + [p[1] for p in pieces])
        assert np.array_equal(np.sort(rows), np.flatnonzero(keep))
        np.testing.assert_array_equal(gaps, want_gaps)
        ranks_of_pieces = [int(rank[p[0][0]]) for p in pieces if len(p[0])]
        assert ranks_of_pieces == sorted(set(ranks_of_pieces))     # one piece a rank, ascending

    # only the rows ``keep`` marks (those inside a cycle's range): as the arrays gathered first
    inside = frame["cycle_range"].to_numpy() >= 0
    found_kept = LG.cycle_gaps_in_start_order(rank.astype("int32"), start, end, cyc, keep=inside)
    assert (found_kept is None) == (found is None)
    if found_kept is not None:
        pieces = list(found_kept)
        rows = np.concatenate([np.zeros(0, dtype="int64")] + [p[0] for p in pieces])
        gaps = np.concatenate([np.zeros(0)] + [p[1] for p in pieces])
        assert np.array_equal(np.sort(rows), np.flatnonzero(keep & inside))
        k = keep & inside
        np.testing.assert_array_equal(gaps, LG.op_gaps(rank[k], cycle[k], start[k], end[k]))

    # the summary _launch_gaps returns, against the same computed from the reference arrays
    ref_cycle = LG.cycle_of_arrays(rank[inside], start[inside], cyc)
    at = np.flatnonzero(inside)[ref_cycle >= 0]
    got = LG.stats_from_op_table(frame, cyc).figures(len(cyc))
    if not len(at):
        assert got == {}
        return
    k = ref_cycle >= 0
    g = LG.op_gaps(rank[inside][k], ref_cycle[k], start[inside][k], end[at])
    big = g[g > M.LAUNCH_GAP_NS]
    n = max(len(cyc), 1)
    graph_ops = int(frame["graph_node_id"].notna().to_numpy()[at].sum()) + int((frame["kind"] == "graph").to_numpy()[at].sum())
    assert got == {"launch_gaps_per_cycle": len(big) / n, "launch_gap_per_cycle_ns": float(big.sum()) / n,
                   "median_gap_ns": float(np.median(g)) if len(g) else 0.0,
                   "graph_ops_share": graph_ops / len(at), "ops_per_cycle": len(at) / n}


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([3, -7, 10 ** 12, 5]), st.integers(0, 400)), max_size=300),
       block=st.integers(1, 50), presence=st.booleans())
def test_shared_correlation_ids_equal_a_set_reference(rows, block, presence):
    """checks.count_shared_ids (presence table in blocks, or the lexsort) against sets."""
    import numpy as np
    from analyze.run import checks

    pid = np.array([p for p, _ in rows], dtype="int64")
    corr = np.array([c for _, c in rows], dtype="int64")
    by_id: dict[int, set] = {}
    for p, c in rows:
        by_id.setdefault(c, set()).add(p)
    want = sum(len(ps) > 1 for ps in by_id.values())
    from analyze.project import projection as proj

    old = proj.KEY_BLOCK_ROWS, proj.PRESENCE_MAX_BYTES
    proj.KEY_BLOCK_ROWS, proj.PRESENCE_MAX_BYTES = block, (old[1] if presence else 0)
    try:
        assert checks.count_shared_ids(corr, pid) == want
    finally:
        proj.KEY_BLOCK_ROWS, proj.PRESENCE_MAX_BYTES = old


def _depths_by_definition(thread, start, end):
    """Per range: the ranges of its thread before it in (start, -end, row) order that have not
    ended strictly before its start (projection.nesting_levels' definition, pair by pair)."""
    rows = sorted(range(len(start)), key=lambda i: (thread[i], start[i], -end[i], i))
    rank = {i: k for k, i in enumerate(rows)}
    return [sum(1 for j in range(len(start)) if thread[j] == thread[i] and rank[j] < rank[i] and not end[j] < start[i])
            for i in range(len(start))]


ranges_lists = st.lists(st.tuples(st.sampled_from([0, 1, 2, 70_000]), st.integers(-50, 50), st.integers(0, 30)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ranges=ranges_lists, scale=st.sampled_from([1, 10 ** 16]))
def test_nesting_levels_match_the_definition(ranges, scale):
    """Depths by the definition, on timestamps near zero and ones whose keys (thread code x time
    span) would not fit in 64 bits (the per-thread path)."""
    import numpy as np

    from analyze.project.projection import nesting_levels

    thread = np.array([r[0] for r in ranges], dtype="int64")
    start = np.array([r[1] for r in ranges], dtype="int64") * scale
    end = start + np.array([r[2] for r in ranges], dtype="int64") * scale
    assert nesting_levels(thread, start, end).tolist() == _depths_by_definition(thread, start, end)


# --- render/json_rows: the --json records' text, a column at a time, equals json.dumps per record ---
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6))
json_cells = st.one_of(json_scalars, st.dictionaries(st.text(max_size=3), json_scalars, max_size=2),
                       st.lists(json_scalars, max_size=2), st.just(float("-inf")), st.just(-0.0),
                       st.sampled_from(["\"q\"", "\\", "\n\t\x00", "é", "\U0001f600", "\ud800"]))


def _row_lines(frame):
    """render/json_rows.row_texts as Python strings, one per row (no columns: no rows)."""
    from analyze.render import json_rows, outputs

    rows = json_rows.row_texts(frame, outputs._plain)
    return [] if rows is None else rows.to_pylist()


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 12), data=st.data())
def test_json_lines_equal_json_dumps_of_each_record(n, data):
    import numpy as np
    import pandas as pd

    from analyze.render import json_rows, outputs

    columns = {
        "i64": pd.Series(data.draw(st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), min_size=n, max_size=n)), dtype="int64"),
        "u64": pd.Series(data.draw(st.lists(st.integers(0, 2 ** 64 - 1), min_size=n, max_size=n)), dtype="uint64"),
        "i32": pd.Series(data.draw(st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), min_size=n, max_size=n)), dtype="int32"),
        "flag": pd.Series(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool),
        "f64": pd.Series(data.draw(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=n, max_size=n)),
                         dtype="float64"),
        "f32": pd.Series(data.draw(st.lists(st.floats(width=32, allow_nan=True), min_size=n, max_size=n)),
                         dtype="float32"),
        "nullable": pd.array(data.draw(st.lists(st.one_of(st.none(), st.integers(-9, 9), st.integers(-2 ** 63, 2 ** 63 - 1)),
                                                min_size=n, max_size=n)),
                             dtype="Int64"),
        "cat": pd.Categorical(data.draw(st.lists(st.sampled_from(["a", "b\"", "ü", None]), min_size=n, max_size=n))),
        "int_cat": pd.Categorical(data.draw(st.lists(st.sampled_from([3, -1, None]), min_size=n, max_size=n))),
        "nbool": pd.array(data.draw(st.lists(st.one_of(st.none(), st.booleans()), min_size=n, max_size=n)),
                          dtype="boolean"),
        "obj_text": pd.Series(data.draw(st.lists(st.one_of(st.none(), st.just(float("nan")), st.text(max_size=4),
                                                           st.sampled_from(["x", "\u2028"])), min_size=n, max_size=n)),
                              dtype=object),
        "text": pd.array(data.draw(st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=n, max_size=n)),
                         dtype="string"),
        "obj": pd.Series(data.draw(st.lists(json_cells, min_size=n, max_size=n)) + [np.int64(5)] * 0, dtype=object),
        "np_obj": pd.Series([np.int64(i) if i % 3 == 0 else np.float32(i / 2) if i % 3 == 1 else np.bool_(i % 2)
                             for i in range(n)], dtype=object),
        "collide": pd.Series([[1, 1.0, True, 0.0, -0.0, "1", False, 0][i % 8] for i in range(n)], dtype=object),
        "nan_obj": pd.Series([[float("nan"), np.float64("nan"), pd.NA, np.float32("nan"), 1.5][i % 5]
                              for i in range(n)], dtype=object),
        "all_missing": pd.Series([[None, float("nan"), np.float32("nan"), pd.NA, pd.NaT, np.float64("nan")][i % 6]
                                  for i in range(n)], dtype=object),
        "50% \"key\" é %s": pd.Series(range(n), dtype="int16"),
        7: pd.Series(range(n), dtype="int8"),                       # a key that is no string
        None: pd.Series([0.5] * n),
    }
    picked = data.draw(st.lists(st.sampled_from(list(columns)), unique=True, max_size=len(columns)))
    frame = pd.DataFrame({c: columns[c] for c in picked}, index=pd.RangeIndex(n))
    expected = [json.dumps(r, default=outputs._plain) for r in outputs.records(frame)]
    assert _row_lines(frame) == expected
    assert json_rows.json_text(frame, outputs._plain, ",\n  ") == ",\n  ".join(expected)


@pytest.mark.parametrize("name", ["h200_4proc_eager", "sglang_server"])
def test_json_lines_on_real_exports_equal_json_dumps(name):
    """Every table of a real trace's --json (the SGLang server's decode summary holds dicts), both
    ways, equal text."""
    import pandas as pd

    from analyze.render import json_rows, outputs

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real" / f"{name}.sqlite"
    result = shared_loads.load(str(path))
    checked = nested = 0
    for table, frame in outputs._json_parts(result):
        if not isinstance(frame, pd.DataFrame):
            continue
        nested += sum(isinstance(v, (dict, list)) for c in frame.columns if frame[c].dtype == object for v in frame[c])
        expected = [json.dumps(r, default=outputs._plain) for r in outputs.records(frame)]
        assert _row_lines(frame) == expected, table
        assert json_rows.json_text(frame, outputs._plain, ",\n  ") == ",\n  ".join(expected), table
        checked += len(frame)
    assert checked > 200 and nested >= 1
