"""The shim's timing mode (nvtx_annotate/live, issue 43) on the CPU with stub CUDA events: what a
cycle records and in which order, the ring (drops, never waiting), no events during a capture or
without CUDA, the Parquet log (row groups, rotation, complete files), the Prometheus exposition,
the analyzer's reader of the log, and nothing at all with SPECPROF_TIMING unset."""

from __future__ import annotations

import importlib
import os
import sys
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from nvtx_annotate import _nvtx, live, shim, wrappers
from nvtx_annotate import protocol as P
from nvtx_annotate.live import events as E
from nvtx_annotate.live.log import LogWriter, SCHEMA_VERSION
from nvtx_annotate.live.sink import Sink

from helpers.fake_package import fake_package


# ------------------------------------------------------------------ stubs

class Gpu:
    """A fake device clock: stub events take its time when recorded (or, recorded behind a held
    :class:`StubGate`, the time the gate let the stream go)."""

    def __init__(self):
        self.now = 0
        self.done = True  # what query() answers
        self.recorded: list = []  # (label, time) per record() in order
        self.queries = 0
        self.capturing = False
        self.held: list | None = None  # events recorded behind a held gate (None: the stream runs)
        self.queued_at = None          # when the last launch's host call had queued its kernels

    def run(self, ns: int):
        self.now += ns

    def launch(self, host_ns: int, ns: int):
        """A graph launch: ``host_ns`` of the launch call's own host time with the stream idle, then its
        kernels (``ns``) from the moment they are queued."""
        self.now += host_ns
        self.queued_at = self.now
        self.now += ns

    def factory(self):
        return StubEvent(self)

    def events(self):
        return self.factory, lambda: self.capturing


class StubEvent:
    def __init__(self, gpu: Gpu):
        self.gpu, self.t = gpu, None

    def record(self):
        self.t = self.gpu.now
        if self.gpu.held is not None:
            self.gpu.held.append(self)
        self.gpu.recorded.append(self.t)

    def query(self):
        self.gpu.queries += 1
        return self.gpu.done

    def elapsed_time(self, other):
        assert self.t is not None and other.t is not None
        return (other.t - self.t) / 1e6  # ms, as torch

    def synchronize(self):  # pragma: no cover - must never be called
        raise AssertionError("synchronize on the hot path")

    wait = synchronize


class StubGate:
    """A stream gate (nvtx_annotate/live/gate.py) on the stub GPU: an event recorded while it is held takes
    the time the launch's kernels were queued (when the host released it, the stream reached it)."""

    def __init__(self, gpu: Gpu, fail: bool = False):
        self.gpu, self.fail, self.calls = gpu, fail, []

    def hold(self):
        if self.fail:
            raise RuntimeError("no stream memory operations")
        self.calls.append("hold")
        self.gpu.held = []
        return self.calls.count("hold")

    def release(self, n):
        self.calls.append(("release", n))
        for ev in self.gpu.held or ():
            ev.t = self.gpu.queued_at if self.gpu.queued_at is not None else self.gpu.now
        self.gpu.held = None


class HostClock:
    def __init__(self, start=1_000_000):
        self.now = start

    def __call__(self):
        self.now += 1000
        return self.now


def make_timer(gpu=None, rows=None, **kw):
    rows = [] if rows is None else rows
    t = E.Timer(rows.append, events=gpu.events() if gpu is not None else None, clock=HostClock(), **kw)
    return t, rows


def run_cycle(t: E.Timer, gpu: Gpu, k: int, draft=300, verify=400, allreduce=50, extend=150, accept=None,
              draft_prep=0):
    """One cycle through the backend API, as the wrappers call it: a graph replay inside draft (after
    ``draft_prep`` ns of the phase's Python with the stream idle), an all-reduce inside an eager verify,
    the draft extend's graph replay without its phase range."""
    t.push(P.DECODE_CYCLE, k)
    gpu.run(10)
    t.push(P.DRAFT)
    gpu.run(draft_prep)
    t.push(P.GRAPH_REPLAY_DRAFT)
    gpu.run(draft)
    t.pop()
    t.pop()
    gpu.run(20)
    t.push(P.VERIFY)
    gpu.run(verify - allreduce)
    t.push(P.ALLREDUCE)
    gpu.run(allreduce)
    t.pop()
    t.pop()
    t.push(P.GRAPH_REPLAY_DRAFT_EXTEND)
    gpu.run(extend)
    t.pop()
    if accept is not None:
        t.accept(accept[0], accept[1], None)
    t.pop()


# ------------------------------------------------------------------ events per cycle

def test_one_cycle_records_events_in_order_and_resolves_phase_times():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=1)
    t.spec = P.SpecConfig("EAGLE", 3, 1, 4, 2, True, 8)
    t.rank = 1
    run_cycle(t, gpu, 7, accept=(5, 2))
    # draft start, its graph replay's start/end, draft end, verify start, allreduce start/end, verify end,
    # draft_extend start/end (its replay: the same two): 10 events at non-decreasing device times
    draft, verify, allreduce, extend = 300, 400, 50, 150  # run_cycle's defaults
    v0 = 10 + draft + 20
    assert gpu.recorded == [10, 10, 10 + draft, 10 + draft, v0, v0 + verify - allreduce, v0 + verify, v0 + verify,
                            v0 + verify, v0 + verify + extend]
    t.poll()
    assert len(rows) == 1
    r = rows[0]
    assert (r["cycle"], r["rank"], r["pid"]) == (7, 1, os.getpid())
    assert (r["draft_ns"], r["verify_ns"], r["allreduce_ns"], r["draft_extend_ns"]) == (300, 400, 50, 150)
    assert (r["draft_replay_ns"], r["verify_replay_ns"], r["draft_extend_replay_ns"]) == (300, None, 150)
    assert r["gpu_span_ns"] == gpu.recorded[-1] - gpu.recorded[0] == draft + 20 + verify + extend
    assert (r["accepted_tokens"], r["requests"], r["verified_tokens"], r["steps"], r["batch_size"]) == (5, 2, 8, 3, 2)
    assert r["host_end_ns"] > r["host_start_ns"]
    assert set(r) == set(E.ROW_FIELDS)


def test_a_graph_replay_is_timed_without_its_phases_python():
    """In a host-bound cycle the phase's events also time its Python while the stream is idle (real SGLang
    on an H100: verify's events 7.6 ms, its kernels 4.6 ms); the replay's own pair times the graph alone."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    run_cycle(t, gpu, 1, draft=300, draft_prep=900)
    r = rows[0]
    assert (r["draft_ns"], r["draft_replay_ns"]) == (1200, 300)
    assert r["draft_extend_ns"] == r["draft_extend_replay_ns"] == 150 and r["verify_replay_ns"] is None
    # a replay whose events cannot be had (a capture) leaves its column null, the phase's time too
    gpu.capturing = True
    run_cycle(t, gpu, 2)
    assert rows[1]["draft_replay_ns"] is None and rows[1]["draft_ns"] is None


def test_replay_time_counts_each_replay_once_beside_plain_ranges_of_its_phase():
    """A replay outside its phase range times phase and replay with one pair; a plain range of the same
    phase in the same cycle adds to the phase only, a nested replay to the replay once."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.push(P.DECODE_CYCLE, 1)
    for name, ns in ((P.VERIFY, 400), (P.GRAPH_REPLAY_VERIFY, 100)):
        t.push(name)
        gpu.run(ns)
        t.pop()
    t.push(P.GRAPH_REPLAY_DRAFT)
    gpu.run(100)
    t.pop()
    t.push(P.DRAFT)
    gpu.run(800)
    t.push(P.GRAPH_REPLAY_DRAFT)
    gpu.run(100)
    t.pop()
    t.pop()
    t.pop()
    r = rows[0]
    assert (r["verify_ns"], r["verify_replay_ns"]) == (500, 100)
    assert (r["draft_ns"], r["draft_replay_ns"]) == (1000, 200)


def test_accept_of_a_later_resolver_joins_its_cycle_by_number():
    """v2 workers resolve the accept lengths after the cycle closed (cycle=K): the row waits for them."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=3)
    run_cycle(t, gpu, 1)
    run_cycle(t, gpu, 2)
    assert rows == []  # complete on the device, but cycle 1's accept lengths have not come yet
    t.accept(6, 3, 1, batch_size=4)
    t.poll()
    assert [r["cycle"] for r in rows] == [1]
    assert (rows[0]["accepted_tokens"], rows[0]["requests"], rows[0]["batch_size"]) == (6, 3, 4)
    run_cycle(t, gpu, 3)
    run_cycle(t, gpu, 4)
    run_cycle(t, gpu, 5)  # cycle 2 is now 3 cycles old: reported without accept lengths
    assert [r["cycle"] for r in rows] == [1, 2]
    assert rows[1]["accepted_tokens"] is None and rows[1]["verified_tokens"] is None
    t.accept(1, 1, 2)  # too late
    assert t.counters["late_accepts"] == 1


# ------------------------------------------------------------------ the ring

def test_pending_events_are_not_waited_on_and_overflow_drops_the_oldest():
    gpu = Gpu()
    gpu.done = False  # the device never catches up
    t, rows = make_timer(gpu, ring_size=3, accept_lag=0)
    for k in range(1, 7):
        run_cycle(t, gpu, k)
    assert rows == []
    assert t.pending() == 3
    assert sorted(t._ring) == [4, 5, 6]  # the three newest kept
    assert t.counters[E.DROP_RING_OVERFLOW] == 3
    assert gpu.queries > 0  # asked, never waited (StubEvent.synchronize would raise)
    gpu.done = True
    run_cycle(t, gpu, 7)
    assert [r["cycle"] for r in rows] == [4, 5, 6, 7]


def test_a_dropped_cycles_events_are_not_reused():
    gpu = Gpu()
    gpu.done = False
    t, _ = make_timer(gpu, ring_size=1, accept_lag=0)
    run_cycle(t, gpu, 1)
    run_cycle(t, gpu, 2)
    assert t._free == []


def test_close_resolves_what_is_complete_and_counts_the_rest():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=5)
    run_cycle(t, gpu, 1)
    run_cycle(t, gpu, 2)
    assert rows == []
    assert t.close() == 0
    assert [r["cycle"] for r in rows] == [1, 2]
    gpu.done = False
    run_cycle(t, gpu, 3)
    assert t.close() == 1 and t.counters[E.DROP_UNRESOLVED_AT_CLOSE] == 1


# ------------------------------------------------------------------ no CUDA, captures

def test_without_cuda_only_host_times_and_null_gpu_columns(monkeypatch):
    """torch.cuda unavailable: the auto event source gives none; no crash, GPU columns null."""
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False, is_initialized=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    assert E.torch_events() == (None, None)
    rows = []
    t = E.Timer(rows.append, events="auto", clock=HostClock(), accept_lag=0)
    run_cycle(t, Gpu(), 1, accept=(3, 1))
    assert len(rows) == 1
    r = rows[0]
    assert all(r[k] is None for k in ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns", "gpu_span_ns"))
    # host clock ticks (1000 each) at the cycle's start and end and at each phase's entry and exit: draft
    # 1 tick, verify 3 (an all-reduce inside it), all-reduce 1, draft_extend 1; the cycle 9
    assert r["host_end_ns"] - r["host_start_ns"] == 9000
    assert (r["draft_host_ns"], r["verify_host_ns"], r["allreduce_host_ns"], r["draft_extend_host_ns"]) == (
        1000, 3000, 1000, 1000)
    assert r["accepted_tokens"] == 3


def test_cpu_torch_gives_no_events():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():  # pragma: no cover - this test is about CPU builds
        pytest.skip("CUDA present")
    assert E.torch_events() == (None, None)


def test_no_event_is_recorded_while_the_stream_captures():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    gpu.capturing = True
    run_cycle(t, gpu, 1)
    assert gpu.recorded == []
    assert t.counters["capture_skips"] == 5  # one try per phase or replay start, none for the end
    assert rows[0]["draft_ns"] is None and rows[0]["verify_ns"] is None
    gpu.capturing = False
    run_cycle(t, gpu, 2)
    assert len(gpu.recorded) == 10 and rows[1]["verify_ns"] == 400


def test_allreduce_timing_can_be_off():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, time_allreduce=False)
    run_cycle(t, gpu, 1)
    assert len(gpu.recorded) == 8
    assert rows[0]["allreduce_ns"] is None and rows[0]["verify_ns"] == 400


def test_tee_forwards_every_call_to_nsys_and_contains_timer_errors():
    rec = _nvtx.RecordingBackend()
    faults = []

    class Broken(E.Timer):
        def _record(self, rec_, phase):
            raise RuntimeError("boom")

    t = Broken(lambda r: None, events=Gpu().events(), clock=HostClock())
    tee = E.TeeBackend(rec, t, on_fault=lambda label, exc: faults.append(label))
    tee.push(P.DECODE_CYCLE, 1)
    tee.push(P.DRAFT)
    tee.pop()
    tee.mark("accept_len=1 reqs=1", 1)
    tee.pop()
    assert rec.balanced() and rec.ranges() == [(P.DECODE_CYCLE, 0), (P.DRAFT, 1)]
    assert rec.marks() == [("accept_len=1 reqs=1", 1)]
    assert faults == ["live timing"]
    assert t._tls.stack == [] and t.pending() == 1


def test_a_pause_file_stops_feeding_the_timer_at_a_cycle_boundary_only(tmp_path):
    """SPECPROF_TIMING_PAUSE_FILE (the overhead benchmark inside one engine): while the file exists no
    cycle is timed; the file appearing or going mid-cycle changes nothing until the next outermost push;
    nsys's backend sees every call either way; the timer's stack stays balanced."""
    rec = _nvtx.RecordingBackend()
    rows = []
    t = E.Timer(rows.append, events=Gpu().events(), clock=HostClock())
    now = [0.0]
    pause = tmp_path / "pause"
    tee = E.TeeBackend(rec, t, pause_file=str(pause), pause_check_s=0.05, clock=lambda: now[0])

    def cycle(k, mid=None):
        now[0] += 1.0
        tee.push(P.DECODE_CYCLE, k)
        tee.push(P.VERIFY)
        if mid:
            mid()
        now[0] += 1.0
        tee.pop()
        tee.push(P.DRAFT)
        tee.pop()
        tee.pop()

    cycle(1)
    cycle(2, mid=pause.touch)              # paused from the next cycle on
    assert t.counters["cycles"] == 2
    cycle(3)
    cycle(4, mid=pause.unlink)             # this one still paused
    assert t.counters["cycles"] == 2 and tee.paused
    cycle(5)
    assert t.counters["cycles"] == 3 and not tee.paused
    assert t._tls.stack == [] and rec.balanced() and len(rec.ranges()) == 15
    # checked at most every pause_check_s: a file made and gone between two checks is not seen
    tee.push(P.DECODE_CYCLE, 6)            # checked here (1 s after the last check)
    tee.pop()
    pause.touch()
    now[0] += 0.01
    tee.push(P.DECODE_CYCLE, 7)            # 0.01 s later: not looked at again, still timed
    tee.pop()
    assert t.counters["cycles"] == 5 and not tee.paused
    now[0] += 0.05
    tee.push(P.DECODE_CYCLE, 8)
    tee.pop()
    assert t.counters["cycles"] == 5 and tee.paused


def test_the_pause_file_setting():
    from nvtx_annotate import live

    s, problems = live.settings_from_env({"SPECPROF_TIMING_PAUSE_FILE": "/tmp/x"})
    assert s.pause_file == "/tmp/x" and not problems
    assert live.settings_from_env({})[0].pause_file is None
    assert live.settings_from_env({})[0].events is True
    assert live.settings_from_env({"SPECPROF_TIMING_EVENTS": "0"})[0].events is False


# ------------------------------------------------------------------ through the shim's wrappers

FAKE = {
    "srt/__init__.py": "",
    "srt/speculative/__init__.py": "",
    "srt/distributed/__init__.py": "",
    "srt/managers/__init__.py": "",
    "srt/managers/scheduler_components/__init__.py": "",
    "srt/distributed/parallel_state.py": """
        GPU = None
        class GroupCoordinator:
            def __init__(self, name, rank, world):
                self.unique_name, self.rank_in_group, self.world_size, self.device = name + ":0", rank, world, "cpu"
            def all_reduce(self, x):
                GPU.run(40)
                return x
    """,
    "srt/managers/scheduler.py": """
        class Scheduler:
            def __init__(self, server_args):
                self.server_args = server_args
                self.max_running_requests = 16
    """,
    "srt/managers/scheduler_components/batch_result_processor.py": """
        class SchedulerBatchResultProcessor:
            def _resolve_spec_v2_tokens(self, result, batch):
                result.num_correct_drafts_per_req_cpu = list(result.lens)
    """,
    "srt/speculative/eagle_worker_v2.py": """
        GPU = None
        TP = None
        class Result:
            pass
        class EagleDraftWorker:
            def draft(self, batch):
                GPU.run(300)
            def _draft_extend_for_decode(self, batch, out):
                GPU.run(120)
        class EAGLEWorkerV2:
            def __init__(self):
                self._draft_worker = EagleDraftWorker()
                self.speculative_num_steps = 3
            def forward_batch_generation(self, batch):
                steps = getattr(batch, "adaptive_steps", None)   # as activate_step_by_batch switches them
                if steps:
                    self.speculative_num_steps = steps.pop(0)
                self._draft_worker.draft(batch)
                out = self.verify(batch)
                self._draft_worker._draft_extend_for_decode(batch, out)
                r = Result()
                r.lens = batch.lens
                return r
            def verify(self, batch):
                GPU.run(200)
                TP.all_reduce(1)
                TP.all_reduce(1)
                return None
    """,
}


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    with fake_package(tmp_path, monkeypatch, "fakelive_", FAKE) as made:
        yield made
        live.disable()
    wrappers._rank["spec_config"] = wrappers._rank["config"] = None


def _drive(name, gpu, cycles, lens, adaptive_steps=None, adaptive=None):
    ps = importlib.import_module(f"{name}.srt.distributed.parallel_state")
    ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker_v2")
    sch = importlib.import_module(f"{name}.srt.managers.scheduler")
    brp = importlib.import_module(f"{name}.srt.managers.scheduler_components.batch_result_processor")
    ps.GPU = ew.GPU = gpu
    ew.TP = ps.GroupCoordinator("tp", 1, 2)
    sch.Scheduler(SimpleNamespace(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
                                  speculative_num_draft_tokens=4, tp_size=2, disable_cuda_graph=False,
                                  speculative_adaptive=adaptive))
    worker, proc = ew.EAGLEWorkerV2(), brp.SchedulerBatchResultProcessor()
    batch = SimpleNamespace(reqs=[SimpleNamespace(finished=lambda: False) for _ in lens], lens=lens,
                            adaptive_steps=list(adaptive_steps or []))
    for _ in range(cycles):
        res = worker.forward_batch_generation(batch)
        proc._resolve_spec_v2_tokens(res, batch)


def _timed_install(name, monkeypatch, tmp_path, sample: int):
    """The shim installed into the fake SGLang with the timing mode on (events every ``sample``-th cycle,
    stub CUDA events on the returned device, the sink drained by hand): (device, timing state)."""
    monkeypatch.setenv("SPECPROF_TIMING", "1")
    monkeypatch.setenv("SPECPROF_TIMING_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("SPECPROF_TIMING_SAMPLE", str(sample))
    gpu = Gpu()
    monkeypatch.setattr(E, "torch_events", gpu.events)
    shim.install(name)
    state = live.state()
    assert state is not None
    state.sink.threaded = False
    return gpu, state


def test_timing_through_the_wrappers_logs_each_cycle(fake_sglang, monkeypatch, tmp_path):
    """SPECPROF_TIMING=1: install() puts the tee in front of NVTX; a fake v2 worker's cycles come out
    as rows with the phase times its fake device ran, the rank and the spec_config of the process."""
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 1)   # every cycle timed (the default is 1 in 41)
    assert _nvtx._backend is state.tee and wrappers.on_accept == state.timer.accept
    _drive(name, gpu, 6, [2, 0, 3])
    assert rec.balanced()  # nsys's ranges are still there (the recording backend stands for nsys)
    assert rec.payloads(P.DECODE_CYCLE) == [1, 2, 3, 4, 5, 6]
    state.timer.close()
    rows = state.sink.pending_rows()
    assert [r["cycle"] for r in rows] == [1, 2, 3, 4, 5, 6]
    for r in rows:
        assert (r["draft_ns"], r["verify_ns"], r["allreduce_ns"], r["draft_extend_ns"]) == (300, 280, 80, 120)
        assert r["gpu_span_ns"] == 300 + 280 + 120
        assert (r["rank"], r["accepted_tokens"], r["requests"], r["verified_tokens"], r["steps"]) == (1, 5, 3, 12, 3)
    state.sink.close()
    files = sorted((tmp_path / "logs").glob("*.parquet"))
    assert len(files) == 1 and files[0].name.startswith(f"specprof_live-r1-p{os.getpid()}-")
    table = pq.read_table(files[0])
    assert table.column("cycle").to_pylist() == [1, 2, 3, 4, 5, 6]
    meta = table.schema.metadata
    assert meta[b"specprof.schema_version"] == str(SCHEMA_VERSION).encode()
    assert b'"steps": 3' in meta[b"specprof.spec_config"] and b'"algo": "EAGLE3"' in meta[b"specprof.spec_config"]


def test_timing_unset_creates_nothing(fake_sglang, monkeypatch):
    name, rec = fake_sglang
    monkeypatch.delenv("SPECPROF_TIMING", raising=False)
    shim.install(name)
    assert live.state() is None
    assert _nvtx._backend is rec and wrappers.on_accept is None
    gpu = Gpu()
    _drive(name, gpu, 2, [1])
    assert live.state() is None and _nvtx._backend is rec and wrappers.on_accept is None
    assert gpu.recorded == [] and rec.payloads(P.DECODE_CYCLE) == [1, 2]  # the shim itself still annotates


def test_importing_the_timing_mode_loads_no_heavy_module():
    """Imported at server start: standard library only (checked in a fresh interpreter)."""
    import subprocess

    code = ("import sys, nvtx_annotate.live, nvtx_annotate.live.events, nvtx_annotate.live.sink, "
            "nvtx_annotate.live.log, nvtx_annotate.live.metrics;"
            "print(sorted(m for m in ('torch', 'pyarrow', 'prometheus_client', 'pandas', 'numpy') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_settings_from_env_keep_defaults_for_bad_values():
    s, problems = live.settings_from_env({"SPECPROF_TIMING_MAX_FILES": "3", "SPECPROF_TIMING_RING": "zero",
                                          "SPECPROF_METRICS_PORT": "9400", "SPECPROF_TIMING_ALLREDUCE": "0"})
    assert (s.max_files, s.ring_size, s.metrics_port, s.time_allreduce) == (3, live.DEFAULTS.ring_size, 9400, False)
    assert len(problems) == 1 and problems[0].startswith("SPECPROF_TIMING_RING='zero'")
    assert live.timing_enabled({"SPECPROF_TIMING": "1"}) and not live.timing_enabled({"SPECPROF_TIMING": "0"})
    assert not live.timing_enabled({})


# ------------------------------------------------------------------ the Parquet log

def _rows(n, rank=0, first=1, gpu=None):
    """n resolved rows from a timer fed cycles with varied phase times."""
    gpu = gpu or Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.rank, t.spec = rank, P.SpecConfig("EAGLE", 2, 1, 3, 1, True, 8)
    for i in range(n):
        run_cycle(t, gpu, first + i, draft=100 + i, verify=200 + 3 * i, allreduce=10 + i, extend=50 + 2 * i,
                  accept=(i % 4, 2))
    t.poll()
    assert len(rows) == n
    return rows


def test_log_rotates_by_size_keeps_max_files_and_completes_each(tmp_path):
    rows = _rows(60)
    w = LogWriter(str(tmp_path), rank=0, pid=123, spec_config=P.SpecConfig("EAGLE", 2, 1, 3, 1, True, 8),
                  row_group_rows=10, max_bytes=1, max_files=3)  # every row group completes its file
    for r in rows[:25]:
        w.add(r)
    assert w.row_groups == 2 and w.buffered() == 5
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "specprof_live-r0-p123-00001.parquet", "specprof_live-r0-p123-00002.parquet"]
    for r in rows[25:]:
        w.add(r)
    w.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [f"specprof_live-r0-p123-{i:05d}.parquet" for i in (4, 5, 6)]  # 6 files, 3 kept
    assert len(w.deleted) == 3 and not any(n.endswith(".tmp") for n in names)
    tables = [pq.read_table(tmp_path / n) for n in names]
    assert [t.num_rows for t in tables] == [10, 10, 10]
    cycles = [c for t in tables for c in t.column("cycle").to_pylist()]
    assert cycles == [r["cycle"] for r in rows[30:]]


def test_log_rotation_puts_row_groups_together_up_to_the_size_limit(tmp_path):
    rows = _rows(40)
    one = LogWriter(str(tmp_path / "probe"), 0, 1, row_group_rows=10, max_bytes=1 << 30)
    for r in rows[:10]:
        one.add(r)
    size_one = one.bytes_written()  # an open file of one row group (the footer is written at completion)
    assert size_one > 0
    w = LogWriter(str(tmp_path / "logs"), 0, 1, row_group_rows=10, max_bytes=size_one + size_one // 2)
    for r in rows:
        w.add(r)
    w.close()
    files = sorted((tmp_path / "logs").iterdir())
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [2, 2]  # the 2nd group passes the limit
    assert [c for f in files for c in pq.read_table(f).column("cycle").to_pylist()] == [r["cycle"] for r in rows]


def test_log_completes_a_file_by_age_so_readers_see_fresh_cycles(tmp_path):
    """A file is completed once it is max_age_s old (at its next row group), whatever its size: a reader
    of complete files (analyze-trace, the trigger) is at most that far behind."""
    rows = _rows(30)
    now = [1000.0]
    w = LogWriter(str(tmp_path), 0, 1, row_group_rows=10, max_bytes=1 << 30, max_age_s=60, clock=lambda: now[0])
    for r in rows[:10]:
        w.add(r)                      # opened at 1000 s, one row group, 0 s old: stays open
    assert [p.name for p in tmp_path.iterdir()] == ["specprof_live-r0-p1-00001.arrows"]
    now[0] = 1059.0
    for r in rows[10:20]:
        w.add(r)                      # 59 s old: still open
    assert w.completed == []
    now[0] = 1060.0
    for r in rows[20:30]:
        w.add(r)                      # 60 s old at this row group: completed
    assert [p.name for p in tmp_path.iterdir()] == ["specprof_live-r0-p1-00001.parquet"]
    assert pq.ParquetFile(tmp_path / "specprof_live-r0-p1-00001.parquet").metadata.num_row_groups == 3
    assert live.DEFAULTS.file_s == 60 and live.settings_from_env({"SPECPROF_TIMING_FILE_S": "15"})[0].file_s == 15
    # an idle server: rows of a burst written, then nothing; the sink's tick completes the file by age
    idle = LogWriter(str(tmp_path / "idle"), 0, 2, row_group_rows=1000, max_bytes=1 << 30, max_age_s=60,
                     clock=lambda: now[0])
    for r in rows[:5]:
        idle.add(r)
    idle.flush()
    assert not idle.complete_if_old()                 # 0 s old
    now[0] += 61
    assert idle.complete_if_old()
    assert [p.name for p in (tmp_path / "idle").iterdir()] == ["specprof_live-r0-p2-00001.parquet"]


def test_log_file_is_written_under_a_temporary_name_until_complete(tmp_path):
    rows = _rows(5)
    w = LogWriter(str(tmp_path), rank=2, pid=7, row_group_rows=2, max_bytes=1 << 30)
    for r in rows:
        w.add(r)
    assert [p.name for p in tmp_path.iterdir()] == ["specprof_live-r2-p7-00001.arrows"]
    w.close()
    assert [p.name for p in tmp_path.iterdir()] == ["specprof_live-r2-p7-00001.parquet"]
    f = pq.ParquetFile(tmp_path / "specprof_live-r2-p7-00001.parquet")
    assert f.metadata.num_row_groups == 3 and f.metadata.num_rows == 5


def test_sink_writes_row_groups_every_n_rows_not_per_cycle(tmp_path):
    rows = _rows(7)
    made = []

    def outputs():
        made.append(LogWriter(str(tmp_path), 0, 1, row_group_rows=3))
        return made[-1], None

    s = Sink(outputs, threaded=False, flush_s=1e9)
    for r in rows:
        s.add(r)
    assert s.drain() == 7 and made[0].row_groups == 2 and made[0].buffered() == 1
    s.close()
    assert pq.ParquetFile(next(tmp_path.glob("*.parquet"))).metadata.num_row_groups == 3


def test_an_idle_drain_writes_and_completes_the_file_without_close(tmp_path):
    """SGLang ends its scheduler with SIGKILL (no exit hook runs): once the server idles for one
    interval, what was logged is in a complete, readable file, with no close()."""
    rows = _rows(5)
    now = [0.0]
    s = Sink(lambda: (LogWriter(str(tmp_path), 0, 1, row_group_rows=1024, max_age_s=3600), None),
             threaded=False, flush_s=1e9, idle_complete_s=5.0, clock=lambda: now[0])
    for r in rows:
        s.add(r)
    assert s.drain() == 5
    assert list(tmp_path.glob("*.parquet")) == []          # busy: buffered, nothing complete yet
    for t in (1.0, 2.0, 5.0):                               # idle, but not yet for 5 s: a short pause
        now[0] = t
        assert s.drain() == 0 and list(tmp_path.glob("*.parquet")) == []
    now[0] = 6.0                                            # 5 s without a cycle
    assert s.drain() == 0
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))
    assert pq.read_table(files[0]).column("cycle").to_pylist() == [r["cycle"] for r in rows]
    for r in _rows(2, first=6):                             # the next burst goes to a new file
        s.add(r)
    s.drain()
    now[0] = 20.0
    s.drain()
    now[0] = 26.0
    s.drain()
    assert len(list(tmp_path.glob("*.parquet"))) == 2


def test_a_failing_output_is_dropped_and_the_other_goes_on(tmp_path):
    """A log directory that cannot be made (here: under a file), or metrics that raise: said once,
    that output off, the rows still reach the other; nothing piles up in the sink."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    seen, errors = [], []

    class Metrics:
        def observe_many(self, rows):       # a drain's rows at once (LiveMetrics.observe_many)
            seen.extend(row["cycle"] for row in rows)

        def publish(self):
            pass

        def count_drops(self, counters):
            pass

    def fed(log, metrics, n):
        """A sink of ``log`` and ``metrics`` given n rows and drained once."""
        s = Sink(lambda: (log, metrics), threaded=False, on_error=lambda what, exc: errors.append(what))
        for r in _rows(n):
            s.add(r)
        s.drain()
        return s

    s = fed(LogWriter(str(blocker / "logs"), 0, 1, row_group_rows=2), Metrics(), 6)
    s.drain()
    assert seen == [1, 2, 3, 4, 5, 6] and errors == ["live sink (log, now off)"] and not s._rows

    class BadMetrics(Metrics):
        def observe_many(self, rows):
            raise RuntimeError("boom")

    errors.clear()
    fed(LogWriter(str(tmp_path / "ok"), 0, 1, row_group_rows=1024), BadMetrics(), 4).close()
    assert errors == ["live sink (metrics, now off)"]
    assert pq.read_table(next((tmp_path / "ok").glob("*.parquet"))).num_rows == 4


def test_idle_resolves_cycles_without_waiting_for_accepts_that_will_not_come():
    """SGLang's Scheduler.on_idle runs once every result was processed: the last cycles resolve then,
    not after accept_lag more cycles that an idle server never runs."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=4)
    run_cycle(t, gpu, 1, accept=(2, 1))
    run_cycle(t, gpu, 2)                  # its accept lengths never come
    t.poll()
    assert [r["cycle"] for r in rows] == [1]
    assert t.idle() == 1 and [r["cycle"] for r in rows] == [1, 2] and rows[1]["accepted_tokens"] is None
    assert t.idle() == 0                  # nothing pending: nothing asked of the GPU
    gpu.done = False
    queries = gpu.queries
    run_cycle(t, gpu, 3, accept=(1, 1))
    assert t.idle() == 0 and t.pending() == 1 and gpu.queries > queries    # asked, never waited


def test_the_idle_hook_of_the_wrappers_reaches_the_timer(fake_sglang, monkeypatch, tmp_path):
    from nvtx_annotate import wrappers
    from nvtx_annotate.targets import IDLE, TARGETS

    assert any(t.kind == IDLE and t.attr == "Scheduler.on_idle" for t in TARGETS)
    called = []
    monkeypatch.setattr(wrappers, "on_idle", lambda: called.append(1))
    target = next(t for t in TARGETS if t.kind == IDLE)
    w = wrappers.make_wrapper(lambda self: "idle-result", target, skip_first=True)
    assert w(object()) == "idle-result" and called == [1]


def test_a_taken_metrics_port_keeps_the_metrics_without_http():
    prom = pytest.importorskip("prometheus_client")
    import socket

    from nvtx_annotate.live.metrics import make_metrics

    sock = socket.socket()
    sock.bind(("0.0.0.0", 0))
    sock.listen()
    warned = []
    try:
        m = make_metrics(0, registry=prom.CollectorRegistry(), port=sock.getsockname()[1],
                         warn=lambda key, text: warned.append(key))
    finally:
        sock.close()
    assert m is not None and warned == ["live:port"]
    m.observe(_rows(1)[0])


# ------------------------------------------------------------------ Prometheus

def test_prometheus_exposition_has_the_histograms_with_rank_and_phase_labels():
    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    registry = prom.CollectorRegistry()
    m = make_metrics(3, registry=registry)
    rows = _rows(4, rank=3)
    for r in rows:
        m.observe(r)
    m.publish()                     # the sink sets the gauges once per drain
    m.count_drops({"ring_overflow": 2})
    m.count_drops({"ring_overflow": 5})
    text = prom.generate_latest(registry).decode()
    for phase in ("draft", "verify", "draft_extend", "allreduce"):
        assert f'specprof:phase_seconds_count{{phase="{phase}",rank="3"}} 4.0' in text
    verify_s = sum(r["verify_ns"] for r in rows) * 1e-9
    line = next(x for x in text.splitlines() if x.startswith('specprof:phase_seconds_sum{phase="verify",rank="3"}'))
    assert float(line.split()[-1]) == pytest.approx(verify_s)
    assert 'specprof:cycle_seconds_count{rank="3"} 4.0' in text
    assert 'specprof:accepted_tokens_per_cycle_sum{rank="3"} %.1f' % sum(r["accepted_tokens"] for r in rows) in text
    assert 'specprof:cycles_total{rank="3"} 4.0' in text
    assert 'specprof:dropped_cycles_total{rank="3",reason="ring_overflow"} 5.0' in text
    tps = next(x for x in text.splitlines() if x.startswith('specprof:tokens_per_second{rank="3"}'))
    span_s = (rows[-1]["host_end_ns"] - rows[0]["host_start_ns"]) * 1e-9
    assert float(tps.split()[-1]) == pytest.approx(sum(r["accepted_tokens"] + r["requests"] for r in rows) / span_s)


def test_the_sink_feeds_the_metrics_the_same_as_observe_and_counts_a_row_without_timed_as_timed(tmp_path):
    """The sink hands the metrics value tuples (observe_values: no dict a cycle): the exposition equals that of
    observing the same rows one by one; a row made elsewhere without a 'timed' key counts as timed (its phases
    observed), as observe_many always did."""
    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    rows = _rows(5, rank=1)
    for r in rows[:2]:
        del r["timed"]
    direct, sunk = prom.CollectorRegistry(), prom.CollectorRegistry()
    m = make_metrics(1, registry=direct)
    m.observe_many([dict(r) for r in rows])
    m.publish()
    s = Sink(lambda: (LogWriter(str(tmp_path), 1, 1), make_metrics(1, registry=sunk)), threaded=False)
    for r in rows:
        s.add(dict(r))
    s.close()
    def samples(registry):      # the values, not the registries' creation times nor the shim's own time (sink_ns)
        return [x for x in prom.generate_latest(registry).decode().splitlines()
                if not x.startswith(("specprof:shim", "#")) and "_created" not in x]
    lines = samples(direct)
    assert lines == samples(sunk) and len(lines) > 50
    assert 'specprof:phase_seconds_count{phase="verify",rank="1"} 5.0' in lines
    table = pq.read_table(next(tmp_path.glob("*.parquet")))
    assert table.column("timed").to_pylist() == [1, 1, 1, 1, 1]
    assert table.column("verify_ns").to_pylist() == [r["verify_ns"] for r in rows]


def test_a_log_row_of_the_wrong_length_is_refused(tmp_path):
    w = LogWriter(str(tmp_path), 0, 1)
    with pytest.raises(ValueError, match="a log row has"):
        w.add_values((1, 2, 3))
    assert w.buffered() == 0


def test_tokens_per_second_window_is_a_running_sum_equal_to_a_rescan():
    """The gauge's window (the last 10 s of cycles) kept as a running sum: equal to summing the window
    afresh after every cycle, over a window that slides past thousands of cycles (before, every row
    rescanned the window: its cost grew with the square of the cycle rate)."""
    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    m = make_metrics(0, registry=prom.CollectorRegistry())
    m.window_ns = 50_000_000                     # 50 ms: slides past most of the rows below
    rng = __import__("random").Random(7)
    t, rows = 0, []
    for k in range(3000):
        start = t + rng.randrange(0, 20_000)
        end = start + rng.randrange(100_000, 900_000)
        t = end
        row = dict(host_start_ns=start, host_end_ns=end, accepted_tokens=rng.randrange(0, 9), requests=rng.randrange(1, 5))
        rows.append(row)
        m.observe(row)
        if k % 97 == 0 or k == 2999:
            window = [r for r in rows if r["host_end_ns"] >= end - m.window_ns]
            want = sum(r["accepted_tokens"] + r["requests"] for r in window) / ((end - window[0]["host_start_ns"]) * 1e-9)
            assert m.tokens_per_second() == pytest.approx(want, rel=1e-12), k


def test_without_prometheus_client_one_warning_and_the_log_still_works(monkeypatch, tmp_path, capsys):
    from nvtx_annotate.live import metrics as M

    monkeypatch.setattr(M, "load_prometheus", lambda: None)
    wrappers.reset_for_tests()
    assert M.make_metrics(0, warn=wrappers.warn_once) is None
    assert M.make_metrics(0, warn=wrappers.warn_once) is None
    err = capsys.readouterr().err
    assert err.count("prometheus_client is not installed") == 1 and len(err.strip().splitlines()) == 1
    s = Sink(lambda: (LogWriter(str(tmp_path), 0, 1, row_group_rows=2), None), threaded=False)
    for r in _rows(3):
        s.add(r)
    s.close()
    assert pq.read_table(next(tmp_path.glob("*.parquet"))).num_rows == 3
    wrappers.reset_for_tests()


# ------------------------------------------------------------------ the analyzer's reader

def test_reader_returns_what_was_logged_across_ranks(tmp_path):
    from analyze.read.live_log import COLUMNS, file_metadata, live_cycles

    logged = {}
    for rank in (0, 1):
        rows = _rows(6, rank=rank)
        logged[rank] = rows
        w = LogWriter(str(tmp_path), rank, 100 + rank, spec_config=P.SpecConfig("EAGLE", 2, 1, 3, 2, True, 8),
                      row_group_rows=4)
        for r in rows:
            w.add(dict(r, pid=100 + rank))
        w.close()
    df = live_cycles(tmp_path)
    assert tuple(df.columns) == COLUMNS
    assert len(df) == 12
    for rank, rows in logged.items():
        sub = df[df["rank"] == rank].reset_index(drop=True)
        assert sub["cycle"].tolist() == [r["cycle"] for r in rows]
        assert sub["start_ns"].tolist() == [r["host_start_ns"] for r in rows]
        assert sub["end_ns"].tolist() == [r["host_end_ns"] for r in rows]
        for col in ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns"):
            assert sub[col].tolist() == [r[col] for r in rows]
        assert sub["accepted"].tolist() == [r["accepted_tokens"] for r in rows]
        assert sub["tokens"].tolist() == [r["accepted_tokens"] + r["requests"] for r in rows]
        assert sub["steps"].tolist() == [2] * 6
        periods = [b["host_start_ns"] - a["host_start_ns"] for a, b in zip(rows, rows[1:])]
        assert sub["period_ns"].tolist()[:-1] == periods and sub["period_ns"].isna().tolist()[-1]
    meta = file_metadata(next(tmp_path.glob("specprof_live-r1-*.parquet")))
    assert (meta["schema_version"], meta["rank"], meta["pid"]) == (1, 1, 101)
    assert meta["spec_config"]["steps"] == 2 and meta["spec_config"]["tp"] == 2


def test_reader_keeps_null_gpu_columns_and_breaks_periods_at_gaps(tmp_path):
    from analyze.read.live_log import live_cycles

    rows = []
    t = E.Timer(rows.append, events=None, clock=HostClock(), accept_lag=0)
    for k in (1, 2, 4):
        run_cycle(t, Gpu(), k)
    w = LogWriter(str(tmp_path), 0, 1)
    for r in rows:
        w.add(r)
    w.close()
    df = live_cycles(next(tmp_path.glob("*.parquet")))
    assert df["draft_ns"].isna().all() and df["accepted"].isna().all() and df["tokens"].isna().all()
    assert df["period_ns"].isna().tolist() == [False, True, True]
    assert df["period_ns"][0] == rows[1]["host_start_ns"] - rows[0]["host_start_ns"]


def test_reader_refuses_bad_files_with_one_line(tmp_path):
    import pandas as pd

    from analyze.errors import CorruptReport, MissingInput, TraceError, UnsuitableInput
    from analyze.read.live_log import live_cycles

    bad = tmp_path / "junk.parquet"
    bad.write_text("not parquet\n")
    with pytest.raises(CorruptReport) as e:
        live_cycles(bad)
    assert "junk.parquet" in str(e.value) and "\n" not in str(e.value)
    other = tmp_path / "other.parquet"
    pd.DataFrame({"rank": [0], "cycle": [1]}).to_parquet(other)
    with pytest.raises(UnsuitableInput) as e:
        live_cycles(other)
    assert "not a specprof timing log" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(MissingInput):
        live_cycles(tmp_path / "empty_dir_that_does_not_exist")
    (tmp_path / "d").mkdir()
    with pytest.raises(MissingInput):
        live_cycles(tmp_path / "d")
    assert issubclass(UnsuitableInput, TraceError)


def test_metrics_served_on_the_port_of_the_rank_and_the_sink_thread_drains():
    prom = pytest.importorskip("prometheus_client")
    import socket
    import time
    import urllib.request

    from nvtx_annotate.live.metrics import make_metrics

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = prom.CollectorRegistry()
    m = make_metrics(2, registry=registry, port=port)
    s = Sink(lambda: (None, m), interval_s=0.01)
    for r in _rows(3, rank=2):
        s.add(r)
    deadline = time.monotonic() + 10
    while s.handled < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    s.close()
    assert s.handled == 3
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert 'specprof:cycles_total{rank="2"} 3.0' in body


def test_the_dashboard_queries_only_metrics_the_shim_exports():
    """dashboards/specprof_live.json: every specprof:* name in its queries is one the metrics export."""
    import json
    import re
    from pathlib import Path

    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    registry = prom.CollectorRegistry()
    m = make_metrics(0, registry=registry)
    for r in _rows(2):
        m.observe(r)
    exported = {s.name for fam in registry.collect() for s in fam.samples}
    dash = json.loads((Path(__file__).resolve().parents[1] / "dashboards" / "specprof_live.json").read_text())
    queried = {n for p in dash["panels"] for t in p["targets"] for n in re.findall(r"specprof:[a-z_]+", t["expr"])}
    assert queried and queried <= exported, queried - exported
    assert {"specprof:phase_seconds_bucket", "specprof:tokens_per_second"} <= queried


def test_rows_leave_in_cycle_order_whichever_thread_polls():
    """A poll on one thread (cycle 1, slow to turn into a row) and SGLang's idle hook on another
    (cycle 2, whose accept length will not come): cycle 2 must not overtake cycle 1."""
    import threading

    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=10)
    gpu.done = False                           # both still running on the GPU: nothing resolves yet
    run_cycle(t, gpu, 1, accept=(1, 1))
    run_cycle(t, gpu, 2)                       # no accept: only idle() resolves it
    assert rows == []
    gpu.done = True
    inside, release = threading.Event(), threading.Event()
    real_row = t.row

    def slow_row(rec):
        if rec.cycle == 1:
            inside.set()
            release.wait(5)
        return real_row(rec)

    t.row = slow_row
    a = threading.Thread(target=t.poll)
    a.start()
    assert inside.wait(5)
    b = threading.Thread(target=t.idle)
    b.start()
    b.join(0.2)                                # idle waits for the poll in progress
    release.set()
    a.join(5)
    b.join(5)
    assert [r["cycle"] for r in rows] == [1, 2]


def test_an_abandoned_log_completes_what_it_wrote(tmp_path):
    w = LogWriter(str(tmp_path), 0, 1, row_group_rows=2)
    for r in _rows(5):
        w.add(r)                               # two row groups written, one row buffered
    w.abandon()
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1 and not list(tmp_path.glob("*.tmp"))
    assert pq.read_table(files[0]).num_rows == 4


def test_events_off_times_the_host_only(tmp_path):
    """SPECPROF_TIMING_EVENTS=0: the timer records no CUDA event (host times only: the overhead
    benchmark's split between the events and the rest of the timing mode)."""
    s, _ = live.settings_from_env({"SPECPROF_TIMING_EVENTS": "0", "SPECPROF_TIMING_DIR": str(tmp_path)})
    on = live.enable(s, threaded=False)
    try:
        assert on.timer._events_ready and on.timer._factory is None
    finally:
        live.disable()
    s, _ = live.settings_from_env({"SPECPROF_TIMING_DIR": str(tmp_path)})
    on = live.enable(s, threaded=False)
    try:
        assert not on.timer._events_ready          # "auto": torch's events looked up at the first cycle
        # no profiler behind the timing: the shim keeps no clock of the cycles (nvtx_annotate/clock.py)
        assert not on.tee.records_marks and wrappers._clock is None
    finally:
        live.disable()
        wrappers.reset_for_tests()


def test_sampling_times_one_cycle_in_n_and_logs_every_cycle(fake_sglang, monkeypatch, tmp_path):
    """SPECPROF_TIMING_SAMPLE=N: CUDA events only in the cycles whose number is a multiple of N (every
    TP rank the same cycles); the others come out too, with their host start and end and accept lengths,
    every event column and the phases' host times null (nothing is recorded inside them: what the shim costs
    there is its wrappers), ``timed`` 0; no event is recorded for them."""
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 3)
    _drive(name, gpu, 7, [2, 0, 3])
    state.timer.close()
    rows = state.sink.pending_rows()
    assert [r["cycle"] for r in rows] == [1, 2, 3, 4, 5, 6, 7]
    assert [r["timed"] for r in rows] == [0, 0, 1, 0, 0, 1, 0]
    # the worker handed the untimed cycles over as their records (the sink makes their rows), the timed as rows
    assert [type(x).__name__ for x in state.sink._rows] == ["CycleRecord", "CycleRecord", "dict", "CycleRecord",
                                                           "CycleRecord", "dict", "CycleRecord"]
    for r in rows:
        timed = (r["draft_ns"], r["verify_ns"], r["allreduce_ns"], r["draft_extend_ns"], r["gpu_span_ns"])
        assert timed == ((300, 280, 80, 120, 700) if r["timed"] else (None,) * 5)
        assert r["host_end_ns"] > r["host_start_ns"]
        assert (r["verify_host_ns"] is not None) == bool(r["timed"])
        assert (r["accepted_tokens"], r["requests"]) == (5, 3)
    assert state.timer.counters["capture_skips"] == 0
    state.sink.close()


def test_the_timer_records_no_event_in_an_untimed_cycle():
    """The cost is the events (docs/live.md): a cycle left out by the sampling records none."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.sample_every = 2
    for k in (1, 2, 3, 4):
        before = len(gpu.recorded)
        run_cycle(t, gpu, k, draft=100, verify=200, allreduce=10, extend=50, accept=(1, 2))
        assert (len(gpu.recorded) > before) == (k % 2 == 0)
    t.poll()
    assert [r["verify_ns"] for r in rows] == [None, 200, None, 200]
    with pytest.raises(ValueError):
        E.Timer(lambda r: None, events=None, sample_every=0)


def _sampled_cycles(t: E.Timer, gpu: Gpu, lengths: list) -> None:
    """Four cycles, one in two timed, each with its per-request accept lengths (``lengths`` changed in place after
    the accept: the timer keeps what it was given)."""
    t.sample_every, t.rank, t.spec = 2, 0, P.SpecConfig("EAGLE", 3, 1, 4, 1, True, 8)
    for k in (1, 2, 3, 4):
        run_cycle(t, gpu, k, draft=100, verify=200, allreduce=10, extend=50)
        lengths[:] = [k % 3, 1, 2]
        t.accept(sum(lengths), 3, k, 3, lengths)
        lengths[:] = [9, 9, 9]
    t.poll()


def test_a_cycle_without_events_is_handed_over_as_its_record_and_made_into_the_same_row():
    """With ``on_record`` the worker thread hands a cycle without event pairs over as it is (the sink makes its row
    on its own thread): the rows made from the records equal those the timer makes itself, accept lengths' text
    included; a timed cycle still comes as its row (its events read and released on the worker)."""
    gpu_a, gpu_b = Gpu(), Gpu()
    t_a, rows_a = make_timer(gpu_a, accept_lag=1)
    got = []
    t_b = E.Timer(got.append, events=gpu_b.events(), clock=HostClock(), accept_lag=1, on_record=got.append)
    _sampled_cycles(t_a, gpu_a, [0, 0, 0])
    _sampled_cycles(t_b, gpu_b, [0, 0, 0])
    assert [type(x).__name__ for x in got] == ["CycleRecord", "dict", "CycleRecord", "dict"]
    made = [x if isinstance(x, dict) else t_b.row(x) for x in got]
    assert made == rows_a and len(made) == 4
    assert [r["accept_lens"] for r in made] == ["1,1,2", "2,1,2", "0,1,2", "1,1,2"]
    assert [r["verify_ns"] for r in made] == [None, 200, None, 200]
    assert t_b.counters["resolved"] == 4


def test_a_records_values_are_its_row_in_field_order():
    """Timer.values (the sink's row of a handed-over record, no dict a cycle) is Timer.row's values in ROW_FIELDS
    order: for cycles the sampling left without events (built straight from the record), and for a timed cycle
    without CUDA events (host phase times: made through row())."""
    gpu = Gpu()
    got = []
    t = E.Timer(got.append, events=gpu.events(), clock=HostClock(), accept_lag=1, on_record=got.append)
    _sampled_cycles(t, gpu, [0, 0, 0])
    records = [x for x in got if not isinstance(x, dict)]
    assert len(records) == 2
    for rec in records:
        assert t.values(rec) == tuple(t.row(rec)[f] for f in E.ROW_FIELDS)
        assert dict(zip(E.ROW_FIELDS, t.values(rec)))["timed"] == 0
    rec = E.CycleRecord(5, 1_000, timed=True)           # no CUDA: a timed cycle with host phase times only
    rec.end_ns, rec.host["verify"], rec.lens = 4_000, 1_200, (1, 2)
    rec.accepted, rec.requests, rec.batch_size, rec.own = 3, 2, 2, 77
    row = t.row(rec)
    assert t.values(rec) == tuple(row[f] for f in E.ROW_FIELDS)
    assert (row["verify_host_ns"], row["accept_lens"], row["timed"], row["shim_ns"]) == (1_200, "1,2", 1, 77)


def test_the_sink_makes_handed_over_records_into_rows_and_leaves_out_one_that_fails(tmp_path):
    """Records reach the log as rows (made on the sink's thread, in order with the rows); one that cannot be made
    into a row is said through ``on_error`` and left out, the others written."""
    from nvtx_annotate.live.log import LogWriter
    from nvtx_annotate.live.sink import Sink
    import pyarrow.parquet as pq

    errors = []

    def make_row(rec):
        if rec == "bad":
            raise ValueError("no row")
        return dict(E._EMPTY_ROW, cycle=rec, rank=0, pid=1, timed=0, host_start_ns=rec, host_end_ns=rec + 1)
    s = Sink(lambda: (LogWriter(str(tmp_path), 0, 1), None), threaded=False, make_row=make_row,
             on_error=lambda where, exc: errors.append(where))
    s.add(1)
    s.add(dict(E._EMPTY_ROW, cycle=2, rank=0, pid=1, timed=1, host_start_ns=2, host_end_ns=3))
    assert [r["cycle"] for r in s.pending_rows()] == [1, 2]
    s.add("bad")
    s.add(4)
    s.close()
    table = pq.read_table(next(tmp_path.glob("*.parquet")))
    assert table.column("cycle").to_pylist() == [1, 2, 4] and table.column("timed").to_pylist() == [0, 1, 0]
    assert errors == ["live sink (row)"]


# ------------------------------------------------------------------ CUDA graph launches timed on their own

def hooked_cycle(t: E.Timer, gpu: Gpu, k: int, prep=700, launch_gap=5, draft=300, verify=400, extend=150,
                 graph=None):
    """A cycle as SGLang runs it with CUDAGraph.replay hooked: each replay range holds ``prep`` ns of Python
    (SGLang's replay_prepare) with the stream idle before the graph's launch; the launch's own host time
    before the kernels reach the stream is ``launch_gap``; draft_extend's replay range outside its phase."""
    def replay(name, ns):           # SGLang's replay range: its Python, then the hooked launch
        t.push(name)
        gpu.run(prep)
        t.time_graph(graph(ns) if graph is not None else lambda: gpu.run(launch_gap + ns))
        t.pop()

    t.push(P.DECODE_CYCLE, k)
    for phase, name, ns in ((P.DRAFT, P.GRAPH_REPLAY_DRAFT, draft), (P.VERIFY, P.GRAPH_REPLAY_VERIFY, verify)):
        t.push(phase)
        replay(name, ns)
        t.pop()
    replay(P.GRAPH_REPLAY_DRAFT_EXTEND, extend)      # outside its phase's range, as SGLang runs it
    t.accept(3, 2, None)
    t.pop()


def test_a_hooked_graph_launch_is_timed_without_the_replay_ranges_python():
    """With CUDAGraph.replay hooked the replay column is the graph's launch alone (its stream time, here
    the launch gap and its kernels), not the replay range (which held 700 ns of Python with the stream
    idle: on real SGLang the range's events gave verify 6.0 ms where nsys's kernels spanned 4.4): the
    range records no pair of its own; the phase column still spans the phase."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.graph_hooked = True
    hooked_cycle(t, gpu, 1)
    t.poll()
    r = rows[0]
    assert (r["draft_replay_ns"], r["verify_replay_ns"], r["draft_extend_replay_ns"]) == (305, 405, 155)
    assert (r["draft_ns"], r["verify_ns"], r["draft_extend_ns"]) == (1005, 1105, 855)
    assert len(gpu.recorded) == 12            # 3 phases + 3 launches, a pair each: no pair for the ranges
    # not hooked (graph_hooked False, and nothing calls time_graph then: the launches run untimed): the
    # replay range is the replay, its Python included
    gpu2 = Gpu()
    t2, rows2 = make_timer(gpu2, accept_lag=0)
    t2.time_graph = lambda launch: launch()
    hooked_cycle(t2, gpu2, 1)
    t2.poll()
    assert (rows2[0]["draft_replay_ns"], rows2[0]["verify_replay_ns"]) == (1005, 1105)


def test_a_graph_launch_outside_a_timed_phase_runs_untimed():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, sample_every=2)
    t.graph_hooked = True
    assert t.time_graph(lambda: "out") == "out"           # no cycle open
    hooked_cycle(t, gpu, 1)                                  # a cycle the sampling leaves out
    assert gpu.recorded == []
    t.push(P.DECODE_CYCLE, 2)
    t.push(P.ALLREDUCE)
    assert t.time_graph(lambda: 7) == 7 and len(gpu.recorded) == 1     # the all-reduce's start event only
    t.pop()
    t.pop()


def test_hook_cuda_graphs_patches_the_class_once_and_follows_the_timer(monkeypatch):
    """The hook patches torch.cuda.CUDAGraph.replay (torch found in sys.modules, never imported) once per
    process; the newest timer gets the launches; after unhook the original runs straight through."""
    gpu = Gpu()
    launched = []

    class CUDAGraph:
        def replay(self):
            gpu.run(250)
            launched.append(1)
            return "done"

    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=SimpleNamespace(CUDAGraph=CUDAGraph)))
    original = CUDAGraph.replay
    try:
        t, rows = make_timer(gpu, accept_lag=0)
        assert E.hook_cuda_graphs(t) and CUDAGraph.replay._specprof_original is original
        t.graph_hooked = True
        t2, rows2 = make_timer(gpu, accept_lag=0)
        assert E.hook_cuda_graphs(t2) and CUDAGraph.replay._specprof_original is original   # not wrapped twice
        t2.graph_hooked = True
        g = CUDAGraph()
        assert g.replay() == "done"                          # no cycle: straight through
        t2.push(P.DECODE_CYCLE, 1)
        t2.push(P.VERIFY)
        assert g.replay() == "done"
        t2.pop()
        t2.accept(1, 1, None)
        t2.pop()
        t2.poll()
        assert rows2[0]["verify_replay_ns"] == 250 and rows2[0]["verify_ns"] == 250 and rows == []
        E.unhook_cuda_graphs()
        n = len(gpu.recorded)
        t2.push(P.DECODE_CYCLE, 2)
        t2.push(P.VERIFY)
        g.replay()
        t2.pop()
        t2.pop()
        assert len(gpu.recorded) == n + 2 and len(launched) == 3    # the phase's pair only
    finally:
        E.unhook_cuda_graphs()
        CUDAGraph.replay = original
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=SimpleNamespace()))
    assert not E.hook_cuda_graphs(make_timer(gpu)[0])


def test_the_first_cycle_with_torchs_events_hooks_the_graphs(monkeypatch):
    """Events "auto": at the first cycle, torch's CUDA events found (CUDA up) -> CUDAGraph.replay hooked and
    the replay ranges time no pair of their own; a timer on other events (tests, none) hooks nothing."""
    gpu = Gpu()

    class CUDAGraph:
        def replay(self):
            gpu.run(90)

    cuda = SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True, CUDAGraph=CUDAGraph,
                           Event=lambda enable_timing: StubEvent(gpu), is_current_stream_capturing=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    original = CUDAGraph.replay
    try:
        rows = []
        t = E.Timer(rows.append, events="auto", clock=HostClock(), accept_lag=0)
        t.push(P.DECODE_CYCLE, 1)
        assert t.graph_hooked
        t.push(P.GRAPH_REPLAY_VERIFY)          # opens verify (outside its range), times no pair of its own
        gpu.run(40)
        CUDAGraph().replay()
        t.pop()
        t.accept(0, 1, None)
        t.pop()
        t.poll()
        assert (rows[0]["verify_ns"], rows[0]["verify_replay_ns"]) == (130, 90)
        other = make_timer(gpu)[0]
        other.push(P.DECODE_CYCLE, 1)
        assert not other.graph_hooked
    finally:
        E.unhook_cuda_graphs()
        CUDAGraph.replay = original


def test_without_events_every_cycle_counts_as_timed():
    """No CUDA (or SPECPROF_TIMING_EVENTS=0): nothing to sample; every cycle is timed=1 with host times, as
    before the sampling (sampling would only throw away cycles)."""
    t, rows = make_timer(None, accept_lag=0, sample_every=17)
    for k in range(1, 6):
        run_cycle(t, Gpu(), k, accept=(1, 1))
    t.poll()
    assert [r["timed"] for r in rows] == [1] * 5 and all(r["verify_ns"] is None for r in rows)
    assert all(r["verify_host_ns"] is not None for r in rows)


def test_the_graph_hook_never_raises_the_timers_errors_and_runs_the_launch_once():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.graph_hooked = True
    runs = []
    t.push(P.DECODE_CYCLE, 1)
    t.push(P.VERIFY)
    broken = t._record
    t._record = lambda rec, key: 1 / 0            # the timer's event fails: the launch still runs, once
    assert t.time_graph(lambda: runs.append(1) or "ok") == "ok" and runs == [1]
    t._record = broken
    assert t.counters["graph_hook_faults"] == 1
    with pytest.raises(RuntimeError):             # the launch's own error is the caller's
        t.time_graph(lambda: (_ for _ in ()).throw(RuntimeError("replay failed")))
    t.pop()
    t.accept(0, 1, None)
    t.pop()
    t.poll()
    assert rows[0]["verify_replay_ns"] is None and rows[0]["verify_ns"] is not None


def test_a_gated_launch_times_the_graphs_kernels_not_the_launch_calls_host_time():
    """In a host-bound cycle the stream is idle while cudaGraphLaunch builds the launch (1.0-1.4 ms for real
    SGLang's verify graph on an H100): an ungated pair holds that host time (verify's replay +35% over nsys's
    kernel span, draft's +100%); gated, the stream reaches the start event with the graph queued."""
    def launch(gpu):
        return lambda ns: (lambda: gpu.launch(1000, ns))   # 1,000 ns of launch call, then the kernels
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.graph_hooked = True
    hooked_cycle(t, gpu, 1, graph=launch(gpu))
    gated_gpu = Gpu()
    gate = StubGate(gated_gpu)
    g, gated = make_timer(gated_gpu, accept_lag=0, gate=gate)
    g.graph_hooked = True
    hooked_cycle(g, gated_gpu, 1, graph=launch(gated_gpu))
    t.poll()
    g.poll()
    replays = ("draft_replay_ns", "verify_replay_ns", "draft_extend_replay_ns")
    assert [rows[0][c] for c in replays] == [1300, 1400, 1150]
    assert [gated[0][c] for c in replays] == [300, 400, 150]
    assert gate.calls == ["hold", ("release", 1), "hold", ("release", 2), "hold", ("release", 3)]
    assert gated[0]["verify_ns"] == rows[0]["verify_ns"]       # the phase's own pair is not gated


def test_the_gate_is_released_whatever_the_launch_does_and_never_held_untimed():
    gpu = Gpu()
    gate = StubGate(gpu)
    t, rows = make_timer(gpu, accept_lag=0, gate=gate, sample_every=2)
    t.graph_hooked = True
    hooked_cycle(t, gpu, 1, graph=lambda ns: (lambda: gpu.launch(10, ns)))     # left out by the sampling
    assert gate.calls == []
    t.push(P.DECODE_CYCLE, 2)
    t.push(P.VERIFY)
    with pytest.raises(RuntimeError):
        t.time_graph(lambda: (_ for _ in ()).throw(RuntimeError("replay failed")))
    assert gate.calls == ["hold", ("release", 1)] and gpu.held is None
    gpu.capturing = True                           # never held while the stream captures a graph
    assert t.time_graph(lambda: "captured") == "captured" and len(gate.calls) == 2
    gpu.capturing = False
    t.pop()
    t.pop()


def test_a_gate_the_driver_refuses_is_dropped_and_the_launch_timed_ungated():
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, gate=StubGate(gpu, fail=True))
    t.graph_hooked = True
    hooked_cycle(t, gpu, 1, graph=lambda ns: (lambda: gpu.launch(1000, ns)))
    hooked_cycle(t, gpu, 2, graph=lambda ns: (lambda: gpu.launch(1000, ns)))
    t.poll()
    assert t.counters["graph_gate_faults"] == 1 and t._gate is None
    assert [r["verify_replay_ns"] for r in rows] == [1400, 1400]


def test_the_stream_gate_waits_cyclically_on_the_pinned_word():
    """StreamGate over a fake driver: each hold asks the stream to wait for the next number (flag GEQ, a
    cyclic comparison: the count wraps at 2**32), release writes it into the word; a refusal raises."""
    import ctypes
    from nvtx_annotate.live import gate as G

    calls = []

    def wait(stream, address, value, flags):
        calls.append((stream.value, address.value, value.value, flags.value))
        return 0 if value.value != 7 else 1   # CUDA_ERROR_INVALID_VALUE for 7
    word = ctypes.c_uint32(0xFFFFFFFE)
    g = G.StreamGate(wait, lambda: 0x1234, word, 0xBEEF, watchdog=False)
    assert g.hold() == 0xFFFFFFFF and g.hold() == 0
    g.release(0)
    assert word.value == 0
    assert calls == [(0x1234, 0xBEEF, 0xFFFFFFFF, G.CU_STREAM_WAIT_VALUE_GEQ), (0x1234, 0xBEEF, 0, 0)]
    word.value = 5
    g2 = G.StreamGate(wait, lambda: 1, word, 1, watchdog=False)
    assert g2.hold() == 6
    for _ in range(2):                  # a refused number is not used up: the next hold asks for it again
        with pytest.raises(G.GateError):
            g2.hold()
    assert [c[2] for c in calls[-3:]] == [6, 7, 7]


def test_no_torch_no_gate_and_none_under_cuda_launch_blocking(monkeypatch):
    """No gate without torch's CUDA; none under CUDA_LAUNCH_BLOCKING whatever torch has (a launch that waits
    for its own kernels would wait for a stream that waits for the host)."""
    from nvtx_annotate.live import gate as G

    class Cuda:           # a torch whose CUDA is up: only the environment can say no before the driver
        calls = 0

        @classmethod
        def is_available(cls):
            cls.calls += 1
            return True
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=Cuda))
    assert G.torch_stream_gate({"CUDA_LAUNCH_BLOCKING": "1"}) is None and Cuda.calls == 0
    monkeypatch.setitem(sys.modules, "torch", None)
    assert G.torch_stream_gate({}) is None


def _fake_gate(start=0, **kw):
    import ctypes
    from nvtx_annotate.live import gate as G

    calls = []
    word = ctypes.c_uint32(start)
    now = [0.0]
    g = G.StreamGate(lambda *a: calls.append(a[2].value) or 0, lambda: 1, word, 2, clock=lambda: now[0],
                     watchdog=False, **kw)
    return g, word, now, calls


def test_the_gate_word_only_moves_forward_whatever_order_threads_release_in():
    """Two holds (two threads): the later released first frees both; the earlier's release after it writes
    nothing (the word never goes back, which would hold the later's stream again)."""
    g, word, _, _ = _fake_gate()
    a, b = g.hold(), g.hold()
    g.release(b)
    g.release(a)
    assert (a, b, word.value) == (1, 2, 2)
    g2, word2, _, _ = _fake_gate(start=0xFFFFFFFF)          # across the wrap
    c = g2.hold()
    g2.release(c)
    g2.release(0xFFFFFFFF)
    assert (c, word2.value) == (0, 0)


def test_the_gate_watchdog_frees_a_stuck_hold_and_the_timer_drops_the_gate():
    """A launch that waits for the GPU (CUDA_LAUNCH_BLOCKING, a serialising tool) never returns while its
    stream waits for the host: the watchdog writes the held number after timeout_s, marks the gate tripped;
    the timer's next timed launch drops it (graph_gate_timeouts) and times the launches ungated."""
    g, word, now, _ = _fake_gate(timeout_s=0.25)
    n = g.hold()
    now[0] = 0.2
    assert not g.check() and word.value == 0
    now[0] = 0.3
    assert g.check() and g.tripped and word.value == n
    g.release(n)                                  # the stuck launch returned at last: nothing more to write
    assert word.value == n and not g.check()
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0, gate=g)
    t.graph_hooked = True
    hooked_cycle(t, gpu, 1, graph=lambda ns: (lambda: gpu.launch(1000, ns)))
    t.poll()
    assert t._gate is None and t.counters["graph_gate_timeouts"] == 1
    assert rows[0]["verify_replay_ns"] == 1400      # ungated: the launch call's host time included


def test_the_gate_is_released_when_the_start_event_fails_after_the_hold():
    gpu = Gpu()
    gate = StubGate(gpu)
    t, rows = make_timer(gpu, accept_lag=0, gate=gate)
    t.graph_hooked = True
    t.push(P.DECODE_CYCLE, 1)
    t.push(P.VERIFY)
    broken = t._record
    t._record = lambda rec, key: 1 / 0
    assert t.time_graph(lambda: "ran") == "ran"
    t._record = broken
    assert gate.calls == ["hold", ("release", 1)] and gpu.held is None and t.counters["graph_hook_faults"] == 1
    t.pop()
    t.pop()


def test_a_gate_release_that_raises_is_counted_not_raised():
    gpu = Gpu()

    class Raising(StubGate):
        def release(self, n):
            raise OSError("gone")
    t, rows = make_timer(gpu, accept_lag=0, gate=Raising(gpu))
    t.graph_hooked = True
    t.push(P.DECODE_CYCLE, 1)
    t.push(P.VERIFY)
    assert t.time_graph(lambda: gpu.launch(5, 10) or "ok") == "ok"
    assert t.counters["graph_gate_faults"] == 1 and t._gate is None     # no more holds on a gate that failed
    t.pop()
    t.pop()


def test_a_replay_range_the_hook_never_saw_turns_the_ranges_back_on():
    """SGLANG_ENABLE_CUDA_GRAPH_DEDUP launches graphs through cudaGraphLaunch, not CUDAGraph.replay: the first
    replay range that closes with no hooked launch inside hands the replay timing back to the ranges."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=0)
    t.graph_hooked = True
    run_cycle(t, gpu, 1, accept=(1, 1))            # its draft replay range saw no CUDAGraph.replay
    assert not t.graph_hooked and t.counters["graph_hook_unused"] == 1
    run_cycle(t, gpu, 2, accept=(1, 1))
    t.poll()
    assert rows[0]["draft_replay_ns"] is None and rows[1]["draft_replay_ns"] == 300


def test_adaptive_speculation_logs_each_cycles_own_step_count(fake_sglang, monkeypatch, tmp_path):
    """SGLang's --speculative-adaptive switches the worker's speculative_num_steps at run time: each row
    carries the step count the worker held as its cycle closed (and steps + 1 verified tokens a request,
    topk 1), not the process's configured start value; analyze-trace splits a log by it."""
    name, rec = fake_sglang
    gpu, state = _timed_install(name, monkeypatch, tmp_path, 1)
    _drive(name, gpu, 5, [2, 0, 3], adaptive_steps=[3, 3, 1, 1, 5])
    state.timer.close()
    rows = state.sink.pending_rows()
    assert [r["steps"] for r in rows] == [3, 3, 1, 1, 5]
    assert [r["verified_tokens"] for r in rows] == [12, 12, 6, 6, 18]
    assert wrappers.on_cycle_steps == state.timer.cycle_steps
    live.disable()
    assert wrappers.on_cycle_steps is None


@pytest.mark.parametrize("adaptive", [True, False])
def test_an_adaptive_process_marks_each_cycles_step_count_for_nsys(fake_sglang, monkeypatch, adaptive):
    """Under nsys alone (no timing mode): a process SGLang runs with --speculative-adaptive marks the step
    count each decode cycle ran (``spec_steps=S cycle=K``, the worker's speculative_num_steps as the cycle
    closes: SGLang activates it at the start of forward_batch_generation); a fixed-steps process marks none."""
    name, rec = fake_sglang
    monkeypatch.delenv("SPECPROF_TIMING", raising=False)
    shim.install(name)
    _drive(name, Gpu(), 5, [2, 0, 3], adaptive_steps=[3, 3, 1, 1, 5], adaptive=adaptive)
    marks = [t for t, _ in rec.marks() if t.startswith(P.STEPS_PREFIX)]
    if adaptive:
        assert [P.parse_steps_mark(t) for t in marks] == [(3, 1), (3, 2), (1, 3), (1, 4), (5, 5)]
    else:
        assert marks == []
    assert rec.balanced()


def test_a_switched_step_count_gives_verified_tokens_only_for_a_chain():
    """steps + 1 verified tokens a request holds for topk 1 (the only adaptive SGLang runs); a process whose
    topk is not 1, or unknown, gets the step count and no verified-token figure."""
    for spec, verified in ((P.SpecConfig("EAGLE", 3, 1, 4, 1, True, 8), 10), (P.SpecConfig("EAGLE", 3, 4, 8, 1, True, 8), None),
                           (None, None)):
        t, rows = make_timer(None, accept_lag=0)
        t.spec = spec
        t.push(P.DECODE_CYCLE, 1)
        t.accept(3, 2, None)
        t.cycle_steps(4)
        t.pop()
        t.poll()
        assert (rows[0]["steps"], rows[0]["verified_tokens"]) == (4, verified)


def test_the_row_keeps_the_per_request_accept_lengths_where_they_are_one_a_request():
    """accept(..., lengths=[...]) logs them as the accept mark's lens= ("a,b,..."); none where they are not
    one non-negative int a request, or there are more requests than an accept mark lists."""
    gpu = Gpu()
    t, rows = make_timer(gpu, accept_lag=10)
    for k in range(1, 6):
        run_cycle(t, gpu, k)
    t.accept(3, 3, 1, lengths=[2, 0, 1])
    t.accept(3, 2, 2, lengths=[2, 0, 1])               # three lengths for two requests
    t.accept(1, 2, 3, lengths=[2, -1])                 # a negative length
    big = P.ACCEPT_LENS_MAX_REQS + 1
    t.accept(big, big, 4, lengths=[1] * big)           # more requests than a mark lists
    t.accept(2, 2, 5)                                  # no lengths given (an older hook)
    t.poll()
    assert [r["accept_lens"] for r in sorted(rows, key=lambda r: r["cycle"])] == ["2,0,1", None, None, None, None]
    from nvtx_annotate import wrappers

    seen = []
    wrappers.on_accept = lambda *a: seen.append(a)
    try:
        class B:
            def mark(self, text, payload):
                pass
        assert wrappers.emit_accept([1, 0, 2], 7, b=B())
    finally:
        wrappers.on_accept = None
    assert seen == [(3, 3, 7, None, [1, 0, 2])]
