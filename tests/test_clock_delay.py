"""The shim's clock under ``profile-trace --delay`` (README's first command): nsys starts collecting at a time the
profiled processes cannot see, so profile-trace tells them two wall-clock times: the clock stops just before nsys is
due to collect (its cycles all ran uncollected) and its marks go out once nsys surely collects, with a ``clock_stop``
mark saying how long before them the clock stopped; the analyzer then takes the decode cycles between the two for
what they are (profiled, but not the clock's) and calibrates from the clock as after SGLang's own /start_profile."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from analyze.ranks.identify import clock_marks
from analyze.tools import sides as S
from nvtx_annotate import _nvtx
from nvtx_annotate import clock as C
from nvtx_annotate import profile_trace as PT
from nvtx_annotate import protocol as P
from nvtx_annotate import wrappers as W

REPO = Path(__file__).resolve().parents[1]


def _args(**kw):
    base = dict(delay=120.0, duration=None, capture="all", no_shim=False)
    return SimpleNamespace(**{**base, **kw})


def test_profile_trace_gives_the_stop_and_marks_times_only_for_a_delay():
    now = 1_000 * 10**9
    env = PT.delayed_clock_env(_args(), now)
    assert env == {P.CLOCK_STOP_AT_ENV: str(now + 119 * 10**9),
                   P.CLOCK_MARKS_AT_ENV: f"{now + 125 * 10**9},{now + 135 * 10**9}"}
    # a short collection: the marks at a third and two thirds of it
    assert PT.delayed_clock_env(_args(duration=3.0), now)[P.CLOCK_MARKS_AT_ENV] == f"{now + 121 * 10**9},{now + 122 * 10**9}"
    assert PT.delayed_clock_env(_args(delay=0.5), now)[P.CLOCK_STOP_AT_ENV] == str(now)     # never before the start
    for other in (_args(delay=None), _args(capture="cudaprofilerapi"), _args(no_shim=True)):
        assert PT.delayed_clock_env(other, now) == {}


def test_the_shim_reads_the_times_onto_its_own_clock():
    env = {P.CLOCK_STOP_AT_ENV: "5000", P.CLOCK_MARKS_AT_ENV: "19000,9000"}
    assert W.clock_deadlines(env, wall_ns=1000, perf_ns=70) == (4070, (8070, 18070))
    assert W.clock_deadlines({}, 1000, 70) is None
    assert W.clock_deadlines({**env, P.CLOCK_MARKS_AT_ENV: "9000,x"}, 1000, 70) is None
    assert W.clock_deadlines({**env, P.CLOCK_MARKS_AT_ENV: ""}, 1000, 70) is None
    assert W.clock_deadlines({**env, P.CLOCK_MARKS_AT_ENV: "4000,9000"}, 1000, 70) is None    # marks before the stop


def _delayed_shim(monkeypatch, due):
    """A fresh clock and recording backend, ``_clock_due`` = ``due`` and the shim's clock read from a list: returns
    (the backend, ``cycle(t_ms)``: one decode cycle through the wrapper at t ms, then its accept mark)."""
    from nvtx_annotate.targets import CYCLE, Target

    rec = _nvtx.RecordingBackend()
    monkeypatch.setattr(_nvtx, "_backend", rec)
    monkeypatch.setattr(W, "_clock", C.WindowClock())
    monkeypatch.setattr(W, "_clock_due", due)
    monkeypatch.setitem(W._rank, "clock", ())
    monkeypatch.setitem(W._rank, "clock_stopped_ns", None)
    monkeypatch.setitem(W._rank, "refresh", 0)
    now = [0]
    monkeypatch.setattr(W, "perf_counter_ns", lambda: now[0])

    class Worker:
        def forward_batch_generation(self, batch):
            return SimpleNamespace()

    fwd = W.make_wrapper(Worker.forward_batch_generation,
                         Target("decode_cycle", P.DECODE_CYCLE, "x", "Worker.forward_batch_generation", CYCLE), True)
    w, decode = Worker(), SimpleNamespace(forward_mode=SimpleNamespace(is_extend=lambda: False))

    def cycle(t_ms):
        now[0] = t_ms * 1_000_000
        W.emit_accept([1, 0], getattr(fwd(w, decode), P.CYCLE_ATTR))
    return rec, cycle


def test_the_cycle_wrapper_stops_the_clock_then_writes_its_marks_with_the_stop(monkeypatch):
    """Cycles every 3 ms; the stop due at 7 ms, the marks at 13 and 20 ms: the cycles of 0, 3 and 6 ms are the clock's
    (two periods), the cycle at 9 ms starts after the stop (not the clock's), the one at 15 ms writes the marks and a
    ``clock_stop`` 6 ms (the stop was seen at the 9 ms cycle) before them, the next worker calls (18, 21 ms) again, and
    the one at 21 ms once more for the second marks time."""
    rec, cycle = _delayed_shim(monkeypatch, (7_000_000, (13_000_000, 20_000_000)))
    for t in (0, 3, 6, 9, 15, 18, 21):
        cycle(t)
        if t == 9:
            assert W._clock is None and not [e for e in rec.events if e[0] == "mark" and "clock" in e[1]]
    marks = [e[1] for e in rec.events if e[0] == "mark" and e[1].startswith("clock")]
    assert marks[:2] == ["clock reqs=2 part=0 period_us=3000,3000 tokens=3,3", "clock_stop ago_us=6000"]
    clock = "clock reqs=2 part=0 period_us=3000,3000 tokens=3,3"
    # 18 and 21 ms: the worker calls after a writing write them again; 21 ms: the second marks time writes them too
    assert marks[2:] == [clock, "clock_stop ago_us=9000", clock, "clock_stop ago_us=12000", clock,
                         "clock_stop ago_us=12000"]
    assert W._clock_due is None


def test_no_cycle_between_the_stop_and_the_marks_gives_no_clock_stop(monkeypatch):
    """The first cycle past both times stops the clock and writes its marks at once: they are then the clock's time
    (no clock_stop mark), as after SGLang's /start_profile."""
    rec, cycle = _delayed_shim(monkeypatch, (7_000_000, (13_000_000,)))
    for t in (0, 3, 6, 14):
        cycle(t)
    marks = [e[1] for e in rec.events if e[0] == "mark" and e[1].startswith("clock")]
    assert marks == ["clock reqs=2 part=0 period_us=3000,3000 tokens=3,3"] and W._clock is None


def test_the_analyzer_dates_the_clock_by_its_stop():
    """clock_marks: the clock's time is its stop (the earliest clock_stop's time less ago_us), not its marks'; the
    profile's decode cycles after the stop leave the clock unprofiled, one before it does not."""
    text = P.clock_mark(16, 0, [3000] * 140, [23] * 140)
    marks = pd.DataFrame({"global_pid": [7] * 4, "time_ns": [50_000_000, 50_001_000, 51_000_000, 51_001_000],
                          "text": [text, P.clock_stop_mark(3_000), text, P.clock_stop_mark(4_001)]})
    (parsed, at_ns), = clock_marks(marks).values()
    assert at_ns == 47_000_000 and len(parsed) == 1
    assert clock_marks(marks.iloc[[0, 2]])[7][1] == 50_000_000      # no clock_stop: the first mark's time
    cycles = pd.DataFrame({"rank": 0, "cycle": range(1, 31), "period_ns": 4_000_000,
                           "requests": pd.array([16] * 30, dtype="Int64"), "tokens": pd.array([24] * 30, dtype="Int64")})
    clock = (P.parse_clock_mark(text),)
    after = cycles.assign(cpu_start_ns=[48_000_000 + 100_000 * i for i in range(30)])
    assert S.clock_unprofiled(S.Side("p", after, pd.DataFrame(), [], clock=clock, clock_at_ns=at_ns, clock_rank=0))
    before = after.assign(cpu_start_ns=after["cpu_start_ns"] - 2_000_000)
    assert not S.clock_unprofiled(S.Side("p", before, pd.DataFrame(), [], clock=clock, clock_at_ns=at_ns, clock_rank=0))
    assert P.parse_clock_stop("clock_stop ago_us=12") == 12 and P.parse_clock_stop("clock_stop ago_us=-1") is None
    assert P.parse_clock_stop("clock reqs=1 part=0 period_us=1 tokens=1") is None


@pytest.mark.nsys
def test_profile_trace_delay_under_real_nsys_writes_the_clock_into_the_window(tmp_path):
    """nsys 2022.4 (-t nvtx on this CPU machine), the look-alike workload, ``--delay 8 --duration 3`` (the clock stops
    at 7 s, after the workload's imports even on a loaded 2-core runner; its marks at 9 s): the clock marks and a
    clock_stop are in the export, the clock stopped before the first decode cycle nsys collected."""
    if not shutil.which("nsys"):
        pytest.skip("nsys not on PATH")
    pytest.importorskip("torch")          # the look-alike workload runs on PyTorch
    from analyze.read import report
    from fixtures import nsys_record
    from helpers.pth_site import hook_pythonpath

    env = dict(os.environ, PYTHONPATH=hook_pythonpath(tmp_path, str(REPO)))   # the .pth hook, as pip installs it

    def run(attempt):
        out = tmp_path / f"try{attempt}"
        out.mkdir()
        cmd = [sys.executable, "-m", "nvtx_annotate.profile_trace", "--package", "spec_workload", "-t", "nvtx",
               "--nsys-arg=--sample=none", "--nsys-arg=--cpuctxsw=none", "--delay", "8", "--duration", "3",
               "-o", str(out / "w"), "--", sys.executable, "-m", "spec_workload", "--device", "cpu", "--hidden", "32",
               "--vocab", "64", "--reqs", "8", "--world", "1", "--seed", "4", "--steps", "2", "--cycles", "20000",
               "--warmup", "1", "--eager"]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=out)
    r = nsys_record.with_retry(run)
    rep = Path(r.args[r.args.index("-o") + 1] + ".sqlite")
    assert rep.exists(), (r.stdout + r.stderr)[-3000:]       # --duration stops the workload: its status is nsys'
    tables = report.read_report(str(rep))
    clocks = clock_marks(tables.marks)
    assert len(clocks) == 1, (r.stdout + r.stderr)[-3000:]
    (parsed, at_ns), = clocks.values()
    # cycles of the clock before the window: ~100 on a quiet machine, 46 (340 ms cycles) beside other tests on 2 cores
    assert parsed and sum(len(m.periods_us) for m in parsed) >= 10
    texts = tables.marks["text"].astype(str)
    stop_ago = [P.parse_clock_stop(t) for t in texts if t.startswith(P.CLOCK_STOP_PREFIX)]
    assert stop_ago and min(stop_ago) >= 1_000_000                   # the stop came at least the 1 s margin before
    cycles = tables.ranges[tables.ranges["name"].astype(str).str.endswith("decode_cycle")]
    first_mark = tables.marks.loc[texts.str.startswith("clock reqs"), "time_ns"].min()
    # the clock stopped before the first cycle nsys collected, and its marks are in the window. (Not asserted: a
    # collected cycle before the first mark. On a loaded runner nsys's window opened ~0.9 s after its due time, and the
    # first cycle it collected was the one that wrote the marks, 30 us after them.)
    assert at_ns < cycles["start_ns"].min() and first_mark >= 0
