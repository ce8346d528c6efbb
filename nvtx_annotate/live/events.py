"""Per-cycle CUDA-event timing without blocking: a :class:`Timer` fed by the shim's own range
calls (through :class:`TeeBackend`) and accept lengths, and a bounded ring of ended cycles whose
events are polled with ``query()``; never ``synchronize``.

Flow on the worker thread (the thread that runs ``forward_batch_generation``):

* ``push("decode_cycle", K)``: open cycle K (host start: ``perf_counter_ns``).
* ``push(draft|verify|draft_extend|allreduce|graph_replay_*)`` inside an open cycle that the sampling
  times (a cycle it leaves out records nothing but its host start and end, accept lengths, steps): one event
  recorded on the current stream (none while the stream captures a CUDA graph, none without CUDA);
  a graph replay inside its open phase (``graph_replay_draft`` inside ``draft``) records its own pair
  too: ``<phase>_replay_ns``, the graph's kernels without the phase's Python.
* a CUDA graph's launch inside an open phase (``torch.cuda.CUDAGraph.replay``, hooked by
  :func:`hook_cuda_graphs` once CUDA is up): an event right before the launch and one right after, the
  stream held by a :class:`~nvtx_annotate.live.gate.StreamGate` until the launch call returns, so
  ``<phase>_replay_ns`` is the graph's stream time alone (its kernels and the gaps between them), neither
  the Python the replay range holds before the launch (SGLang's ``replay_prepare``) nor the launch call's
  own host time; where the hook is in place the graph-replay ranges time no pair of their own.
* ``pop()``: the phase's end event; the cycle's ``pop`` closes it (host end) and moves it into the
  ring, polls it (the cycle's one poll), then drops the oldest pending cycle (counted) when the ring is
  over full.
* :meth:`Timer.accept` (any thread): accepted draft tokens / requests of cycle K (or of the cycle
  open on the calling thread when K is None).

A pending cycle is resolved, oldest first, when every one of its events answers ``query()`` True
and its accept lengths arrived (or ``accept_lag`` newer cycles have ended without them: accept
columns null). Resolving turns event pairs into nanoseconds (``elapsed_time``) and hands one row
(a dict, :data:`ROW_FIELDS`) to ``on_row``. Standard library only; torch is looked up lazily
(``sys.modules``) at the first cycle.
"""

from __future__ import annotations

import os
import sys
import time
from _thread import _local, allocate_lock
from collections import OrderedDict
from collections.abc import Callable
from types import MappingProxyType

from .. import protocol as P
from .gate import torch_stream_gate

PHASES = ("draft", "verify", "draft_extend", "allreduce")
"""The phases timed with CUDA events, in row order."""

PHASE_OF: dict[str, str] = {rng: phase for phase, names in P.PHASE_RANGES.items() if phase in PHASES
                            for rng in names}
"""Range name -> phase (graph replays count as their phase)."""

REPLAY_OF: dict[str, str] = {P.GRAPH_REPLAY_DRAFT: "draft", P.GRAPH_REPLAY_VERIFY: "verify",
                             P.GRAPH_REPLAY_DRAFT_EXTEND: "draft_extend"}
"""Graph-replay range -> its phase: timed on their own too (``<phase>_replay_ns``)."""
REPLAYED = ("draft", "verify", "draft_extend")
_REPLAY = ":replay"           # suffix of a replay's key among a cycle's event pairs

ROW_FIELDS = ("rank", "pid", "cycle", "host_start_ns", "host_end_ns", "draft_ns", "verify_ns",
              "draft_extend_ns", "allreduce_ns", "gpu_span_ns", "accepted_tokens", "requests",
              "verified_tokens", "steps", "batch_size",
              "draft_host_ns", "verify_host_ns", "draft_extend_host_ns", "allreduce_host_ns",
              "draft_replay_ns", "verify_replay_ns", "draft_extend_replay_ns", "timed", "accept_lens", "shim_ns")
"""The keys of one resolved cycle (the Parquet log's columns, docs/live.md). ``<phase>_host_ns``: the
host time between the phase's entry and exit (where it exceeds the events' ``<phase>_ns`` the phase was
host bound: its events also timed the Python before its first launch). ``<phase>_replay_ns``: the event
time of the phase's CUDA-graph replays alone (null where none ran): its graph's kernels back to back,
none of the phase's Python; on real SGLang 0.5.17 (H100, 2026-12-05) the kernels launched by the
replays were 99% of verify's GPU time, 93% of draft's and 82% of draft_extend's (nsys). ``timed``: 1 where
the cycle's CUDA events were recorded, 0 for a cycle left out by the sampling (``sample_every``: its
host times and accept lengths only, every event column null). ``accept_lens``: the per-request accepted
draft tokens in request order, ``"a,b,..."`` (the accept mark's ``lens=``; null above
``ACCEPT_LENS_MAX_REQS`` requests): the exact acceptance distribution where a batch's sum cannot tell it.
``shim_ns``: the host time the shim itself took from the previous cycle's end to this cycle's end
(:attr:`Timer.own_ns`: every wrapper's own part, i.e. all but the wrapped call, with its NVTX ranges, accept
marks, these events and polls; the graph hook less the launch): what the shim costs the worker thread, logged so
that the log says what it costs (analyze-trace's ``timing_cost`` view). A timed cycle's events count in its own
row; resolving them (queries, ``elapsed_time``) and a cycle's close in the next cycle's; the time over an idle
gap (:data:`IDLE_GAP_FACTOR`: an idle server, or the timing paused) in none."""

_EMPTY_ROW = dict.fromkeys(ROW_FIELDS)
# Timer._base_values writes a row's tuple in this order without naming the fields: held to it here
assert ROW_FIELDS[:5] == ("rank", "pid", "cycle", "host_start_ns", "host_end_ns") and ROW_FIELDS[10:15] == (
    "accepted_tokens", "requests", "verified_tokens", "steps", "batch_size") and ROW_FIELDS[22:] == (
    "timed", "accept_lens", "shim_ns")

IDLE_GAP_FACTOR, IDLE_GAP_MIN_NS, IDLE_GAP_MAX_NS = 5, 20_000_000, 1_000_000_000
"""A gap from one cycle's end to the next one's start longer than ``IDLE_GAP_FACTOR`` x its running mean and
``IDLE_GAP_MIN_NS`` (before a mean exists: ``IDLE_GAP_MAX_NS``) is an idle server or a pause: the shim's time over
it is no cycle's. (The decode-cycle range is part of the period only: on real SGLang at 128 layers the gaps were
7-12 ms, growing with the GPU work, so no fixed limit tells them from idleness.)"""

IDLE_POLL_NS = 20_000_000
""":meth:`Timer.idle` polls at most this often: an idle SGLang 0.5.17 scheduler calls ``Scheduler.on_idle`` on every
turn of its loop (``event_loop_overlap``: only with no batch to run and none in flight; 86,074 calls in the pauses
of one benchmark that ran 7,736 cycles on an H100)."""

DROP_RING_OVERFLOW = "ring_overflow"
DROP_UNRESOLVED_AT_CLOSE = "unresolved_at_close"

_CYCLE = object()  # stack entry of a decode_cycle range
_NOTHING = None  # stack entry of a range that records nothing


class _LaunchCheck:
    """Stack entry of a graph-replay range inside its open phase while CUDAGraph.replay is hooked: the
    cycle's hooked launches when it opened (none more by its close: this SGLang launches its graphs some
    other way, e.g. ``SGLANG_ENABLE_CUDA_GRAPH_DEDUP``'s ``cudaGraphLaunch``; the ranges time the replays)."""

    __slots__ = ("launches",)

    def __init__(self, launches: int):
        self.launches = launches


def _lens_text(lengths, requests: int) -> str | None:
    """``"a,b,..."`` of the per-request accept lengths (the accept mark's ``lens=``), None where they are not
    one non-negative int a request or there are more than ``ACCEPT_LENS_MAX_REQS``."""
    if lengths is None or not 0 < requests <= P.ACCEPT_LENS_MAX_REQS:
        return None
    try:
        if len(lengths) != requests or min(lengths) < 0:
            return None
        # every cycle on the worker thread: small ints read from a table (protocol.format_lens's text)
        return ",".join(map(_DIGITS.__getitem__, lengths))
    except (TypeError, ValueError, IndexError):         # not ints, or a length beyond the table
        pass
    try:
        vals = [int(x) for x in lengths]
    except (TypeError, ValueError):
        return None
    if len(vals) != requests or min(vals) < 0:
        return None
    return P.format_lens(vals)


_DIGITS = tuple(str(i) for i in range(256))
_NO_HOST = MappingProxyType({})      # an untimed cycle's phase host times: none, and none can be added


class CycleRecord:
    """One decode cycle while it is open or pending."""

    __slots__ = ("cycle", "start_ns", "end_ns", "pairs", "first", "missing", "accepted", "requests", "batch_size",
                 "host", "timed", "launches", "steps", "lens", "own")

    def __init__(self, cycle: int, start_ns: int, timed: bool = True):
        self.cycle, self.start_ns, self.end_ns = cycle, start_ns, None
        self.timed = timed  # CUDA events recorded in this cycle (False: left out by the sampling)
        self.launches = 0  # graph launches timed through the CUDAGraph.replay hook
        self.steps = None  # the worker's step count as the cycle closed (adaptive speculation), else the config's
        self.lens = None  # the per-request accept lengths as given (a tuple; the row's text is made with the row)
        self.own = None   # the shim's own host ns from the previous cycle's end to this one's (shim_ns)
        self.first = None  # the cycle's first recorded event
        self.accepted = self.requests = self.batch_size = None
        if timed:
            # (key, start event, end event, also) in the order of their end events: key a phase or "<phase>:replay";
            # also: a second key the same two events time (a replay outside its phase's range), else None
            self.pairs: list = []
            self.host: dict = {}  # phase -> host ns between its entries and exits
            self.missing: set = set()  # phases entered whose time could not be measured
        else:       # nothing is recorded inside a cycle without events: shared empties that refuse a write
            self.pairs, self.host, self.missing = (), _NO_HOST, frozenset()


class _Thread(_local):
    def __init__(self):
        self.stack: list = []
        self.cycle: CycleRecord | None = None
        self.open_phases: list = []


def torch_events():
    """(event factory, capturing predicate) for CUDA events on the current stream, or (None, None)
    when this process has no initialised CUDA (host timing only). Never initialises CUDA."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return None, None
        event = cuda.Event

        def factory():
            return event(enable_timing=True)
        factory.torch_cuda = True      # torch's own events: CUDAGraph.replay is hooked too (Timer._begin)
        return factory, cuda.is_current_stream_capturing
    except Exception:
        return None, None


def elapsed_ns(start, end) -> int:
    """Nanoseconds between two completed events (``elapsed_time`` is in milliseconds)."""
    return int(round(start.elapsed_time(end) * 1e6))


class Timer:
    """See the module docstring. ``events``: ``"auto"`` (torch's CUDA events, decided at the first
    cycle), None (host timing only) or ``(factory, capturing)``: ``factory()`` -> an object with
    ``record()``, ``query()``, ``elapsed_time(other)`` (ms); ``capturing()`` -> True while the
    current stream captures a graph. ``identity()`` -> dict with ``rank`` and ``spec_config``
    (a :class:`~nvtx_annotate.protocol.SpecConfig`), asked while unknown. ``sample_every``: CUDA events in
    the cycles whose number is a multiple of it only (the others: host times and accept lengths); on real
    SGLang the events cost 2.7% of tokens/s at batch 1 and 12% at 16 when every cycle has them
    (docs/live.md), the rest of the timing nothing measurable. The cycle number decides, so every TP rank
    times the same cycles. ``on_record``: where given, a resolved cycle without event pairs goes there as its
    :class:`CycleRecord` and the receiver makes its row with :meth:`row` on its own thread (the sink's: the worker
    thread then only hands it over); without, every row is made here and goes to ``on_row``."""

    def __init__(self, on_row: Callable[[dict], None], events="auto", identity: Callable[[], dict] | None = None,
                 ring_size: int = 256, accept_lag: int = 4, time_allreduce: bool = True, max_pairs: int = 2048,
                 pool_max: int = 4096, clock: Callable[[], int] = time.perf_counter_ns, sample_every: int = 1,
                 gate="auto", own_clock: Callable[[], int] = time.perf_counter_ns,
                 on_record: Callable[[CycleRecord], None] | None = None):
        if ring_size < 1:
            raise ValueError("ring_size must be >= 1")
        if sample_every < 1:
            raise ValueError("sample_every must be >= 1")
        self.sample_every = sample_every
        self.on_row, self.identity_fn, self.clock = on_row, identity, clock
        self.on_record = on_record
        # the shim's own host time (ns) since the last cycle's end (a row's ``shim_ns``), on its own clock so
        # that a test's counting ``clock`` sees the calls it always saw
        self.own_clock, self.own_ns = own_clock, 0
        self.own_detail: dict | None = None   # SPECPROF_TIMING_OWN_DETAIL: {place: [ns, calls]} (charge())
        self._idle_polled = -IDLE_POLL_NS      # host ns of the last idle() poll
        self._last_end_ns = float("-inf")      # host ns of the last cycle's end (a gap resets own_ns: _begin)
        self._gap_ns = None                    # the running mean of the gaps from a cycle's end to the next's start
        # a cycle the sampling leaves without events is open (on the worker thread): the graph hook passes straight
        # through; so do the range wrappers (``pass_ranges``) unless a profiler behind the tee records the ranges
        # (``ranges_elsewhere``, set by the tee)
        self.in_untimed = False
        self.pass_ranges = False
        self.ranges_elsewhere = False
        self.ring_size, self.accept_lag, self.max_pairs, self.pool_max = ring_size, accept_lag, max_pairs, pool_max
        self.time_allreduce = time_allreduce
        self._events_spec = events
        self._factory = self._capturing = None
        self._events_ready = events != "auto"
        self.graph_hooked = False  # CUDAGraph.replay times the replays (hook_cuda_graphs), not the replay ranges
        # the stream gate of the hooked launches (gate.py): "auto" (torch's, made with the hook), None, or a gate
        self._gate_spec, self._gate = gate, (None if gate == "auto" else gate)
        if events is not None and events != "auto":
            self._factory, self._capturing = events
        self._tls = _Thread()
        self._lock = allocate_lock()
        self._emit_lock = allocate_lock()   # one poll at a time: rows leave in cycle order whichever thread polls
        self._ring: OrderedDict[int, CycleRecord] = OrderedDict()  # ended, not resolved; oldest first
        self._open: dict[int, CycleRecord] = {}  # open cycles (any thread), for accept lengths
        self._free: list = []
        self._newest_ended = 0
        self.pid = os.getpid()
        self.rank = None
        self.spec = None
        self.counters = {"cycles": 0, "resolved": 0, DROP_RING_OVERFLOW: 0, DROP_UNRESOLVED_AT_CLOSE: 0,
                         "late_accepts": 0, "unattributed_accepts": 0, "capture_skips": 0, "capped_pairs": 0,
                         "graph_hook_unused": 0, "graph_hook_faults": 0, "graph_gate_faults": 0,
                         "graph_gate_timeouts": 0}

    @property
    def events_every(self) -> int:
        """CUDA events in one cycle of this many (0: none: ``events=None``, or no CUDA found; before the first
        cycle resolves ``events="auto"``, the sampling asked for)."""
        if self._events_spec is None or (self._events_ready and self._factory is None):
            return 0
        return int(self.sample_every)

    # ------------------------------------------------------------------ backend calls
    def push(self, name: str, payload=None) -> None:
        t = self._tls
        entry = _NOTHING
        try:
            if name == P.DECODE_CYCLE:
                entry = _CYCLE
                self._begin(t, payload)
            elif t.cycle is None or not t.cycle.timed:
                # outside a cycle, or a cycle the sampling left without events: nothing to record (its host
                # start and end, accept lengths and step count are kept by the cycle's own calls)
                pass
            else:
                phase = PHASE_OF.get(name)
                if phase is not None and t.cycle is not None and phase not in t.open_phases and (
                        self.time_allreduce or phase != "allreduce"):
                    t.open_phases.append(phase)
                    # (key, start event, host start, the second key the pair times: a replay outside its
                    # phase's range times both)
                    entry = (phase, self._record(t.cycle, phase), self.clock(),
                             phase + _REPLAY if name in REPLAY_OF and not self.graph_hooked else None)
                elif name in REPLAY_OF:
                    if self.graph_hooked:
                        entry = _LaunchCheck(t.cycle.launches)
                    else:
                        key = REPLAY_OF[name] + _REPLAY
                        entry = (key, self._record(t.cycle, key), None, None)
        finally:
            t.stack.append(entry)

    def pop(self) -> None:
        t = self._tls
        if not t.stack:
            return
        entry = t.stack.pop()
        if entry is _NOTHING:
            return
        if entry is _CYCLE:
            self._end(t)
            return
        if type(entry) is _LaunchCheck:
            rec = t.cycle
            if rec is not None and rec.launches == entry.launches and self.graph_hooked:
                self.graph_hooked = False           # the hook saw no launch: the ranges time the replays
                self.counters["graph_hook_unused"] += 1
            return
        phase, start, host_t0, also = entry
        if phase in t.open_phases:
            t.open_phases.remove(phase)
        rec = t.cycle
        if rec is None:
            return
        if host_t0 is not None:
            rec.host[phase] = rec.host.get(phase, 0) + (self.clock() - host_t0)
        if not rec.timed:
            return
        self._close_pair(rec, phase, start, also)

    def _close_pair(self, rec: CycleRecord, key: str, start, also=None) -> None:
        """The end event of ``key``'s pair recorded now and the pair kept; the key (and ``also``) missing
        where either event could not be recorded or the cycle already holds ``max_pairs`` pairs."""
        end = self._record(rec, key) if start is not None else None
        keys = (key, also) if also is not None else (key,)
        if start is None or end is None:
            rec.missing.update(keys)
        elif len(rec.pairs) >= self.max_pairs:
            rec.missing.update(keys)
            self.counters["capped_pairs"] += 1
        else:
            rec.pairs.append((key, start, end, also))

    def time_graph(self, launch: Callable[[], object]):
        """``launch()`` (a CUDA graph's replay) between two events when this thread's cycle is timed and a
        phase is open: the pair counts as the innermost open phase's ``<phase>_replay_ns`` (draft, verify or
        draft_extend); the stream gated (gate.py) from before the start event until ``launch`` returns, so
        the pair holds the graph's kernels and not the launch call's host time. ``launch`` runs exactly once
        and what it returns or raises is the caller's; the gate is released whatever happens; the timer's
        own errors are counted (``graph_hook_faults``, ``graph_gate_faults``: the gate is then dropped and
        the launches timed ungated), never raised into the replay. A launch that raises leaves its phase's
        replay time missing (null) for the cycle. The hook's own host time (all of it but ``launch``'s) counts
        in :attr:`own_ns`."""
        clock, t0, box = self.own_clock, self.own_clock(), [0]

        def launch_timed():
            a = clock()
            try:
                return launch()
            finally:
                box[0] = clock() - a
        try:
            return self._time_graph(launch_timed)
        finally:
            self.charge("CUDAGraph.replay hook", clock() - t0 - box[0])

    def charge(self, place: str, ns: int) -> None:
        """``ns`` of the shim's own host time, spent at ``place`` (kept by place only with ``own_detail``)."""
        self.own_ns += ns
        detail = self.own_detail
        if detail is not None:
            d = detail.get(place)
            if d is None:
                detail[place] = [ns, 1]
            else:
                d[0] += ns
                d[1] += 1

    def _time_graph(self, launch: Callable[[], object]):
        key = rec = start = token = gate = None
        try:
            try:
                t = self._tls
                rec = t.cycle
                if rec is not None and rec.timed and t.open_phases:
                    phase = next((p for p in reversed(t.open_phases) if p in REPLAYED), None)
                    if phase is not None:       # inside the all-reduce only: no replay column of its own
                        key = phase + _REPLAY
                        rec.launches += 1
                        gate, token = self._hold()
                        start = self._record(rec, key)
            except Exception:
                self.counters["graph_hook_faults"] += 1
                key = None
            if key is None:
                return launch()
            try:
                out = launch()
            except BaseException:
                rec.missing.add(key)
                raise
        finally:
            if token is not None:
                try:
                    gate.release(token)
                except Exception:       # the gate's watchdog frees this hold; no more holds on it
                    self._gate = None
                    self.counters["graph_gate_faults"] += 1
        try:
            self._close_pair(rec, key, start)
        except Exception:
            self.counters["graph_hook_faults"] += 1
            rec.missing.add(key)
        return out

    def _hold(self) -> tuple:
        """(the gate, its release token) held on the current stream, or (None, None): no gate, a capture, the
        driver refused or the gate's watchdog had to free a stuck launch (counted: ``graph_gate_faults``,
        ``graph_gate_timeouts``; the gate is dropped for good and the launches are timed ungated)."""
        gate = self._gate
        if gate is None or self._factory is None:
            return None, None
        if getattr(gate, "tripped", False):
            self._gate = None
            self.counters["graph_gate_timeouts"] += 1
            return None, None
        capturing = self._capturing
        if capturing is not None and capturing():
            return None, None
        try:
            return gate, gate.hold()
        except Exception:
            self._gate = None
            self.counters["graph_gate_faults"] += 1
            return None, None

    def cycle_steps(self, steps: int) -> None:
        """The step count the cycle open on this thread ran (SGLang's ``--speculative-adaptive`` switches it
        at run time; the process's spec_config holds the start value only)."""
        rec = self._tls.cycle
        if rec is not None:
            rec.steps = int(steps)

    def accept(self, accepted: int, requests: int, cycle: int | None, batch_size: int | None = None,
               lengths=None) -> None:
        """Accepted draft tokens and requests of cycle ``cycle`` (None: the cycle open on this thread);
        ``lengths``: the per-request accept lengths (kept as ``"a,b,..."`` up to ACCEPT_LENS_MAX_REQS)."""
        with self._lock:
            if cycle is None:
                rec = self._tls.cycle
                if rec is None:
                    self.counters["unattributed_accepts"] += 1
                    return
            else:
                rec = self._open.get(cycle) or self._ring.get(cycle)
                if rec is None:
                    self.counters["late_accepts"] += 1
                    return
            rec.accepted, rec.requests = int(accepted), int(requests)
            rec.batch_size = int(batch_size) if batch_size is not None else int(requests)
            # the text is the row's (made off the worker thread for a cycle without events: on_record)
            rec.lens = tuple(lengths) if isinstance(lengths, (list, tuple)) else None

    # ------------------------------------------------------------------ cycle boundaries
    def _begin(self, t, k) -> None:
        if not self._events_ready:
            self._events_ready = True
            self._factory, self._capturing = torch_events()
            if getattr(self._factory, "torch_cuda", False):
                self.graph_hooked = hook_cuda_graphs(self)
                if self.graph_hooked and self._gate_spec == "auto":
                    self._gate = torch_stream_gate()
        if self.rank is None or self.spec is None:
            self._identify()
        if t.cycle is not None:  # a cycle inside a cycle (not emitted by the shim): keep the outer one
            return
        k = int(k) if k is not None else self.counters["cycles"] + 1
        now = self.clock()
        gap, typical = now - self._last_end_ns, self._gap_ns
        if gap > (IDLE_GAP_MAX_NS if typical is None else max(IDLE_GAP_FACTOR * typical, IDLE_GAP_MIN_NS)):
            # after a gap no decode step explains (an idle server, a pause): the shim's time meanwhile is no cycle's
            self._take_own_ns()
        else:       # the gap between one cycle's end and the next one's start, as it runs (a running mean)
            self._gap_ns = gap if typical is None else typical + (gap - typical) / 16
        # sampled: events in every sample_every-th cycle; with no events at all (no CUDA, events off) every
        # cycle counts as timed (host times only, as before the sampling)
        rec = CycleRecord(k, now, timed=self._factory is None or k % self.sample_every == 0)
        t.cycle, t.open_phases = rec, []
        self.in_untimed = not rec.timed
        self.pass_ranges = self.in_untimed and not self.ranges_elsewhere
        with self._lock:
            self._open[k] = rec

    def _end(self, t) -> None:
        rec = t.cycle
        if rec is None:
            return
        rec.end_ns = self._last_end_ns = self.clock()
        t.cycle, t.open_phases = None, []
        self.in_untimed = self.pass_ranges = False
        # the shim's time since the previous cycle's end is this cycle's (shim_ns): its own events and hooks,
        # the scheduler's hooks before it; what this cycle's close (the poll below) takes counts for the next
        rec.own = self._take_own_ns()
        dropped = None
        # the one poll of a cycle (and idle()'s): what is complete leaves before the ring is cut; one pass under
        # each lock (a cycle's close runs on every decode step)
        with self._emit_lock:
            with self._lock:
                self._open.pop(rec.cycle, None)
                ring = self._ring
                ring[rec.cycle] = rec
                self.counters["cycles"] += 1
                if rec.cycle > self._newest_ended:
                    self._newest_ended = rec.cycle
                done = self._take_ready(True)
                if len(ring) > self.ring_size:
                    _, dropped = ring.popitem(last=False)
                    self.counters[DROP_RING_OVERFLOW] += 1
            self._emit(done)
        # (a close that emits a row drops none: taking one leaves the ring within its size)
        if dropped is not None:  # its events may still be pending on the GPU: not reused
            dropped.pairs, dropped.first = [], None
            self.own_ns += dropped.own or 0     # its shim time goes on the next row (the sum stays whole)

    def _identify(self) -> None:
        if self.identity_fn is None:
            return
        ident = self.identity_fn() or {}
        if self.rank is None and ident.get("rank") is not None:
            self.rank = int(ident["rank"])
        if self.spec is None and ident.get("spec_config") is not None:
            self.spec = ident["spec_config"]

    # ------------------------------------------------------------------ events
    def _record(self, rec: CycleRecord, phase: str):
        """An event recorded now on the current stream, or None (no CUDA, or a graph capture)."""
        factory = self._factory
        if factory is None:
            return None
        capturing = self._capturing
        if capturing is not None and capturing():
            self.counters["capture_skips"] += 1
            return None
        ev = self._free.pop() if self._free else factory()
        ev.record()
        if rec.first is None:
            rec.first = ev
        return ev

    def _release(self, *events) -> None:
        free = self._free
        for ev in events:
            if ev is not None and len(free) < self.pool_max:
                free.append(ev)

    def _release_record(self, rec: CycleRecord) -> None:
        for _, a, b, _ in rec.pairs:
            self._release(a, b)
        rec.pairs, rec.first = [], None

    # ------------------------------------------------------------------ resolving
    def _ready(self, rec: CycleRecord, wait_accepts: bool = True) -> bool:
        if wait_accepts and rec.accepted is None and self._newest_ended - rec.cycle < self.accept_lag:
            return False
        if not rec.pairs:
            return True
        for _, a, b, _ in rec.pairs:  # events complete in order on one stream: the end first
            if not b.query() or not a.query():
                return False
        return rec.first is None or rec.first.query()

    def _take_ready(self, wait_accepts: bool) -> list:
        """The pending cycles that are complete, oldest first, taken off the ring (``_lock`` held)."""
        ring, done = self._ring, []
        while ring:
            rec = ring[next(iter(ring))]
            if not self._ready(rec, wait_accepts):
                break
            del ring[rec.cycle]
            done.append(rec)
        return done

    def _emit(self, done: list) -> None:
        """Rows of the taken cycles, in order (``_emit_lock`` held). A cycle without event pairs goes to
        ``on_record`` as it is where one is given (its row is made by :meth:`row` off the worker thread: nothing in
        it is read on the worker any more); a cycle with pairs is made into its row here (its events are read and
        go back to the pool)."""
        on_record = self.on_record
        for rec in done:
            self.counters["resolved"] += 1
            if on_record is not None and not rec.pairs:
                on_record(rec)
                continue
            row = self.row(rec)
            if rec.pairs:
                self._release_record(rec)
            self.on_row(row)

    def poll(self, wait_accepts: bool = True) -> int:
        """Resolve the pending cycles that are complete, oldest first; never waits. Returns how many.
        ``wait_accepts=False``: a cycle without its accept length resolves too (none will come)."""
        with self._emit_lock:
            with self._lock:
                done = self._take_ready(wait_accepts)
            self._emit(done)
            return len(done)

    def row(self, rec: CycleRecord) -> dict:
        """One resolved cycle as a dict of :data:`ROW_FIELDS` (events must be complete)."""
        out = self._base_row(rec)
        if not rec.pairs and not rec.host:      # a cycle the sampling left without events: no phase to read
            return out
        phase_ns: dict[str, int] = {}
        for key, a, b, also in rec.pairs:
            ns = elapsed_ns(a, b)
            for k in (key, also) if also is not None else (key,):
                phase_ns[k] = phase_ns.get(k, 0) + ns
        for phase in rec.missing:
            phase_ns.pop(phase, None)
        out["gpu_span_ns"] = elapsed_ns(rec.first, rec.pairs[-1][2]) if rec.pairs and rec.first is not None else None
        for phase in PHASES:
            out[f"{phase}_ns"] = phase_ns.get(phase)
            out[f"{phase}_host_ns"] = rec.host.get(phase)
        for phase in REPLAYED:
            out[f"{phase}_replay_ns"] = phase_ns.get(phase + _REPLAY)
        return out

    def values(self, rec: CycleRecord) -> tuple:
        """:meth:`row` as a tuple in :data:`ROW_FIELDS` order. A cycle the sampling left without events (every
        cycle but one in ``sample_every``) is built straight from its record, no dict: the sink's thread makes one
        such row a decode cycle, holding the GIL the worker needs (10.5 us a row as dicts on the development
        machine, 2026-12-07)."""
        if rec.pairs or rec.host:
            return tuple(map(self.row(rec).__getitem__, ROW_FIELDS))
        return self._base_values(rec)

    def _base_values(self, rec: CycleRecord) -> tuple:
        """The fields every cycle's row has, in :data:`ROW_FIELDS` order (the phases' times null): a cycle the
        sampling left without events is this row."""
        steps, verified = self._cycle_fields(rec)
        req = rec.requests
        return (self.rank if self.rank is not None else 0, self.pid, rec.cycle, rec.start_ns, rec.end_ns,
                None, None, None, None, None, rec.accepted, req, verified, steps, rec.batch_size,
                None, None, None, None, None, None, None, int(rec.timed),
                _lens_text(rec.lens, req) if req else None, rec.own)

    def _cycle_fields(self, rec: CycleRecord) -> tuple:
        """(steps, verified tokens) of a cycle: the process's, or the cycle's own under adaptive speculation."""
        spec = self.spec
        steps = getattr(spec, "steps", None)
        draft_tokens = getattr(spec, "draft_tokens", None)
        if rec.steps is not None and rec.steps != steps:
            # adaptive speculation (topk 1 only in SGLang 0.5.17): the cycle verified steps + 1 tokens a
            # request; unknown where the process's topk is not known to be 1
            chain = getattr(spec, "topk", None) == 1
            steps, draft_tokens = rec.steps, rec.steps + 1 if chain else None
        verified = rec.requests * draft_tokens if rec.requests is not None and draft_tokens is not None else None
        return steps, verified

    def _base_row(self, rec: CycleRecord) -> dict:
        """:meth:`_base_values` as a dict (what :meth:`row` fills the phases' times into)."""
        return dict(zip(ROW_FIELDS, self._base_values(rec)))

    def _take_own_ns(self) -> int:
        """The shim's own host time since it was last taken (:attr:`own_ns`), reset to 0."""
        own, self.own_ns = self.own_ns, 0
        return int(own)

    def idle(self) -> int:
        """The server is idle (SGLang's ``Scheduler.on_idle``, after every batch result was processed:
        every accept length that will come has come): resolve the pending cycles whose events are
        complete, not waiting for accept lengths. Cheap when nothing is pending (SGLang calls it on
        every idle turn of its loop); never waits."""
        if not self._ring:
            return 0
        now = self.clock()
        if now - self._idle_polled < IDLE_POLL_NS:
            return 0
        self._idle_polled = now
        t0 = self.own_clock()
        try:
            return self.poll(wait_accepts=False)
        finally:
            self.charge("idle poll", self.own_clock() - t0)

    def close(self) -> int:
        """Resolve what is complete now (no waiting); the rest is dropped and counted. Returns the drops."""
        with self._lock:
            self._newest_ended += self.accept_lag  # accept lengths that did not come will not come
        try:
            self.poll()
        except Exception:  # CUDA torn down at exit
            pass
        with self._lock:
            left = list(self._ring.values())
            self._ring.clear()
            self.counters[DROP_UNRESOLVED_AT_CLOSE] += len(left)
        return len(left)

    def pending(self) -> int:
        return len(self._ring)


_graph_timer = None   # the timer CUDAGraph.replay reports to (one per process; None after unhook): read once


def hook_cuda_graphs(timer: Timer) -> bool:
    """Time every ``torch.cuda.CUDAGraph.replay`` of this process through ``timer.time_graph`` (the class
    patched once per process; a later timer takes the place of the earlier). False, and nothing patched,
    without torch's CUDAGraph class (torch looked up in ``sys.modules``, never imported)."""
    torch = sys.modules.get("torch")
    graph = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    replay = getattr(graph, "replay", None)
    if replay is None:
        return False
    global _graph_timer
    _graph_timer = timer
    if getattr(replay, "_specprof_original", None) is None:
        def timed_replay(self, *args, **kwargs):
            now = _graph_timer
            if now is None or now.in_untimed:
                return replay(self, *args, **kwargs)
            return now.time_graph(lambda: replay(self, *args, **kwargs))
        timed_replay._specprof_original = replay
        timed_replay.__doc__ = replay.__doc__
        graph.replay = timed_replay
    return True


def unhook_cuda_graphs() -> None:
    """No timer gets the replays any more (the patched method calls the original straight through)."""
    global _graph_timer
    _graph_timer = None


class TeeBackend:
    """An NVTX backend that forwards to ``inner`` (nsys's, or none) and feeds ``timer``: the shim's
    wrappers call it exactly as they call the NVTX emitter. Timer errors never reach the wrapper
    (an NVTX push without its pop would unbalance the trace): counted through ``on_fault``."""

    name = "live"
    active = True

    def __init__(self, inner, timer: Timer, on_fault: Callable[[str, BaseException], None] | None = None,
                 pause_file: str | None = None, pause_check_s: float = 0.05,
                 clock: Callable[[], float] = time.monotonic):
        self.inner, self.timer, self.on_fault = inner, timer, on_fault
        self._inner_on = bool(getattr(inner, "active", False))
        # with no profiler behind, a range pushed in a cycle the sampling left without events reaches nothing: the
        # range wrappers then pass the call straight through (Timer.pass_ranges; the decode cycle's own push and
        # pop and the accept marks still come here)
        timer.ranges_elsewhere = self._inner_on
        # whether a mark reaches anything (nsys attached): the wrappers skip building an accept mark's text when
        # not (the timer takes the lengths through ``on_accept``)
        self.records_marks = self._inner_on
        # ``pause_file``: while that file exists the timer is not fed (no events, no rows): the overhead
        # benchmark alternates rounds with and without the timing inside one engine (engines differ by
        # 8-27% on one machine). Looked at, at most every ``pause_check_s``, on an outermost push only (a
        # range already routed to the timer always reaches it again with its pop).
        self.pause_file, self.pause_check_s, self._clock = pause_file, pause_check_s, clock
        self.paused, self._checked = False, float("-inf")
        self._routes = _local()

    def _fault(self, exc):
        if self.on_fault is not None:
            self.on_fault("live timing", exc)

    def _route(self) -> list:
        r = getattr(self._routes, "stack", None)
        if r is None:
            r = self._routes.stack = []
        return r

    def _timing_on(self, routes: list) -> bool:
        if not routes:                      # outermost: the state may change here only
            now = self._clock()
            if now - self._checked >= self.pause_check_s:
                self._checked = now
                self.paused = os.path.exists(self.pause_file)
        return not self.paused if not routes else routes[-1]

    def push(self, name, payload=None):
        if self._inner_on:
            self.inner.push(name, payload)
        if self.pause_file is not None:     # routing only where a pause can happen (the overhead benchmark)
            routes = self._route()
            on = self._timing_on(routes)
            routes.append(on)
            if not on:
                return
        try:
            self.timer.push(name, payload)
        except Exception as exc:
            self._fault(exc)

    def pop(self):
        if self._inner_on:
            self.inner.pop()
        if self.pause_file is not None:
            routes = self._route()
            if routes and not routes.pop():
                return
        try:
            self.timer.pop()
        except Exception as exc:
            self._fault(exc)

    def start(self, name):
        return self.inner.start(name) if self._inner_on else 0

    def end(self, range_id):
        if self._inner_on:
            self.inner.end(range_id)

    def mark(self, text, payload=None):
        if self._inner_on:
            self.inner.mark(text, payload)
