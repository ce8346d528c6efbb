"""Property tests: on any generated trace, per rank, the phases' exclusive GPU time plus the
unattributed time equals the busy time, and both equal the generator's exact answer."""
from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings, strategies as st

import analyze
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
