"""One protocol (nvtx_annotate/protocol.py) for the shim, the analyzer and the synthetic generator:
they must agree, and the analyzer must tie every accept mark to its cycle."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

import analyze
from analyze.timeline import cycles as acycles
from analyze.attribute import phases as aphases
from analyze.ranks import identify as aranks
from fixtures import synth
from fixtures.synth import TraceSpec, write_trace
from nvtx_annotate import _nvtx, protocol as P, wrappers
from nvtx_annotate.targets import TARGETS


def test_shim_analyzer_and_generator_share_one_protocol():
    # every range the shim emits feeds a default phase or delimits a cycle, with the protocol's names
    by_phase = {p.name: set(p.ranges) for p in aphases.DEFAULT_PHASES}
    for phase, ranges in P.PHASE_RANGES.items():
        assert set(ranges) <= by_phase[phase], phase
    assert [p.name for p in aphases.DEFAULT_PHASES] == list(P.PHASE_RANGES)
    assert aphases.CYCLE_RANGES == P.CYCLE_RANGES
    emitted = {t.range_name for t in TARGETS if t.range_name} | {P.PREFILL}
    fed = set().union(*by_phase.values()) | set(P.CYCLE_RANGES)
    assert emitted <= fed and emitted <= set(P.RANGE_NAMES)
    # the analyzer parses with the protocol's own expressions
    assert acycles.ACCEPT_MARK is P.ACCEPT_MARK_RE and aranks.RANK_MARK is P.RANK_MARK_RE
    # the generator writes the protocol's domain, names and mark formats, its truth has the same phases
    assert [p[0] for p in synth.DEFAULT_PHASES] == list(P.PHASE_RANGES)
    for name, ranges, _ in synth.DEFAULT_PHASES:
        assert set(P.PHASE_RANGES[name]) & set(ranges)
    assert _nvtx.DOMAIN == P.DOMAIN == "sglang"


def test_marks_round_trip():
    text, payload = P.accept_mark([3, 0, 12, 1], cycle=7)
    assert (text, payload) == ("accept_len=16 reqs=4 cycle=7 lens=3,0,12,1", 16)
    assert P.parse_accept_mark(text) == P.AcceptMark(16, 4, 7, (3, 0, 12, 1))
    assert P.parse_accept_mark("accept_len=16 reqs=4 lens=3,0,12,1") == P.AcceptMark(16, 4, None, (3, 0, 12, 1))
    assert P.parse_accept_mark("accept_len=5") == P.AcceptMark(5, None, None, None)
    assert P.accept_mark([1] * 65)[0] == "accept_len=65 reqs=65"  # no lens above 64 requests
    assert P.accept_mark(list(range(64)))[0].endswith(",63")
    assert P.accept_mark([]) == ("accept_len=0 reqs=0", 0)
    assert P.parse_accept_mark("rank=1 world=2") is None
    assert P.rank_mark(3, 8, "cuda:3") == "rank=3 world=8 device=3"
    assert P.parse_rank_mark("rank=3 world=8 device=3") == P.RankMark(3, 8, "3")
    assert P.parse_rank_mark(P.rank_mark(0, 1, "cpu")) == P.RankMark(0, 1, "cpu")
    # the analyzer's regexes read the same fields
    m = acycles.ACCEPT_MARK.search(text)
    assert (m["n"], m["reqs"], m["cycle"], m["lens"]) == ("16", "4", "7", "3,0,12,1")


def test_shim_emits_protocol_marks():
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    try:
        wrappers.reset_for_tests()
        assert wrappers.emit_accept([2, 0, 3], 12)
        assert not wrappers.emit_accept("not lengths", 12) and not wrappers.emit_accept([1, "x"], 12)
        wrappers.emit_rank_mark(1, 4, "cuda:1")
    finally:
        _nvtx.set_backend(prev)
        wrappers.reset_for_tests()
    assert rec.marks() == [(P.accept_mark([2, 0, 3], 12)[0], 5), (P.rank_mark(1, 4, 1), None)]


def _cycles(paths):
    a = analyze.load([str(p) for p in paths])
    return a.cycles.sort_values(["rank", "cycle"]).groupby("rank")["accepted_tokens"].apply(list).to_dict()


ACC = [[1, 2, 3, 0, 4, 2], [2, 2, 2, 1, 1, 1]]


@pytest.mark.parametrize("first", [1, 101])
def test_cycle_numbered_marks_after_the_cycle_match_their_cycle(tmp_path, first):
    """v2 / overlap scheduler: the accept mark of cycle k is emitted after cycle k+1's range closed
    (`accept_len=N cycle=K`, K = the decode_cycle's payload). The analyzer ties each to its cycle;
    with first=101 the window opened mid-run, and the mark of cycle 100 (before the window) in the
    trace belongs to no cycle."""
    spec = TraceSpec(ranks=2, cycles=6, accept_after_cycle=True, first_cycle_number=first, accept_lengths=ACC)
    paths, truth = write_trace(spec, tmp_path / "t")
    assert _cycles(paths) == {0: ACC[0], 1: ACC[1]}
    assert [[c["accepted_tokens"] for c in r["cycles"]] for r in truth["ranks"]] == ACC
    con = sqlite3.connect(paths[0])
    texts = [t for (t,) in con.execute("SELECT text FROM NVTX_EVENTS WHERE eventType = 34 AND text LIKE 'accept%'")]
    payloads = [v for (v,) in con.execute("SELECT int64Value FROM NVTX_EVENTS WHERE eventType = 59 AND text IS NULL "
                                          "AND int64Value IS NOT NULL")]
    assert f"accept_len=1 cycle={first}" in texts
    assert sorted(set(payloads)) == list(range(first, first + 6))
    if first > 1:
        assert f"accept_len=99 cycle={first - 1}" in texts


def test_without_cycle_numbers_the_late_marks_match_nothing(tmp_path):
    """The same trace with `cycle=K` stripped from the marks: they lie between cycle ranges, so
    containment ties none of them (what happened on real SGLang before the protocol had K)."""
    paths, _ = write_trace(TraceSpec(ranks=1, cycles=5, accept_after_cycle=True, accept_lengths=[ACC[0][:5]]),
                           tmp_path / "t")
    con = sqlite3.connect(paths[0])
    con.execute("UPDATE NVTX_EVENTS SET text = substr(text, 1, instr(text, ' cycle=') - 1) "
                "WHERE text LIKE 'accept_len=% cycle=%'")
    con.commit()
    con.close()
    got = _cycles(paths)[0]
    assert len(got) == 5 and all(pd.isna(v) for v in got), got


def test_contained_marks_still_match_old_traces(tmp_path):
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=6, accept_lengths=ACC), tmp_path / "t")
    assert _cycles(paths) == {0: ACC[0], 1: ACC[1]}
