"""What the shim costs, logged by the shim (issue 43: the timing mode says its own overhead): every
wrapper adds its own host time (all of a wrapped call but the call) to the timer's ``own_ns``, the CUDA
graph hook its time less the launch; each row carries its cycle's own (``shim_ns``: from the previous cycle's
end to its end, none over an idle gap); the sink's thread its CPU time (``sink_ns``, on the next drain's first
row); the log holds both and the analyzer's reader reads them; analyze-trace's timing_cost reads the cost."""

from __future__ import annotations

import sys

import pyarrow.parquet as pq
import pytest

from nvtx_annotate import _nvtx, wrappers
from nvtx_annotate import protocol as P
from nvtx_annotate.live import events as E
from nvtx_annotate.live.log import LOG_FIELDS, LogWriter
from nvtx_annotate.live.sink import Sink
from analyze.read import live_log

from test_live_timing import Gpu, fake_sglang, make_timer, run_cycle, _drive, _timed_install  # noqa: F401


class Ticks:
    """A clock the test moves: ``advance(ns)``; each reading costs nothing."""

    def __init__(self):
        self.now = 0

    def __call__(self):
        return self.now

    def advance(self, ns):
        self.now += ns


class Own:
    """What the wrappers charge (the timer's ``own_clock`` and ``charge``), by place too."""

    pass_ranges = False     # no cycle without events open (the timer's flag the range wrappers read first)

    def __init__(self, clock):
        self.own_clock, self.own_ns, self.places = clock, 0, {}
        self.own_detail = self.places       # by place: the wrappers call charge() (the timer's detail mode)

    def charge(self, place, ns):
        self.own_ns += ns
        self.places[place] = self.places.get(place, 0) + ns


class SlowBackend:
    """An active NVTX backend whose push and pop take ``ns`` each on ``clock``."""

    active = True
    name = "slow"

    def __init__(self, clock, ns):
        self.clock, self.ns, self.calls = clock, ns, []

    def push(self, name, payload=None):
        self.clock.advance(self.ns)
        self.calls.append(("push", name))

    def pop(self):
        self.clock.advance(self.ns)
        self.calls.append(("pop",))


def _with(monkeypatch, backend, own):
    monkeypatch.setattr(_nvtx, "_backend", backend)
    monkeypatch.setattr(wrappers, "own_time", own)


def test_a_range_wrapper_charges_its_push_and_pop_not_the_wrapped_call(monkeypatch):
    clock = Ticks()
    own = Own(clock)
    _with(monkeypatch, SlowBackend(clock, 700), own)
    monkeypatch.setattr(wrappers.guard, "skip", lambda: False)

    def forward(x):
        clock.advance(1_000_000)           # the model's work: not the shim's
        return x + 1
    wrapped = wrappers._range_wrapper(forward, P.VERIFY, False, "verify")
    assert wrapped(1) == 2 and wrapped(2) == 3
    assert own.own_ns == 4 * 700           # two calls, a push and a pop each
    assert own.places == {"verify push": 1400, "verify pop": 1400}


def test_a_range_wrapper_charges_even_when_the_call_raises(monkeypatch):
    clock = Ticks()
    own = Own(clock)
    _with(monkeypatch, SlowBackend(clock, 300), own)
    monkeypatch.setattr(wrappers.guard, "skip", lambda: False)

    def boom():
        clock.advance(50_000)
        raise ValueError("x")
    wrapped = wrappers._range_wrapper(boom, P.DRAFT, False, "draft")
    try:
        wrapped()
    except ValueError:
        pass
    assert own.own_ns == 600


def test_a_hooked_wrapper_charges_its_enter_and_leave_hooks(monkeypatch):
    clock = Ticks()
    own = Own(clock)
    monkeypatch.setattr(wrappers, "own_time", own)

    def enter(args, kwargs):
        clock.advance(1_200)                  # e.g. the cycle's push and the prefill check
        return "state"

    def leave(state, args, kwargs, ret):
        clock.advance(2_500)                  # e.g. reading the accept lengths and the accept mark

    def fail(state):                          # pragma: no cover - not raised here
        clock.advance(1)
    hooks = wrappers.Hooks(enter, leave, fail)

    def cycle():
        clock.advance(3_000_000)
        return "done"
    assert wrappers._sync_wrapper(cycle, hooks, "cycle")() == "done"
    assert own.own_ns == 3_700 and own.places == {"cycle enter": 1_200, "cycle leave": 2_500}


def test_without_the_timing_mode_nothing_is_charged(monkeypatch):
    clock = Ticks()
    _with(monkeypatch, SlowBackend(clock, 700), None)
    monkeypatch.setattr(wrappers.guard, "skip", lambda: False)
    wrapped = wrappers._range_wrapper(lambda: clock.advance(10), P.VERIFY, False, "verify")
    wrapped()
    assert clock.now == 1_410                 # the call ran, nothing read the clock for the shim


def test_the_graph_hook_charges_its_own_time_less_the_launch():
    """Its two events (each made to take 300 ns of host time here) count; the launch (40 us) does not."""
    gpu = Gpu()
    clock = Ticks()
    t, rows = make_timer(gpu, accept_lag=0, own_clock=clock)
    t.push(P.DECODE_CYCLE, 1)
    t.push(P.VERIFY)
    record = t._record

    def slow_record(rec, key):
        clock.advance(300)
        return record(rec, key)
    t._record = slow_record

    def launch():
        clock.advance(40_000)
        gpu.launch(5, 400)
        return "ok"
    before = t.own_ns
    assert t.time_graph(launch) == "ok"
    assert t.own_ns - before == 600
    t.pop()
    t.pop()


def charged_cycle(t, gpu, k, ns, accept=(2, 1), between=0):
    """Cycle k with ``ns`` of the shim's time charged inside it, ``between`` more after its end."""
    t.push(P.DECODE_CYCLE, k)
    t.own_ns += ns
    t.push(P.VERIFY)
    gpu.run(400)
    t.pop()
    if accept is not None:
        t.accept(*accept, None)
    t.pop()
    t.own_ns += between


def test_each_row_carries_the_shims_time_from_the_previous_cycles_end_to_its_own():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.own_ns = 99_000                          # before the first cycle (start-up): no cycle's
    charged_cycle(t, gpu, 1, 1_234, between=56)
    charged_cycle(t, gpu, 2, 7)
    t.poll()
    assert [r["shim_ns"] for r in rows] == [1_234, 56 + 7]
    assert t.own_ns == 0


def test_a_timed_cycles_time_stays_on_its_row_when_the_row_is_made_cycles_later():
    """SGLang's overlap scheduler resolves a cycle's accept lengths after the next cycle ran, so its row is
    made one or two cycles later; the shim's time of each cycle stays on its own row (a timed cycle's events
    on the timed row, never on an untimed one)."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=4, sample_every=3)
    for k in range(1, 10):
        charged_cycle(t, gpu, k, 100_000 if k % 3 == 0 else 1_000, accept=None)
        if k >= 3:
            t.accept(2, 1, k - 2)               # the accept of two cycles back
    t.accept(2, 1, 8)
    t.accept(2, 1, 9)
    t.idle()
    assert [r["cycle"] for r in rows] == list(range(1, 10))
    assert [r["shim_ns"] for r in rows] == [100_000 if r["timed"] else 1_000 for r in rows]


def _gapped(gaps_ns, inside=40_000, between=50_000):
    """Cycles whose starts follow the previous cycle's end by ``gaps_ns``; the shim charged ``inside`` each
    cycle and ``between`` after each: the rows' shim_ns."""
    gpu = Gpu()
    clock = Ticks()
    rows = []
    t = E.Timer(rows.append, events=gpu.events(), clock=clock, accept_lag=0)
    for k, gap in enumerate(gaps_ns, start=1):
        clock.advance(gap)
        t.push(P.DECODE_CYCLE, k)
        t.own_ns += inside
        clock.advance(2_000_000)               # the decode-cycle range: part of the period only
        t.pop()
        t.own_ns += between
    t.poll(wait_accepts=False)
    return [r["shim_ns"] for r in rows]


def test_the_shims_time_between_cycles_counts_however_long_the_gaps_of_a_busy_server():
    """On real SGLang the gap from one decode-cycle range's end to the next one's start grows with the GPU work
    (7-12 ms at 128 layers): gaps of 21 ms, steady, keep the time charged between cycles on the next row."""
    assert _gapped([21_000_000] * 8) == [40_000] + [90_000] * 7      # the first: the start-up's time dropped


def test_the_shims_time_over_an_idle_gap_is_no_cycles():
    """A gap over 5x the running mean gap (and over 20 ms) is an idle server or a pause: the shim's time over it
    (e.g. the idle hook's polls) is put on no row; one under it is an ordinary, slower step."""
    assert _gapped([10_000_000] * 5 + [45_000_000, 10_000_000, 80_000_000, 10_000_000]) == \
        [40_000] + [90_000] * 5 + [90_000, 40_000, 90_000]
    assert _gapped([1_000_000] * 4 + [19_000_000, 1_000_000, 25_000_000]) == [40_000] + [90_000] * 4 + [90_000, 40_000]

def test_the_sink_puts_its_cpu_time_on_the_next_drains_first_row(tmp_path, monkeypatch):
    cpu = iter([0, 7_000, 7_000, 9_500, 9_500, 9_500])     # thread_time_ns at each drain's start and end
    monkeypatch.setattr("nvtx_annotate.live.sink.time.thread_time_ns", lambda: next(cpu))
    s = Sink(lambda: (None, None), threaded=False)
    s.add({"cycle": 1})
    s.add({"cycle": 2})
    assert s.drain() == 2                     # cost 7,000, carried by the next drain's first row
    first = s.pending_rows()
    s.add({"cycle": 3})
    s.add({"cycle": 4})
    handled = [dict(r) for r in s._rows]
    assert first == [] and handled == [{"cycle": 3}, {"cycle": 4}]
    rows = []
    monkeypatch.setattr(s, "outputs", lambda: (type("L", (), {"add": rows.append, "buffered": lambda self: 0,
                                                               "complete_if_old": lambda self: False})(), None))
    assert s.drain() == 2
    assert [(r["cycle"], r["sink_ns"]) for r in rows] == [(3, 7_000), (4, 0)]


def test_the_log_holds_shim_and_sink_time_and_the_reader_keeps_them(tmp_path):
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.rank, t.spec = 0, P.SpecConfig("EAGLE", 2, 1, 3, 1, True, 8)
    for k in range(1, 4):
        charged_cycle(t, gpu, k, 1000 * k)
        t.poll()
    for r, sink in zip(rows, (500, 0, 0)):
        r["sink_ns"] = sink
    w = LogWriter(str(tmp_path), 0, 1)
    for r in rows:
        w.add(r)
    w.close()
    f = next(tmp_path.glob("*.parquet"))
    table = pq.read_table(f)
    assert table.schema.names == list(LOG_FIELDS) and LOG_FIELDS[-2:] == ("shim_ns", "sink_ns")
    cyc = live_log.live_cycles(f)
    assert cyc["shim_ns"].tolist() == [1000, 2000, 3000] and cyc["sink_ns"].tolist() == [500, 0, 0]


def test_through_the_wrappers_every_row_has_the_shims_own_time(fake_sglang, monkeypatch, tmp_path):
    """The fake SGLang worker driven with the timing mode on: every row carries a positive own time, the
    wrappers' and the timer's on the real clock, and the sum is the time charged."""
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 3)
    assert wrappers.own_time is state.timer
    _drive(name, gpu, 6, [2, 0, 3])
    state.timer.close()
    rows = state.sink.pending_rows()
    assert len(rows) == 6 and all(isinstance(r["shim_ns"], int) and r["shim_ns"] > 0 for r in rows)
    state.sink.close()


def test_the_shims_time_while_paused_is_on_no_row(tmp_path):
    """The overhead benchmark pauses the timing between rounds (SPECPROF_TIMING_PAUSE_FILE); the wrappers still
    charge meanwhile: that time belongs to no logged cycle. A pause is a gap without cycles like an idle server's
    (the timer's one rule, IDLE_GAP_FACTOR): the time over it is dropped when the next cycle starts."""
    rows = []
    now = [0.0]                                            # seconds, the tee's and (in ns) the timer's clock
    t = E.Timer(rows.append, events=None, accept_lag=0, clock=lambda: int(now[0] * 1e9))
    pause = tmp_path / "pause"
    tee = E.TeeBackend(_nvtx.RecordingBackend(), t, pause_file=str(pause), pause_check_s=0.05, clock=lambda: now[0])

    def cycle(k, ns):
        now[0] += 0.001                    # 1 ms from the previous cycle's end
        tee.push(P.DECODE_CYCLE, k)
        t.own_ns += ns
        now[0] += 0.002
        tee.pop()
    for k in (1, 2, 3):
        cycle(k, 400)
    pause.touch()
    now[0] += 0.1
    cycle(4, 50_000)                       # paused: not timed; the wrappers' time meanwhile
    pause.unlink()
    now[0] += 1.0
    cycle(5, 700)                          # resumed: the paused time is dropped here
    t.poll(wait_accepts=False)
    assert [(r["cycle"], r["shim_ns"]) for r in rows] == [(1, 400), (2, 400), (3, 400), (5, 700)]


def test_own_detail_writes_the_shims_time_by_place(fake_sglang, monkeypatch, tmp_path):
    """SPECPROF_TIMING_OWN_DETAIL=1 (a diagnostic): the sink writes {place: [ns, calls]} beside the log, the
    places but the start-up's (before the first cycle: no cycle's) summing to what the rows carried."""
    import json

    monkeypatch.setenv("SPECPROF_TIMING_OWN_DETAIL", "1")
    monkeypatch.setattr(E, "IDLE_GAP_MIN_NS", 10**12)     # a loaded machine's pause between the fake's cycles
    monkeypatch.setattr(E, "IDLE_GAP_MAX_NS", 10**12)     # is no idle server
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 3)
    _drive(name, gpu, 6, [2, 0, 3])
    state.timer.close()
    carried = sum(r["shim_ns"] for r in state.sink.pending_rows()) + state.timer.own_ns
    state.sink.drain()
    files = list((tmp_path / "logs").glob("own_detail-r*-p*.json"))
    assert len(files) == 1
    detail = json.loads(files[0].read_text())
    assert sum(ns for place, (ns, _) in detail.items() if "__init__" not in place) == carried
    assert any(k.endswith(" enter") for k in detail) and any(k.endswith(" push") for k in detail)
    assert all(calls >= 1 for _, calls in detail.values())
    state.sink.close()


def _tee(inner_active: bool, sample: int = 17):
    rec = _nvtx.RecordingBackend()
    rec.active = inner_active
    rows = []
    t = E.Timer(rows.append, events=Gpu().events(), accept_lag=0, sample_every=sample)
    return E.TeeBackend(rec, t), t, rec, rows


def test_an_untimed_cycle_without_a_profiler_lets_the_range_wrappers_pass_through(monkeypatch):
    """Cycle 1 of a sampling of 1 in 17 records nothing inside it: the timer says so (pass_ranges) and a
    range wrapper calls the function without pushing anything; cycle 17 (timed) gets its ranges."""
    tee, t, rec, rows = _tee(inner_active=False)
    monkeypatch.setattr(_nvtx, "_backend", tee)
    monkeypatch.setattr(wrappers, "own_time", t)
    monkeypatch.setattr(wrappers.guard, "skip", lambda: False)
    pushed = []
    real_push = t.push
    monkeypatch.setattr(t, "push", lambda name, payload=None: (pushed.append(name), real_push(name, payload)))
    verify = wrappers._range_wrapper(lambda: "v", P.VERIFY, False, "verify")
    for k in (1, 17):
        tee.push(P.DECODE_CYCLE, k)
        assert t.pass_ranges == (k == 1)
        assert verify() == "v"
        tee.pop()
    assert not t.pass_ranges                            # between cycles: the next cycle's push gets through
    assert pushed == [P.DECODE_CYCLE, P.DECODE_CYCLE, P.VERIFY]
    t.poll(wait_accepts=False)
    assert [(r["cycle"], r["timed"], r["verify_ns"] is not None) for r in rows] == [(1, 0, False), (17, 1, True)]


def test_with_a_profiler_behind_the_tee_every_range_still_reaches_it(monkeypatch):
    tee, t, rec, rows = _tee(inner_active=True)
    monkeypatch.setattr(_nvtx, "_backend", tee)
    monkeypatch.setattr(wrappers, "own_time", t)
    monkeypatch.setattr(wrappers.guard, "skip", lambda: False)
    verify = wrappers._range_wrapper(lambda: "v", P.VERIFY, False, "verify")
    tee.push(P.DECODE_CYCLE, 1)                          # untimed, but nsys records the ranges
    assert t.in_untimed and not t.pass_ranges and verify() == "v"
    tee.pop()
    assert [e[1] for e in rec.events if e[0] == "push"] == [P.DECODE_CYCLE, P.VERIFY]


def test_the_graph_hook_passes_an_untimed_cycles_launch_straight_through(monkeypatch):
    """torch's CUDAGraph.replay, hooked: in a cycle the sampling left without events the original is called
    directly (no closure, no timer call); in a timed one the timer times it."""
    class CUDAGraph:
        def replay(self):
            return "replayed"
    fake_torch = type(sys)("torch")
    fake_torch.cuda = type(sys)("torch.cuda")
    fake_torch.cuda.CUDAGraph = CUDAGraph
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, sample_every=17)
    calls = []
    real = t.time_graph
    monkeypatch.setattr(t, "time_graph", lambda launch: (calls.append(1), real(launch))[1])
    assert E.hook_cuda_graphs(t)
    try:
        for k, timed in ((1, False), (17, True)):
            t.push(P.DECODE_CYCLE, k)
            t.push(P.VERIFY)
            assert CUDAGraph().replay() == "replayed"
            t.pop()
            t.pop()
            assert len(calls) == int(timed)
    finally:
        E.unhook_cuda_graphs()


def _cycle_table(n=401, every=4, untimed_ns=1_000_000, timed_ns=1_200_000, shim=(10_000, 30_000), sink_every=10,
                 sink=5_000, requests=16, jitter=0):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    k = np.arange(1, n + 1)
    timed = k % every == 0
    period = np.where(timed, timed_ns, untimed_ns) + (rng.integers(-jitter, jitter + 1, n) if jitter else 0)
    return pd.DataFrame({"rank": 0, "cycle": k, "requests": requests, "period_ns": period, "timed": timed,
                         "shim_ns": np.where(timed, shim[1], shim[0]),
                         "sink_ns": np.where(k % sink_every == 0, sink, 0)})


def test_the_cost_table_adds_the_shims_time_the_events_share_and_the_sinks_time():
    """Known answer: every 4th cycle timed and 200 us longer, the shim 10 us an untimed cycle (30 us a timed
    one: in the 200 us already), the sink 5 us every 10th row. The first cycle is warm-up."""
    import pytest
    from analyze.timeline import own_cost

    t = own_cost.cost_table(_cycle_table())
    assert len(t) == 1
    r = t.iloc[0]
    steady_k = list(range(2, 402))
    n_t = sum(1 for k in steady_k if k % 4 == 0)
    mean_period = (n_t * 1_200_000 + (400 - n_t) * 1_000_000) / 400
    sink_mean = 5_000 * sum(1 for k in steady_k if k % 10 == 0) / 400
    cost = 10_000 + n_t / 400 * 200_000 + sink_mean
    assert (r["cycles"], r["timed_cycles"], r["requests"]) == (400, n_t, 16)
    assert (r["timed_extra_ns"], r["timed_extra_ci_ns"], r["shim_ns"]) == (200_000, 0, 10_000)
    assert r["sink_ns"] == round(sink_mean) and r["cost_ns"] == round(cost)
    assert r["cost_pct"] == pytest.approx(100 * cost / mean_period)
    assert r["basis"] == own_cost.ALL and r["period_ns"] == round(mean_period)


def test_the_cost_tables_interval_covers_the_events_noise():
    """Periods jittered +-50 us: the timed cycles' extra comes with a 95% half-width, and the cost's interval
    holds the true cost (200 us extra at 1 in 4, the shim's 10 us, the sink's 0.5 us a cycle)."""
    from analyze.timeline import own_cost

    r = own_cost.cost_table(_cycle_table(n=4001, jitter=50_000)).iloc[0]
    assert 0 < r["timed_extra_ci_ns"] < 10_000
    true = 100 * (10_000 + 0.25 * 200_000 + 500) / (0.25 * 1_200_000 + 0.75 * 1_000_000)
    assert r["cost_pct_low"] <= true <= r["cost_pct_high"]


def test_a_log_without_shim_time_gives_the_events_part_and_one_without_untimed_cycles_the_host_part():
    from analyze.timeline import own_cost

    old = _cycle_table().drop(columns=["shim_ns", "sink_ns"])
    r = own_cost.cost_table(old).iloc[0]
    assert r["basis"] == own_cost.EVENTS_ONLY and r["shim_ns"] is pd_na() and r["cost_ns"] == round(
        r["timed_cycles"] / r["cycles"] * 200_000)
    every = _cycle_table(every=1)
    r = own_cost.cost_table(every).iloc[0]
    assert r["basis"] == own_cost.HOST_ONLY and r["timed_extra_ns"] is pd_na() and r["shim_ns"] == 30_000


def test_an_nsys_cycle_table_has_no_cost_rows():
    import pandas as pd
    from analyze.timeline import own_cost

    assert own_cost.cost_table(pd.DataFrame({"rank": [0], "cycle": [1], "period_ns": [5]})).empty


def pd_na():
    import pandas as pd

    return pd.NA


def test_idle_polls_at_most_every_20_ms():
    """An idle SGLang 0.5.17 scheduler calls Scheduler.on_idle on every turn of its loop (86,074 calls in one
    benchmark's pauses): the timer polls on the first call and then not again until IDLE_POLL_NS have passed on
    its host clock."""
    gpu = Gpu()
    clock = Ticks()
    rows = []
    t = E.Timer(rows.append, events=gpu.events(), clock=clock, accept_lag=4)
    polls = []
    real = t.poll
    t.poll = lambda wait_accepts=True: (polls.append(wait_accepts), real(wait_accepts))[1]
    t.push(P.DECODE_CYCLE, 1)
    t.pop()                                   # one cycle pending (its accept may still come)
    polls.clear()
    clock.advance(E.IDLE_POLL_NS)
    assert t.idle() == 1 and polls == [False]         # resolved without waiting for the accept
    t.push(P.DECODE_CYCLE, 2)
    t.pop()
    polls.clear()
    for _ in range(11):
        clock.advance(E.IDLE_POLL_NS // 20)
        t.idle()
    assert polls == [] and t.pending() == 1
    clock.advance(E.IDLE_POLL_NS)
    assert t.idle() == 1 and polls == [False] and [r["cycle"] for r in rows] == [1, 2]


def test_prometheus_counts_the_shims_own_seconds_per_thread():
    import pytest

    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    registry = prom.CollectorRegistry()
    m = make_metrics(2, registry=registry)
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    for k in (1, 2, 3):
        charged_cycle(t, gpu, k, 40_000 * k)
        t.poll()
    for r, sink in zip(rows, (0, 9_000, None)):
        r["sink_ns"] = sink
        m.observe(r)
    text = prom.generate_latest(registry).decode()
    worker = next(x for x in text.splitlines() if x.startswith('specprof:shim_seconds_total{rank="2",thread="worker"}'))
    sink = next(x for x in text.splitlines() if x.startswith('specprof:shim_seconds_total{rank="2",thread="sink"}'))
    assert float(worker.split()[-1]) == pytest.approx(240_000e-9) and float(sink.split()[-1]) == pytest.approx(9e-6)


def test_a_drains_rows_at_once_give_the_exposition_of_one_observe_a_row():
    """LiveMetrics.observe_many (the sink: one increment a bucket touched a drain) exposes exactly what
    observe() of each row does: counts, buckets, sums, the tokens/s window."""
    import pytest

    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, sample_every=3)
    for k in range(1, 40):
        t.own_ns += 1000 * k
        run_cycle(t, gpu, k, draft=100 * k, verify=20_000 * k, accept=(k % 4, 2))
        t.poll()
    for i, r in enumerate(rows):
        r["sink_ns"] = 500 if i % 7 == 0 else 0
    texts = []
    for batched in (False, True):
        registry = prom.CollectorRegistry()
        m = make_metrics(0, registry=registry)
        if batched:
            m.observe_many(rows[:17])
            m.observe_many(rows[17:])
        else:
            for r in rows:
                m.observe(r)
        m.publish()
        samples = [x.rsplit(" ", 1) for x in prom.generate_latest(registry).decode().splitlines()
                   if x and not x.startswith("#") and "_created" not in x]
        texts.append({k: float(v) for k, v in samples})
    assert texts[0].keys() == texts[1].keys()
    for key, value in texts[0].items():              # a sum may differ in its last bit (the order of addition)
        assert texts[1][key] == pytest.approx(value, rel=1e-12, abs=0), key
    assert texts[1]['specprof:phase_seconds_bucket{le="0.25",phase="verify",rank="0"}'] == 13.0
    assert texts[1]['specprof:cycles_total{rank="0"}'] == len(rows)


def test_few_timed_cycles_widen_the_events_interval_by_students_t():
    """12 timed cycles: the half-width is t(11) = 2.201 standard errors, not 1.96 (Welch's standard error of the
    difference of the two means, by hand)."""
    import numpy as np
    from analyze.timeline import own_cost

    c = _cycle_table(n=241, every=20, jitter=40_000)
    r = own_cost.cost_table(c).iloc[0]
    steady = c.iloc[1:]
    t, u = steady.loc[steady["timed"], "period_ns"], steady.loc[~steady["timed"], "period_ns"]
    se = np.hypot(t.std(ddof=1) / np.sqrt(len(t)), u.std(ddof=1) / np.sqrt(len(u)))
    assert r["timed_cycles"] == len(t) == 12
    assert r["timed_extra_ns"] == round(t.mean() - u.mean())
    assert r["timed_extra_ci_ns"] == round(2.201 * se)


def test_a_cycle_dropped_by_the_ring_leaves_its_shim_time_to_the_next_row():
    """Ring overflow (the device never catches up): the dropped cycle's shim time is not lost, the next row
    carries it, so the rows (and specprof:shim_seconds_total) still sum to all the shim's time."""
    gpu = Gpu()
    gpu.done = False
    t, rows = make_timer(gpu, ring_size=2, accept_lag=0)
    for k in range(1, 5):
        charged_cycle(t, gpu, k, 1_000 * k)
    assert t.counters[E.DROP_RING_OVERFLOW] == 2 and t.own_ns == 2_000      # cycle 1's went on cycle 4's row
    gpu.done = True
    charged_cycle(t, gpu, 5, 5_000)
    t.poll()
    assert [r["cycle"] for r in rows] == [3, 4, 5]
    assert [r["shim_ns"] for r in rows] == [3_000, 4_000 + 1_000, 5_000 + 2_000]


def test_production_path_no_profiler_sampled_and_paused_loses_no_cycle(fake_sglang, monkeypatch, tmp_path):
    """The fake SGLang worker with no profiler behind the tee (production: ranges of untimed cycles pass
    straight through), events in one cycle of 3, the timing paused for a stretch and resumed: every cycle run
    while not paused comes out once, with its accept lengths, the timed ones with phase times; nothing stays on
    the timer's stacks; the shim's time of each row is an int > 0."""
    name, rec = fake_sglang
    rec.active = False                            # no nsys: the tee's inner backend records nothing
    pause = tmp_path / "pause"
    monkeypatch.setenv("SPECPROF_TIMING_PAUSE_FILE", str(pause))
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 3)
    now = [0.0]
    state.tee._clock = lambda: now[0]             # the pause file is looked at on the tee's clock
    assert not state.tee.records_marks
    _drive(name, gpu, 6, [2, 0, 3])
    pause.touch()
    now[0] += 1.0
    _drive(name, gpu, 4, [2, 0, 3])              # paused: not logged
    pause.unlink()
    now[0] += 1.0
    _drive(name, gpu, 6, [2, 0, 3])
    state.timer.close()
    rows = state.sink.pending_rows()
    cycles = [r["cycle"] for r in rows]
    assert cycles == list(range(1, 7)) + list(range(11, 17))
    assert all((r["accepted_tokens"], r["requests"], r["accept_lens"]) == (5, 3, "2,0,3") for r in rows)
    assert [r["timed"] for r in rows] == [int(k % 3 == 0) for k in cycles]
    assert all((r["verify_ns"] is not None) == bool(r["timed"]) for r in rows)
    assert all(isinstance(r["shim_ns"], int) and r["shim_ns"] > 0 for r in rows)
    assert state.timer._tls.stack == [] and not state.timer.in_untimed and state.tee._route() == []
    state.sink.close()


def test_observe_all_fills_a_histogram_as_prometheus_observe_of_each_value():
    """The batch path against prometheus_client's own Histogram.observe (the reference, now that the metrics'
    per-row observe is a batch of one): every bucket set, values on the bounds, 0, below and above them."""
    import pytest

    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live import metrics as M

    for buckets in (M.PHASE_BUCKETS, M.TOKEN_BUCKETS, M.ACCEPT_LENGTH_BUCKETS):
        values = [0, -1.0, 1e9, *buckets, *(b * 0.999 for b in buckets), *(b * 1.001 for b in buckets)]
        exposed = []
        for batched in (False, True):
            registry = prom.CollectorRegistry()
            h = prom.Histogram("h", "h", ["rank"], buckets=buckets, registry=registry).labels(rank="0")
            if batched:
                M.observe_all(h, values)
            else:
                for v in values:
                    h.observe(v)
            exposed.append({s.name + str(sorted(s.labels.items())): s.value for fam in registry.collect()
                            for s in fam.samples if not s.name.endswith("_created")})
        assert exposed[0].keys() == exposed[1].keys()
        for key, value in exposed[0].items():
            assert exposed[1][key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


def test_idle_charges_its_poll_only():
    """Timer.idle's own time counts when it polls (the rows it resolves), not the check that returns at once (each
    host clock reading there moves the own clock too: charged, it would show)."""
    gpu = Gpu()
    clock, own = Ticks(), Ticks()

    def host_clock():
        own.advance(50)
        return clock()
    t = E.Timer([].append, events=gpu.events(), clock=host_clock, own_clock=own, accept_lag=4)
    t.push(P.DECODE_CYCLE, 1)
    t.pop()
    t.own_ns = 0
    real = t.poll
    t.poll = lambda wait_accepts=True: (own.advance(900), real(wait_accepts))[1]
    clock.advance(E.IDLE_POLL_NS)
    assert t.idle() == 1 and t.own_ns == 900
    t.push(P.DECODE_CYCLE, 2)
    t.pop()
    t.own_ns = 0
    assert t.idle() == 0 and t.own_ns == 0             # within IDLE_POLL_NS of the last poll: nothing charged


def test_the_idle_wrapper_contains_its_hooks_error(monkeypatch):
    """The hook runs before on_idle; its error is counted, never raised into the scheduler's loop."""
    from nvtx_annotate.targets import IDLE, TARGETS

    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("timer")
    monkeypatch.setattr(wrappers, "on_idle", broken)
    faults = dict(wrappers._faults)
    target = next(t for t in TARGETS if t.kind == IDLE)
    w = wrappers.make_wrapper(lambda self: "idle-result", target, skip_first=True)
    assert w(object()) == "idle-result" and calls == [1]
    assert wrappers._faults.get(target.label, 0) == faults.get(target.label, 0) + 1


def test_an_untimed_cycles_record_refuses_what_only_a_timed_one_holds():
    """A cycle the sampling left without events shares empty containers that refuse a write (a bug would raise
    into the timer's fault count rather than leak into every later untimed cycle)."""
    import pytest

    rec = E.CycleRecord(1, 0, timed=False)
    assert not rec.pairs and not rec.host and not rec.missing
    with pytest.raises(TypeError):
        rec.host["verify"] = 1
    with pytest.raises(AttributeError):
        rec.missing.add("verify")
    timed = E.CycleRecord(41, 0, timed=True)
    timed.host["verify"] = 1
    assert timed.host == {"verify": 1} and E.CycleRecord(2, 0, timed=False).host == {}


@pytest.mark.parametrize("adaptive, reads", [(False, 0), (True, 3), (None, 3)])
def test_the_step_count_is_read_each_cycle_only_under_adaptive_speculation(fake_sglang, monkeypatch, tmp_path,
                                                                            adaptive, reads):
    """Without --speculative-adaptive SGLang's worker never switches its step count (its AdaptiveController is
    made only with the flag): the cycle's close does not read it; with the flag, or where the flag is not known,
    it does."""
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 1)
    seen = []
    monkeypatch.setattr(wrappers, "on_cycle_steps", seen.append)
    _drive(name, gpu, 3, [1, 1], adaptive=adaptive)
    assert seen == [3] * reads
    state.timer.close()
    assert [r["steps"] for r in state.sink.pending_rows()] == [3, 3, 3]


def test_a_forked_child_whose_timing_fails_keeps_none_of_the_parents_hooks(fake_sglang, monkeypatch, tmp_path):
    """After a fork the child starts its own timing; should that fail, none of the parent's timer stays in the
    wrappers (its pass_ranges would let the child's ranges pass unrecorded, its accept hook feed a dead ring)."""
    from nvtx_annotate import live

    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 41)
    assert wrappers.own_time is state.timer
    state.timer.pass_ranges = True                      # as in an untimed cycle when the fork came

    def fails(*a, **k):
        raise OSError("no log directory in the child")
    monkeypatch.setattr(live, "enable", fails)
    live._after_fork(live.settings_from_env()[0], None, False)
    assert live.state() is None
    assert (wrappers.own_time, wrappers.on_accept, wrappers.on_idle, wrappers.on_cycle_steps) == (None,) * 4


class _Req:
    """SGLang's schedule_batch.Req as the accept resolver reads it (finished() is finished_reason is not None
    in every release 0.4.9-0.5.23); counts its finished() calls."""
    calls = 0

    def __init__(self, reason=None, retracted=False):
        self.finished_reason, self.is_retracted = reason, retracted

    def finished(self):
        _Req.calls += 1
        return self.finished_reason is not None


def test_done_flags_of_sglangs_requests():
    """With no request done, nothing to say (None: the lengths are kept whole), each request asked once;
    with one finished or retracted, the flags are exact (the per-request path)."""
    from types import SimpleNamespace

    _Req.calls = 0
    assert wrappers._done_flags(SimpleNamespace(reqs=[_Req() for _ in range(64)])) is None
    assert _Req.calls == 64
    reqs = [_Req(), _Req(reason="FINISH_LENGTH"), _Req(), _Req(retracted=True)]
    assert wrappers._done_flags(SimpleNamespace(reqs=reqs)) == [False, True, False, True]
    # another shape (no finished_reason): request by request, as before
    other = [SimpleNamespace(finished=lambda: False, is_retracted=False), SimpleNamespace(finished=lambda: True)]
    assert wrappers._done_flags(SimpleNamespace(reqs=other)) == [False, True]
    assert wrappers._done_flags(SimpleNamespace(reqs="not a list")) is None
