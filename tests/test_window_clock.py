"""The decode cycles' clock before profiling starts (nvtx_annotate/clock.py, the ``clock`` mark): periods from
one decode cycle's start to the next's, tokens from the cycle's accept mark, by batch size; a prefill between
two decode cycles drops the period; the shim writes the marks when profiling starts and stops the clock."""
from nvtx_annotate import _nvtx, clock as C, protocol as P, wrappers as W


def test_periods_pair_with_tokens_whichever_comes_first():
    c = C.WindowClock()
    c.decode(1, 1_000_000)
    c.accepted(1, 5, 3)              # v1: inside the cycle, before the next starts
    c.decode(2, 4_300_000)           # cycle 1: 3.3 ms, 8 tokens
    c.decode(3, 7_500_000)           # cycle 2's period known before its accept mark (v2)
    c.accepted(2, 2, 3)              # cycle 2: 3.2 ms, 5 tokens
    assert c.buckets() == [(3, 0, [3300, 3200], [8, 5], [])]
    assert list(c._open) == [3]      # cycle 3 waits for its successor and its mark


def test_a_prefill_drops_the_period_before_it_and_the_one_after_it():
    c = C.WindowClock()
    c.decode(1, 0)
    c.accepted(1, 1, 1)
    c.gap()                          # a prefill ran: cycle 1's period would hold it
    c.decode(2, 9_000_000)           # the overlap scheduler resolves the prefill's result in this cycle: not kept
    c.accepted(2, 0, 2)
    c.decode(3, 14_000_000)
    c.accepted(3, 1, 2)
    c.decode(4, 17_000_000)
    assert c.buckets() == [(2, 0, [3000], [3], [])]   # no round gap: cycle 1 had requests


def test_buckets_keep_the_last_cycles_of_the_largest_sizes():
    c = C.WindowClock()
    t, k = 0, 0
    for m, n in ((1, C.KEEP + 7), *((m, 3) for m in range(2, 12))):
        for i in range(n):
            k += 1
            c.decode(k, t)
            c.accepted(k, 0, m)
            t += 1000 * (m if m > 1 else i + 1)     # size 1: cycle i lasts i + 1 us
        c.gap()
    got = c.buckets()
    parts = C.KEEP // C.PART
    assert [(m, part, len(p)) for m, part, p, *_ in got[:parts]] == [(1, i, C.PART) for i in range(parts)]
    # of size 1's KEEP + 7 cycles (periods 1 .. KEEP + 7 us) the last (before the gap) is no cycle's, and the
    # oldest 6 of the rest went: the newest KEEP kept, oldest first
    kept = [p for _, _, periods, *_ in got[:parts] for p in periods]
    assert kept == list(range(7, C.KEEP + 7))
    assert [(m, len(p)) for m, _, p, *_ in got[parts:]] == [(m, 1) for m in range(2, 2 + C.MAX_SIZES - 1)]


def round_of(c, k, t, m, cycles, period=3_000_000, busy=2_500_000):
    """``cycles`` decode cycles of ``m`` requests from cycle ``k`` at ``t`` (each ``busy`` ns of ``period``), then the
    overlap scheduler's empty cycle (the batch done); returns the next cycle number and time."""
    for i in range(cycles):
        c.decode(k, t)
        if i:
            c.accepted(k - 1, m, m)          # v2: the previous cycle's accept mark, resolved in this one
        c.end(k, t + busy)
        k, t = k + 1, t + period
    c.decode(k, t)                           # the empty cycle: the last one's mark, then its own (none left)
    c.accepted(k - 1, m, m)
    c.end(k, t + 100_000)
    c.accepted(k, 0, 0)
    return k + 1, t + period


def test_a_rounds_gap_is_from_the_last_busy_cycles_end_to_the_next_rounds_start():
    """As analyze's rounds.lockstep_rounds measures it on a profile: the end of the last decode cycle with requests
    before a round to the start of the round's first cycle, where the decode cycle before that one had none. Rounds
    of 4 requests: the first round has no gap before it (nothing before), the next two 20 and 30 ms; a prefill
    inside a running batch (the cycle before had requests) is no round's gap."""
    c = C.WindowClock()
    k, t = round_of(c, 1, 0, 4, 10)
    for pause in (20_000_000, 30_000_000):
        last_busy_end = t - 2 * 3_000_000 + 2_500_000     # the round's last busy cycle ended there
        c.gap()
        start = last_busy_end + pause
        k, t = round_of(c, k, start, 4, 10)
    assert list(c.gaps) == [4] and list(c.gaps[4]) == [20_000_000, 30_000_000]
    # a prefill while requests run (a new request joins): the decode cycle before had requests, no gap recorded
    c.decode(k, t)
    c.end(k, t + 2_500_000)
    c.accepted(k, 4, 4)
    c.gap()
    c.decode(k + 1, t + 9_000_000)
    c.accepted(k + 1, 5, 5)
    assert 5 not in c.gaps and list(c.gaps[4]) == [20_000_000, 30_000_000]
    # on the batch size's part 0 only, in us; the mark round-trips
    parts = [b for b in c.buckets() if b[0] == 4]
    assert parts[0][4] == [20000, 30000] and all(not b[4] for b in parts[1:])
    text = P.clock_mark(*parts[0])
    assert text.endswith(" gap_us=20000,30000") and P.parse_clock_mark(text).gaps_us == (20000, 30000)


def test_a_clock_mark_without_gaps_is_as_before():
    text = P.clock_mark(16, 2, (3312, 3298), (52, 49))
    assert text == "clock reqs=16 part=2 period_us=3312,3298 tokens=52,49"
    assert P.parse_clock_mark(text) == P.ClockMark(16, 2, (3312, 3298), (52, 49)) and P.parse_clock_mark(text).gaps_us == ()
    assert P.parse_clock_mark(text + " gap_us=") is None and P.parse_clock_mark(text + " gap_us=3,x") is None
    assert P.parse_clock_mark(text + f" gap_us={2 ** 31}") is None


def test_through_the_shims_cycle_wrapper(monkeypatch):
    """The decode-cycle wrapper feeds the clock: decode cycles start periods, a prefill batch (SGLang's
    forward_mode.is_extend()) drops the periods on both sides of it, the cycle number tagged on the result ties the
    accept mark (emitted after the next cycle started, as SGLang's v2 resolver does) to its period."""
    from types import SimpleNamespace

    from nvtx_annotate.targets import CYCLE, Target

    rec = _nvtx.RecordingBackend()
    monkeypatch.setattr(_nvtx, "_backend", rec)
    monkeypatch.setattr(W, "_clock", C.WindowClock())
    monkeypatch.setitem(W._rank, "clock", ())
    # a decode cycle reads the clock at its start and at its end (the round gaps'); a prefill does not
    clock_ns = iter([0, 2_000_000, 3_000_000, 5_000_000, 6_100_000, 8_000_000, 20_000_000, 22_000_000, 30_000_000,
                     32_000_000, 33_200_000, 35_000_000, 36_000_000, 38_000_000])
    monkeypatch.setattr(W, "perf_counter_ns", lambda: next(clock_ns))

    class Worker:
        def forward_batch_generation(self, batch):
            return SimpleNamespace()

    fwd = W.make_wrapper(Worker.forward_batch_generation,
                         Target("decode_cycle", P.DECODE_CYCLE, "x", "Worker.forward_batch_generation", CYCLE), True)
    w = Worker()
    decode = SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: False))
    prefill = SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: True))

    def accept(result, lens):
        assert W.emit_accept(lens, getattr(result, P.CYCLE_ATTR))

    r = [fwd(w, decode), fwd(w, decode)]           # t = 0, 3.0 ms
    accept(r[0], [1, 0])                           # cycle 1: 3.0 ms, 3 tokens
    r.append(fwd(w, decode))                       # t = 6.1 ms
    accept(r[1], [1, 1])                           # cycle 2: 3.1 ms, 4 tokens
    fwd(w, prefill)                                # cycle 3's period holds the prefill
    accept(r[2], [0, 0])
    r.append(fwd(w, decode))                       # t = 20 ms: cycle 4 resolves the prefill: not kept either
    r.append(fwd(w, decode))                       # t = 30 ms
    accept(r[3], [2, 2])
    r.append(fwd(w, decode))                       # t = 33.2 ms
    accept(r[4], [0, 1])                           # cycle 5: 3.2 ms, 3 tokens
    r.append(fwd(w, decode))                       # t = 36 ms
    assert W.stop_clock() == ("clock reqs=2 part=0 period_us=3000,3100,3200 tokens=3,4,3",)
    fwd(w, decode)                                 # the clock has stopped: nothing more is read
    assert W._clock is None


def test_mark_round_trip_and_refusals():
    text = P.clock_mark(16, 2, [3312, 3298], [52, 49])
    assert text == "clock reqs=16 part=2 period_us=3312,3298 tokens=52,49"
    assert P.parse_clock_mark(text) == P.ClockMark(16, 2, (3312, 3298), (52, 49))
    assert P.parse_clock_mark("clock reqs=1 part=0 period_us=1 tokens=1,2") is None     # unequal lists
    assert P.parse_clock_mark("clock reqs=0 part=0 period_us=1 tokens=1") is None
    assert P.parse_clock_mark("clock reqs=1 period_us=1 tokens=1") is None               # no part
    assert P.parse_clock_mark("accept_len=3 reqs=1") is None


def test_the_shim_writes_the_marks_when_profiling_starts_and_stops_the_clock(monkeypatch):
    rec = _nvtx.RecordingBackend()
    monkeypatch.setattr(_nvtx, "_backend", rec)
    monkeypatch.setattr(W, "_clock", C.WindowClock())
    monkeypatch.setitem(W._rank, "clock", ())
    monkeypatch.setitem(W._rank, "mark", "rank=0 world=1 device=0")
    monkeypatch.setitem(W._rank, "refresh", 0)
    for k, t in ((1, 0), (2, 3_000_000), (3, 6_100_000)):
        W._clock.decode(k, t)
        assert W.emit_accept([1, 0], k)
    W.refresh_rank_mark()
    marks = [e[1] for e in rec.events if e[0] == "mark"]
    assert "clock reqs=2 part=0 period_us=3000,3100 tokens=3,3" in marks
    assert W._clock is None and W._rank["refresh"] == W.RANK_REFRESH_CALLS
    W.emit_accept([1, 1], 4)                 # inside the window: nothing more is kept
    W.refresh_rank_mark()                    # a second start: the same marks again
    assert [e[1] for e in rec.events if e[0] == "mark"].count("clock reqs=2 part=0 period_us=3000,3100 tokens=3,3") == 2


# ------------------------------------------------------------------------------------------- the analyzer's side

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from analyze.ranks.identify import clock_marks  # noqa: E402
from analyze.tools import sides as S  # noqa: E402
from analyze.tools.whatif.command import CLOCK_MIN_CYCLES, clock_calibration  # noqa: E402
from helpers import shared_loads  # noqa: E402


def _side(clock, requests=(16,) * 30):
    cycles = pd.DataFrame({"rank": 0, "cycle": range(1, len(requests) + 1), "period_ns": 4_000_000,
                           "requests": pd.array(requests, dtype="Int64"), "tokens": pd.array([24] * len(requests),
                                                                                                 dtype="Int64")})
    return S.Side("p.sqlite", cycles, pd.DataFrame(), [], clock=tuple(clock))


def test_marks_per_process_each_text_once_in_order():
    a = P.clock_mark(16, 0, [3000, 3100], [24, 23])
    b = P.clock_mark(16, 1, [3200], [25])
    marks = pd.DataFrame({"global_pid": [7, 7, 7, 7, 9], "text": [a, "rank=0 world=1 device=0", b, a, "accept_len=1"],
                          "time_ns": [500, 400, 510, 900, 100]})
    got = clock_marks(marks)
    assert list(got) == [7] and [m.part for m in got[7][0]] == [0, 1] and got[7][1] == 500


def test_tokens_per_s_over_the_steady_cycles_of_the_batch_size():
    """Parts joined in order; the first cycle and a period over 5x the median (a stall) left out, as whatif
    leaves them out of a profile: 23 tokens over 3,000 us each -> 7,666.7 tokens/s."""
    periods = [9000] + [3000] * 40 + [40_000] + [3000] * 30
    clock = [P.ClockMark(16, 1, tuple(periods[50:]), (23,) * len(periods[50:])),
             P.ClockMark(16, 0, tuple(periods[:50]), (23,) * 50),
             P.ClockMark(1, 0, (2000,) * 40, (2,) * 40)]
    got = S.clock_tokens_per_s(_side(clock), 16)
    assert got["cycles"] == 70 and got["tokens_per_s"] == pytest.approx(23 / 3000e-6)
    assert S.clock_tokens_per_s(_side(clock), 1)["tokens_per_s"] == pytest.approx(1000.0)
    assert S.clock_tokens_per_s(_side(clock), 4) is None
    assert S.clock_tokens_per_s(_side(()), 16) is None


def test_a_clock_written_after_profiled_cycles_is_no_unprofiled_clock():
    """nsys collecting before SGLang's profiler started (--capture all, a manual /start_profile): the report holds
    decode cycles of the process that started before its clock marks, which then ran under the profiler."""
    clock = [P.ClockMark(16, 0, (3000,) * 140, (23,) * 140)]
    side = _side(clock)
    side.cycles["cpu_start_ns"] = [10_000 * i for i in range(1, len(side.cycles) + 1)]
    after = S.Side(side.label, side.cycles, side.kernels, [], clock=tuple(clock), clock_at_ns=5_000, clock_rank=0)
    before = S.Side(side.label, side.cycles, side.kernels, [], clock=tuple(clock), clock_at_ns=50_000, clock_rank=0)
    assert S.clock_unprofiled(after) and not S.clock_unprofiled(before)
    assert clock_calibration([after], None, None, 16)[1] is not None
    assert clock_calibration([before], None, None, 16)[1] is None


def test_whatif_calibrates_from_the_clock_only_where_it_can():
    clock = [P.ClockMark(16, 0, (3000,) * 140, (23,) * 140)]
    k, x, src, batch = clock_calibration([_side(clock)], [3], None, None)    # the profile's one batch size
    assert (k, batch, src["kind"], src["cycles"]) == (3, 16, "profile_clock", 139)
    assert x == pytest.approx(23 / 3000e-6)
    assert clock_calibration([_side(clock)], None, None, 1)[1] is None              # no clock at batch 1
    assert clock_calibration([_side(clock), _side(clock)], None, None, 16)[1] is None   # several profiles
    mixed = _side(clock, requests=(16,) * 30 + (8,) * 30)
    assert clock_calibration([mixed], None, None, None)[1] is None                  # two batch sizes: no guess
    # a second size in 20+ cycles but under 10% of them is no size the load visits (per_batch.visited_batches, the
    # rule advise and whatif's modelled batch use): the one visited size is calibrated (before: no guess)
    tail = _side(clock, requests=(16,) * 300 + (8,) * 25)
    assert clock_calibration([tail], [3], None, None)[3] == 16
    assert clock_calibration([tail], [3], None, None)[1] == pytest.approx(23 / 3000e-6)
    few = [P.ClockMark(16, 0, (3000,) * CLOCK_MIN_CYCLES, (23,) * CLOCK_MIN_CYCLES)]
    assert clock_calibration([_side(few)], None, None, 16)[1] is None               # its first cycle is left out


def test_a_failing_clock_never_breaks_the_cycle_or_the_rank_mark(monkeypatch):
    """The clock's own error is counted as a fault (reported once); the cycle's range, its accept mark and the rank
    mark at profiling start are written all the same."""
    from types import SimpleNamespace

    from nvtx_annotate.targets import CYCLE, Target

    class Broken:
        def decode(self, *a):
            raise RuntimeError("decode")

        def accepted(self, *a):
            raise RuntimeError("accepted")

        def end(self, *a):
            raise RuntimeError("end")

        def gap(self):
            pass

        def buckets(self):
            raise RuntimeError("buckets")

    rec = _nvtx.RecordingBackend()
    monkeypatch.setattr(_nvtx, "_backend", rec)
    W.reset_for_tests()
    monkeypatch.setattr(W, "_clock", Broken())
    monkeypatch.setitem(W._rank, "mark", "rank=0 world=1 device=0")

    class Worker:
        def forward_batch_generation(self, batch):
            return SimpleNamespace()

    fwd = W.make_wrapper(Worker.forward_batch_generation,
                         Target("decode_cycle", P.DECODE_CYCLE, "x", "Worker.forward_batch_generation", CYCLE), True)
    out = fwd(Worker(), SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: False)))
    assert W.emit_accept([1], getattr(out, P.CYCLE_ATTR))
    W.refresh_rank_mark()
    assert [e[1] for e in rec.events if e[0] == "push"] == ["decode_cycle"]
    assert [e[1] for e in rec.events if e[0] == "mark"] == ["accept_len=1 reqs=1 cycle=1 lens=1",
                                                           "rank=0 world=1 device=0"]
    # the cycle's start and its end each failed in the clock
    assert W.faults() == {"x.Worker.forward_batch_generation (clock)": 2, "clock (accept)": 1, "clock (marks)": 1}
    W.reset_for_tests()


def test_whatif_takes_the_clocks_round_gap_as_it_is():
    """A profile whose clock carries round gaps (shims from 2026-12-07): calibrated from that clock, whatif spreads
    the clock's median gap (measured without the profiler) over each round's cycles as it is, where before it took
    the profile's own gap (33.5 ms at batch 32 under nsys) scaled by the calibrated / profiled cycle (x0.883). The
    real 48-layer profile (its clock has no gaps: an older shim's) with gaps of 20, 22 and 24 ms put into its batch-32
    clock mark."""
    import dataclasses
    from pathlib import Path

    from analyze.tools.whatif import model as WM

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_h100_v2_l48_s3.sqlite"
    if not path.exists():
        pytest.skip("sglang_h100_v2_l48_s3.sqlite not unpacked")
    side = shared_loads.load_side(path)
    assert not any(m.gaps_us for m in side.clock)
    assert clock_calibration([side], [3], None, 32)[2].get("round_gap_ns") is None
    gapped = dataclasses.replace(side, clock=tuple(m._replace(gaps_us=(20_000, 24_000, 22_000))
                                                   if (m.requests, m.part) == (32, 0) else m for m in side.clock))
    k, x, src, batch = clock_calibration([gapped], [3], None, 32)
    assert (k, batch, src["round_gap_ns"], src["round_gaps"]) == (3, 32, 22e6, 3)
    assert S.clock_round_gap_ns(gapped, 8) is None
    runs = {}
    for name, s in (("profiled gap", side), ("clock gap", gapped)):
        k, x, src, _ = clock_calibration([s], [3], None, 32)
        runs[name] = WM.whatif(s, range(1, 7), n_boot=0, batch=32, calibrate_tps=x, calibrate_steps=k,
                               calibration_source=src)
    old, new = runs["profiled gap"], runs["clock gap"]
    assert old["rounds"]["round_gap_ns"] == pytest.approx(33.5e6, rel=0.01) and "round_gap_source" not in old["rounds"]
    assert new["rounds"]["round_gap_ns"] == 22e6 and new["rounds"]["round_gap_source"] == "profile_clock"
    assert new["rounds"]["round_gap_profiled_ns"] == old["rounds"]["round_gap_ns"]
    po, pn = old["predictions"], new["predictions"]
    # the same calibrated cycles (a steady clock leaves the gap out of the calibration), the gap's share a cycle
    # 22 ms / (33.5 ms x 0.883) of before at every step count
    assert np.allclose(po["cycle_ns"], pn["cycle_ns"])
    ratio = pn["round_gap_ns"] / po["round_gap_ns"]
    assert np.allclose(ratio, ratio.iloc[0]) and ratio.iloc[0] == pytest.approx(22e6 / (33.5e6 * 0.883), rel=0.01)
    assert (pn["tokens_per_s"] > po["tokens_per_s"]).all()
    text = WM.rounds_text(new["rounds"])
    assert "without the profiler" in text and "22.0 ms" in text
