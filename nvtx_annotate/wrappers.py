"""Wrappers that keep the target's kind and never change what the call does.

:func:`wrap_attribute` takes the raw attribute (a class ``__dict__`` entry or a module global) and
returns its replacement of the same kind: a ``staticmethod`` stays a staticmethod, a
``classmethod`` a classmethod, a plain function a function (a method when it sits in a class), a
bound method or other callable in a class a staticmethod (so it is not bound twice), an ``async
def`` an ``async def`` whose NVTX range (start/end, since awaits interleave) spans the awaited
body. Properties, other data descriptors and generator functions are left alone (None).

Every wrapper passes ``*args, **kwargs`` through untouched and returns what the target returns /
raises what it raises. What it reads (the batch, the batch result, accept lengths, the instance)
is bound from the signature once, here (``binding.py``); a read that cannot be bound is reported
once and its mark is simply not emitted. The shim's own code runs inside ``try``: any exception
there is counted (:func:`faults`) and reported once per target, and the call goes on unpatched.
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import sys
import types
from time import perf_counter_ns, time_ns
from _thread import _local  # threading.local, without importing threading at interpreter start
from collections.abc import Callable

from . import _nvtx, guard
from .clock import WindowClock
from . import protocol as P
from .binding import MISSING, Bound, bind, params_of, self_bound
from .targets import (
    ACCEPT_CPU_ARG,
    ACCEPT_RESOLVE,
    ALLREDUCE_FN,
    ALLREDUCE_TP,
    CONFIG_INIT,
    CYCLE,
    IDLE,
    PROFILE_START,
    RANGE,
    RANK_INIT,
    RESULT_ACCEPT_ATTRS,
    VERIFY_ACCEPT_ATTRS,
    VERIFY_V1,
    Target,
)

WRAPPED = "__specprof_nvtx_wrapped__"


# ------------------------------------------------------------------ process state

class _Thread(_local):
    cycle = None  # K of the decode cycle open on this thread
    accept = None  # accept lengths a v1 verify returned inside the open cycle
    resolving = 0  # depth of scheduler-side accept resolvers on this thread


_tls = _Thread()
_cycle_numbers = itertools.count(1)
_stats = {"cycles": 0, "prefills": 0, "marks": 0, "rank_marks": 0, "config_marks": 0, "faults": 0}
_faults: dict[str, int] = {}
_warned: set = set()
_rank = {"mark": None, "world": None, "refresh": 0, "config": None,  # the TP group's rank mark; re-emits pending
         "rank": None, "spec_config": None, "clock": (), "clock_stopped_ns": None}
_clock: WindowClock | None = WindowClock()
"""The decode cycles' clock before profiling starts (nvtx_annotate/clock.py): written as ``clock`` marks and
stopped (None) when profiling starts; never kept where no profiler records the shim's marks (:func:`drop_clock`)."""


def clock_deadlines(environ, wall_ns: int, perf_ns: int) -> tuple[int, tuple[int, ...]] | None:
    """(stop, (marks, ...)) on the ``perf_counter_ns`` clock from :data:`protocol.CLOCK_STOP_AT_ENV` and
    :data:`protocol.CLOCK_MARKS_AT_ENV` (wall-clock ns; the marks' times comma-separated, each a writing of the clock
    marks), or None where either is absent or not numbers, or a marks time would come before the stop."""
    try:
        stop = int(environ[P.CLOCK_STOP_AT_ENV])
        marks = sorted(int(x) for x in environ[P.CLOCK_MARKS_AT_ENV].split(","))
    except (KeyError, ValueError):
        return None
    if not marks or marks[0] < stop:
        return None
    return perf_ns + stop - wall_ns, tuple(perf_ns + m - wall_ns for m in marks)


_clock_due = clock_deadlines(os.environ, time_ns(), perf_counter_ns())
"""(stop, marks times) perf_counter_ns of a delayed collection (:func:`clock_deadlines`), None after the last marks
time or where profiling starts through SGLang's profiler (:func:`refresh_rank_mark`)."""
_untagged: dict[int, int] = {}  # id(result) -> K for results that take no attribute
_UNTAGGED_MAX = 256
RANK_REFRESH_CALLS = 3
"""After profiling starts, the rank mark is emitted again at the start of this many worker calls:
in a TP server only the first rank calls cudaProfilerStart; the others reach their next
forward only after the scheduler loop's next broadcast, i.e. after the capture has opened."""

on_first_cycle: Callable | None = None  # set by shim: per-worker roles check
on_accept: Callable | None = None
"""Set by the timing mode (``live``): ``on_accept(accepted, requests, cycle, batch_size, lengths)`` after each
accept mark (``lengths``: the per-request accept lengths the mark was made of)."""
on_idle: Callable | None = None
"""Set by the timing mode (``live``): ``on_idle()`` as SGLang's ``Scheduler.on_idle`` is called (nothing running;
an idle SGLang 0.5.17 scheduler calls it on every turn of its loop; never while a batch runs)."""
own_time = None
"""Set by the timing mode (``live``): the :class:`~nvtx_annotate.live.events.Timer` whose ``charge`` the
wrappers give their own host time to (all of a wrapped call but the call itself: the shim's cost, the log's
``shim_ns``); None: nothing is counted (one global read a call)."""
on_cycle_steps: Callable | None = None
"""Set by the timing mode (``live``): ``on_cycle_steps(steps)`` as a decode cycle closes, with the worker's
``speculative_num_steps`` then (SGLang's ``--speculative-adaptive`` switches it at run time:
``EAGLEWorkerV2.apply_runtime_state``, activated at the start of ``forward_batch_generation``)."""


def stats() -> dict:
    out = dict(_stats)
    out["faults_by_target"] = dict(_faults)
    return out


def faults() -> dict[str, int]:
    return dict(_faults)


def debug(msg: str, *args, exc_info=False) -> None:
    """Log at DEBUG on the ``nvtx_annotate`` logger (logging imported only when needed)."""
    import logging

    logging.getLogger("nvtx_annotate").debug(msg, *args, exc_info=exc_info)


def warn_once(key: str, msg: str) -> str | None:
    """Log and print ``msg`` once per process for ``key``."""
    if key in _warned:
        return None
    _warned.add(key)
    debug(msg)  # printed below: a logging setup of the server would show it twice
    try:
        print(msg, file=sys.stderr)
    except Exception:  # pragma: no cover - stderr closed
        pass
    return msg


def fault(label: str, exc: BaseException) -> None:
    """An exception inside the shim's own code: counted, reported once per target."""
    _stats["faults"] += 1
    _faults[label] = _faults.get(label, 0) + 1
    warn_once("fault:" + label, f"nvtx_annotate: internal error in the wrapper of {label} "
                                f"({type(exc).__name__}: {exc}); the call ran unchanged, further errors are counted")


def _active(exact: bool):
    """The backend when something records and no capture/compile is in progress, else None."""
    b = _nvtx._backend or _nvtx.get_backend()
    if not b.active:
        return None
    if guard.skip_exact() if exact else guard.skip():
        return None
    return b


# ------------------------------------------------------------------ marks

def emit_accept(lengths, cycle: int | None, b=None, batch_size: int | None = None) -> bool:
    """The accept mark for ``lengths`` (per-request accepted draft tokens) if it is a sequence of
    ints; False (nothing emitted) otherwise. ``batch_size``: the batch's requests before those
    already finished were left out (default ``len(lengths)``)."""
    if not isinstance(lengths, (list, tuple)):
        return False
    b = b or _nvtx._backend or _nvtx.get_backend()
    try:
        if getattr(b, "records_marks", True):
            text, payload = P.accept_mark(lengths, cycle)
            b.mark(text, payload)
        else:           # the timing mode alone (no profiler behind it): no mark text to build
            payload = sum(map(int, lengths))
    except (TypeError, ValueError):
        return False
    _stats["marks"] += 1
    clock = _clock
    if clock is not None and cycle is not None:
        try:
            clock.accepted(cycle, payload, len(lengths))
        except Exception as e:  # never the mark's or the timing's bookkeeping
            fault("clock (accept)", e)
    if on_accept is not None:
        on_accept(payload, len(lengths), cycle, batch_size, lengths)
    return True


def emit_rank_mark(rank: int, world: int, device) -> None:
    """The per-process mark ``rank=R world=W device=D`` the analyzer reads (remembered, so that
    it can be emitted again when profiling starts)."""
    text = P.rank_mark(rank, world, device)
    _rank["mark"], _rank["world"], _rank["rank"] = text, int(world), int(rank)
    _nvtx.mark(text)
    _stats["rank_marks"] += 1


def emit_config_mark(scheduler) -> None:
    """The per-process mark ``spec_config ...`` from a SGLang Scheduler's ``server_args``
    (remembered, so that it is emitted again when profiling starts)."""
    args = getattr(scheduler, "server_args", None)
    if args is None:
        return
    cfg = P.spec_config_from_server_args(args, getattr(scheduler, "max_running_requests", None))
    cfg = cfg._replace(events_every=_timing_events_every())
    text = P.format_spec_config(cfg)
    _rank["config"], _rank["spec_config"] = text, cfg
    _nvtx.mark(text)
    _stats["config_marks"] += 1


def _timing_events_every() -> int | None:
    """One decode cycle of how many carries the timing mode's CUDA events (0: none); None: the mode is off."""
    live = sys.modules.get(__package__ + ".live")
    state = live.state() if live is not None else None
    return None if state is None else state.timer.events_every


def _tp_name(group) -> str | None:
    name = getattr(group, "unique_name", None) or getattr(group, "group_name", None)
    return None if name is None else str(name)


def emit_rank_mark_for_group(group) -> None:
    name = _tp_name(group)
    if name is None or not name.startswith("tp") or _rank["mark"] is not None:
        return
    emit_rank_mark(group.rank_in_group, group.world_size, getattr(group, "device", "?"))


def _emit_remembered(b) -> None:
    if _rank["mark"] is not None:
        b.mark(_rank["mark"])
        _stats["rank_marks"] += 1
    if _rank.get("config") is not None:
        b.mark(_rank["config"])
        _stats["config_marks"] += 1
    for text in _rank["clock"]:
        b.mark(text)
    if _rank["clock"] and _rank.get("clock_stopped_ns") is not None:
        b.mark(P.clock_stop_mark((perf_counter_ns() - _rank["clock_stopped_ns"]) // 1000))


def drop_clock() -> None:
    """No profiler records the shim's marks (the timing mode alone): no clock is kept, nothing would carry it."""
    global _clock
    _clock = None


def stop_clock(now_ns: int | None = None) -> tuple[str, ...]:
    """Profiling started: the clock's ``clock`` marks (the cycles before it), remembered with the rank mark;
    the clock stops (what follows runs under the profiler). ``now_ns``: the clock stops ahead of its marks
    (:func:`delayed_collection`), which then say how long before them (a ``clock_stop`` mark)."""
    global _clock
    clock, _clock = _clock, None
    if clock is not None:
        _rank["clock_stopped_ns"] = now_ns
        try:
            _rank["clock"] = tuple(P.clock_mark(*bucket) for bucket in clock.buckets())
        except Exception as e:  # never the rank mark's re-emission
            fault("clock (marks)", e)
    return _rank["clock"]


def delayed_collection(now_ns: int) -> None:
    """``profile-trace --delay``: past the stop time the clock stops (its cycles end before nsys collects); past each
    marks time (profiling has surely started by the first; the later ones in case nsys started late) the clock, rank and
    config marks go out as when SGLang's profiler starts."""
    global _clock_due
    due = _clock_due
    if due is None:
        return
    stop, marks = due
    if now_ns >= marks[0]:
        later = tuple(m for m in marks if m > now_ns)
        _clock_due = (stop, later) if later else None
        _write_marks()
    elif now_ns >= stop and _clock is not None:
        stop_clock(now_ns)


def refresh_rank_mark() -> None:
    """Profiling started: emit the rank, config and clock marks now and at the next worker calls."""
    global _clock_due
    _clock_due = None
    _write_marks()


def _write_marks() -> None:
    stop_clock()
    if _rank["mark"] is None and _rank.get("config") is None and not _rank["clock"]:
        return
    b = _nvtx._backend or _nvtx.get_backend()
    if b.active:
        _emit_remembered(b)
    _rank["refresh"] = RANK_REFRESH_CALLS


def _pending_rank_mark(b) -> None:
    if _rank["refresh"] > 0:
        _rank["refresh"] -= 1
        _emit_remembered(b)


def tp_world() -> int | None:
    return _rank["world"]


def identity() -> dict:
    """This process's TP ``rank``, ``world`` and ``spec_config`` (a SpecConfig), None where not seen yet."""
    return {"rank": _rank["rank"], "world": _rank["world"], "spec_config": _rank["spec_config"]}


def _tag(result, k: int) -> None:
    """Remember the cycle number K on the object a decode cycle returned."""
    if result is None or isinstance(result, (tuple, list, dict, int, float, str, bytes)):
        return
    try:
        setattr(result, P.CYCLE_ATTR, k)
    except Exception:  # slots / frozen: keep it beside, by identity, for a while
        if len(_untagged) >= _UNTAGGED_MAX:
            _untagged.pop(next(iter(_untagged)))
        _untagged[id(result)] = k


def _cycle_of(result) -> int | None:
    k = getattr(result, P.CYCLE_ATTR, None)
    if k is None:
        k = _untagged.pop(id(result), None)
    return k if isinstance(k, int) else None


def _first_attr(obj, names):
    for n in names:
        v = getattr(obj, n, None)
        if isinstance(v, (list, tuple)):
            return v
    return None


def _find_v1_accept(ret):
    """accept_length_per_req_cpu from a v1 verify return value (object or tuple of objects)."""
    v = _first_attr(ret, VERIFY_ACCEPT_ATTRS)
    if v is not None:
        return v
    if isinstance(ret, (tuple, list)):
        for item in ret:
            v = _first_attr(item, VERIFY_ACCEPT_ATTRS)
            if v is not None:
                return v
    return None


def _is_prefill(batch) -> bool:
    """SGLang's own test: ``batch.forward_mode.is_extend() or batch.is_extend_in_batch``."""
    mode = getattr(batch, "forward_mode", None)
    is_extend = getattr(mode, "is_extend", None)
    if is_extend is not None and is_extend() is True:
        return True
    return getattr(batch, "is_extend_in_batch", False) is True


# ------------------------------------------------------------------ hooks per kind
# Each kind is (enter, leave, fail): enter(args, kwargs) -> state or None (None: call unpatched);
# leave(state, args, kwargs, ret) after a normal return; fail(state) after an exception.

class Hooks:
    __slots__ = ("enter", "leave", "fail", "exact")

    def __init__(self, enter, leave, fail, exact=False):
        self.enter, self.leave, self.fail, self.exact = enter, leave, fail, exact


def _noop_fail(state):
    pass


def _hooks_range(name: str, exact: bool) -> Hooks:
    def enter(args, kwargs):
        b = _active(exact)
        if b is None:
            return None
        b.push(name)
        return b

    def leave(b, args, kwargs, ret):
        b.pop()

    def fail(b):
        b.pop()

    return Hooks(enter, leave, fail, exact)


def _tp_only(get_self):
    """Predicate: the call's group is the TP group (True when the group cannot be read)."""
    if get_self is None:
        return None

    def is_tp(args, kwargs):
        uname = _tp_name(get_self(args, kwargs))
        return uname is not None and uname.startswith("tp")

    return is_tp


def _hooks_allreduce_tp(name: str, get_self) -> Hooks:
    is_tp = _tp_only(get_self)

    def enter(args, kwargs):
        if is_tp is not None and not is_tp(args, kwargs):
            return None
        b = _active(True)
        if b is None:
            return None
        b.push(name)
        return b

    def leave(b, args, kwargs, ret):
        b.pop()

    def fail(b):
        b.pop()

    return Hooks(enter, leave, fail, True)


def _hooks_cycle(get_self, get_batch, label: str = "cycle") -> Hooks:
    def enter(args, kwargs):
        b = _active(False)
        if b is None or _tls.cycle is not None:  # nested (an override calling its base): one range
            return None
        if _rank["refresh"]:
            _pending_rank_mark(b)
        if _clock_due is not None:
            try:
                delayed_collection(perf_counter_ns())
            except Exception as e:  # never the cycle's range
                fault(f"{label} (delayed clock)", e)
        prefill = False
        if get_batch is not None:
            batch = get_batch(args, kwargs)
            if batch is not MISSING:
                try:
                    prefill = _is_prefill(batch)
                except Exception as e:  # a batch of an unknown shape: count it, call it a decode
                    fault(f"{label} (forward mode)", e)
        clock = _clock
        if prefill:
            if clock is not None:
                clock.gap()
            b.push(P.PREFILL)
            return (b, None)
        k = next(_cycle_numbers)
        if clock is not None:
            try:
                clock.decode(k, perf_counter_ns())
            except Exception as e:  # never the cycle's range
                fault(f"{label} (clock)", e)
        b.push(P.DECODE_CYCLE, k)
        _tls.cycle, _tls.accept = k, None
        return (b, k)

    def leave(state, args, kwargs, ret):
        b, k = state
        if k is None:
            b.pop()
            _stats["prefills"] += 1
            return
        clock = _clock
        if clock is not None:
            try:
                clock.end(k, perf_counter_ns())
            except Exception as e:  # never the cycle's range
                fault(f"{label} (clock)", e)
        try:
            acc, _tls.accept = _tls.accept, None
            if acc is None or not emit_accept(acc, k, b):
                _tag(ret, k)
            hook = on_cycle_steps
            cfg = _rank["spec_config"]
            adaptive = cfg is not None and bool(cfg.adaptive)
            if cfg is not None and cfg.adaptive is False:
                hook = None     # no --speculative-adaptive: the process's step count holds for every cycle
            if (hook is not None or adaptive) and get_self is not None:
                try:
                    steps = getattr(get_self(args, kwargs), "speculative_num_steps", None)
                except Exception as e:  # never the cycle's bookkeeping
                    steps = None
                    fault(f"{label} (step count)", e)
                if isinstance(steps, int):
                    if hook is not None:
                        try:
                            hook(steps)
                        except Exception as e:  # the timing's own error
                            fault(f"{label} (step count)", e)
                    if adaptive:        # the step count this cycle ran: nsys records no switch otherwise
                        try:
                            b.mark(P.steps_mark(steps, k))
                        except Exception as e:
                            fault(f"{label} (step mark)", e)
        finally:
            _tls.cycle = None
            b.pop()
        _stats["cycles"] += 1
        if _stats["cycles"] <= 64 and on_first_cycle is not None and get_self is not None:
            on_first_cycle(get_self(args, kwargs))

    def fail(state):
        b, k = state
        if k is not None:
            _tls.cycle, _tls.accept = None, None
        b.pop()

    return Hooks(enter, leave, fail)


def _hooks_verify_v1(name: str) -> Hooks:
    def enter(args, kwargs):
        b = _active(False)
        if b is None:
            return None
        b.push(name)
        return b

    def leave(b, args, kwargs, ret):
        b.pop()
        acc = _find_v1_accept(ret)
        if acc is None:
            return
        if _tls.cycle is not None:
            _tls.accept = acc  # emitted with cycle=K before the cycle range closes
        else:
            emit_accept(acc, None, b)

    def fail(b):
        b.pop()

    return Hooks(enter, leave, fail)


_FINISHED, _RETRACTED = operator.methodcaller("finished"), operator.attrgetter("is_retracted")


def _done_flags(batch) -> list | None:
    """Per request of a schedule batch, whether it had already finished (or was retracted) before
    this result was resolved: with the overlap scheduler one more cycle runs for requests that the
    previous result finished, and SGLang discards what it produced for them (its ``spec_verify_ct``
    does not count it). None when the batch does not say, or when none is done."""
    reqs = getattr(batch, "reqs", None)
    if not isinstance(reqs, (list, tuple)):
        return None
    try:        # SGLang's Req (finished(), is_retracted): mapped at C speed, and nothing to say when none is done
        # (reading Req.finished_reason instead of calling finished() saved 5 us a cycle at batch 64 in
        # bench/shim_cycle.py and nothing measurable on real SGLang, 2026-12-06: not done)
        if not any(map(_FINISHED, reqs)) and not any(map(_RETRACTED, reqs)):
            return None
    except Exception:   # another shape: request by request below
        pass
    out = []
    for req in reqs:
        done = bool(getattr(req, "is_retracted", False))
        finished = getattr(req, "finished", None)
        if callable(finished):
            done = done or bool(finished())
        out.append(done)
    return out


def _hooks_accept_resolve(get_result, label: str, get_batch=None) -> Hooks:
    def enter(args, kwargs):
        b = _active(False)
        if b is None:
            return None
        _tls.resolving += 1
        done = None
        if get_batch is not None:
            try:
                batch = get_batch(args, kwargs)
                done = None if batch is MISSING else _done_flags(batch)
            except Exception as exc:  # the batch is read before the call: never break it
                fault(label + " (requests)", exc)
        return b, done

    def leave(state, args, kwargs, ret):
        _tls.resolving -= 1
        b, done = state
        result = get_result(args, kwargs)
        if result is MISSING:
            return
        k = _cycle_of(result)
        lengths = _first_attr(result, RESULT_ACCEPT_ATTRS)
        batch_size = len(lengths) if isinstance(lengths, (list, tuple)) else None
        if done is not None and isinstance(lengths, (list, tuple)) and len(done) == len(lengths) and any(done):
            # only the requests SGLang counts: those not finished before this cycle
            lengths = [n for n, d in zip(lengths, done) if not d]
        emit_accept(lengths, k, b, batch_size)
        if k is None and _stats["cycles"] == 0:
            warn_once("uncycled", f"nvtx_annotate: accept lengths resolved by {label} belong to no annotated "
                                  f"decode cycle (this worker's forward_batch_generation is not annotated): "
                                  f"marks carry no cycle number")

    def fail(state):
        _tls.resolving -= 1

    return Hooks(enter, leave, fail)


def _hooks_accept_arg(get_lengths) -> Hooks:
    def enter(args, kwargs):
        if _tls.resolving:  # inside a resolver, which emits the mark with cycle=K
            return None
        return _active(False)

    def leave(b, args, kwargs, ret):
        emit_accept(get_lengths(args, kwargs), None, b)

    return Hooks(enter, leave, _noop_fail)


def _hooks_after_init(get_self, emit) -> Hooks:
    """No range: after an ``__init__`` returns, ``emit(the instance)`` (the rank mark of a TP group,
    the spec_config mark of a scheduler)."""
    def enter(args, kwargs):
        return True

    def leave(_, args, kwargs, ret):
        emit(get_self(args, kwargs))

    return Hooks(enter, leave, _noop_fail)


def _idle_wrapper(fn, label: str):
    """``Scheduler.on_idle``: the timing mode's idle hook before the call (an idle SGLang 0.5.17 scheduler calls
    it on every turn of its loop): no range, no state, nothing after; the hook charges its own time when it
    polls."""
    def wrapper(*args, **kwargs):
        hook = on_idle
        if hook is not None:
            try:
                hook()
            except Exception as e:
                fault(label, e)
        return fn(*args, **kwargs)

    return wrapper


def _hooks_profile_start() -> Hooks:
    def enter(args, kwargs):
        return True

    def leave(_, args, kwargs, ret):
        refresh_rank_mark()

    return Hooks(enter, leave, _noop_fail)


# ------------------------------------------------------------------ generic wrappers

def _sync_wrapper(fn, hooks: Hooks, label: str):
    enter, leave, fail = hooks.enter, hooks.leave, hooks.fail
    at_enter, at_leave = label + " enter", label + " leave"     # where the shim's own time is charged

    def wrapper(*args, **kwargs):
        own = own_time
        if own is not None:
            t0 = own.own_clock()
        try:
            state = enter(args, kwargs)
        except Exception as e:
            fault(label, e)
            state = None
        if own is not None:
            if own.own_detail is None:     # the timer's charge(), inline (a call less on every hook)
                own.own_ns += own.own_clock() - t0
            else:
                own.charge(at_enter, own.own_clock() - t0)
        if state is None:
            return fn(*args, **kwargs)
        try:
            ret = fn(*args, **kwargs)
        except BaseException:
            try:
                fail(state)
            except Exception as e:
                fault(label, e)
            raise
        if own is not None:
            t0 = own.own_clock()
        try:
            leave(state, args, kwargs, ret)
        except Exception as e:
            fault(label, e)
        if own is not None:
            if own.own_detail is None:     # the timer's charge(), inline (a call less on every hook)
                own.own_ns += own.own_clock() - t0
            else:
                own.charge(at_leave, own.own_clock() - t0)
        return ret

    return wrapper


def _range_wrapper(fn, name: str, exact: bool, label: str, only=None):
    """The hot path (draft, verify, replays, all-reduce): push/pop without hooks; ``only(args,
    kwargs)``: record only when true (the TP group), asked once something records."""
    nv, g = _nvtx, guard
    at_push, at_pop = label + " push", label + " pop"         # where the shim's own time is charged

    def wrapper(*args, **kwargs):
        own = own_time
        if own is not None:
            if own.pass_ranges:     # the timing mode alone, a cycle without events: nothing would record it
                return fn(*args, **kwargs)
            t0 = own.own_clock()
        try:
            b = nv._backend or nv.get_backend()
            if not b.active or (only is not None and not only(args, kwargs)) or (
                    g.skip_exact() if exact else g.skip()):
                b = None
            else:
                b.push(name)
        except Exception as e:
            fault(label, e)
            b = None
        if own is not None:
            if own.own_detail is None:     # the timer's charge(), inline (a call less on every hook)
                own.own_ns += own.own_clock() - t0
            else:
                own.charge(at_push, own.own_clock() - t0)
        if b is None:
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        finally:
            if own is not None:
                t0 = own.own_clock()
            try:
                b.pop()
            except Exception as e:
                fault(label, e)
            if own is not None:
                if own.own_detail is None:     # the timer's charge(), inline (a call less on every hook)
                    own.own_ns += own.own_clock() - t0
                else:
                    own.charge(at_pop, own.own_clock() - t0)

    return wrapper


def _async_wrapper(fn, name: str | None, hooks: Hooks, label: str):
    """``async def``: the range (start/end: other coroutines interleave on the thread, so a
    push/pop stack would not nest) spans the awaited body; marks as for the sync kinds."""
    exact = hooks.exact
    enter, leave, fail = hooks.enter, hooks.leave, hooks.fail
    ranged = name is not None

    async def wrapper(*args, **kwargs):
        b = rid = state = None
        try:
            if ranged:
                b = _active(exact)
                if b is not None:
                    rid = b.start(name)
            else:
                state = enter(args, kwargs)
        except Exception as e:
            fault(label, e)
            b = state = None
        if b is None and state is None:
            return await fn(*args, **kwargs)
        try:
            ret = await fn(*args, **kwargs)
        except BaseException:
            try:
                if b is not None:
                    b.end(rid)
                else:
                    fail(state)
            except Exception as e:
                fault(label, e)
            raise
        try:
            if b is not None:
                b.end(rid)
            else:
                leave(state, args, kwargs, ret)
        except Exception as e:
            fault(label, e)
        return ret

    return wrapper


# ------------------------------------------------------------------ building one wrapper

def _bindings(fn, target: Target, skip_first: bool, bound_self) -> dict[str, Callable | None]:
    """Getter per read of the target's kind (None: not bindable, reported once)."""
    out: dict[str, Callable | None] = {}
    if not target.reads:
        return out
    params = params_of(fn)
    for read in target.reads:
        if read.position is None and not read.names:  # the instance
            if bound_self is not None:
                out[read.what] = lambda args, kwargs, _s=bound_self: _s
                continue
            b: Bound | None = self_bound(params, skip_first) if params is not None else None
        else:
            b = bind(params, read, skip_first) if params is not None else None
        out[read.what] = b.getter() if b is not None else None
        if b is None:
            warn_once(f"bind:{target.label}:{read.what}",
                      f"nvtx_annotate: cannot find {read.what} in the signature of {target.label}; "
                      f"{_unbound_consequence(target.kind, read.what)}")
    return out


def _unbound_consequence(kind: str, what: str) -> str:
    if kind == CYCLE and "batch" in what:
        return "prefill batches are recorded as decode cycles"
    if kind == CYCLE:
        return "its worker's roles are not checked"
    if kind == ACCEPT_RESOLVE and "requests" in what:
        return "requests that had already finished are counted in the accept mark"
    if kind == ALLREDUCE_TP:
        return "all-reduce ranges are recorded for every group"
    if kind == RANK_INIT:
        return "no rank mark"
    if kind == CONFIG_INIT:
        return "no spec_config mark"
    return "no accept mark"


def _hooks_for(fn, target: Target, skip_first: bool, bound_self) -> Hooks:
    name, kind, label = target.range_name, target.kind, target.label
    g = _bindings(fn, target, skip_first, bound_self)
    if kind in (RANGE, ALLREDUCE_FN):
        return _hooks_range(name, kind == ALLREDUCE_FN)
    if kind == ALLREDUCE_TP:
        return _hooks_allreduce_tp(name, g.get("the instance"))
    if kind == CYCLE:
        return _hooks_cycle(g.get("the instance"), g.get("the batch (forward mode)"), label)
    if kind == VERIFY_V1:
        return _hooks_verify_v1(name)
    if kind == ACCEPT_RESOLVE:
        get = g.get("the batch result")
        return _hooks_accept_resolve(get, label, g.get("the batch (its requests)")) if get is not None else None
    if kind == ACCEPT_CPU_ARG:
        get = g.get("the accept lengths")
        return _hooks_accept_arg(get) if get is not None else None
    if kind == RANK_INIT:
        get = g.get("the instance")
        return _hooks_after_init(get, emit_rank_mark_for_group) if get is not None else None
    if kind == CONFIG_INIT:
        get = g.get("the instance")
        return _hooks_after_init(get, emit_config_mark) if get is not None else None
    if kind == PROFILE_START:
        return _hooks_profile_start()
    if kind == IDLE:
        return Hooks(None, None, None)      # _idle_wrapper
    raise ValueError(f"unknown target kind {kind!r}")


def make_wrapper(fn: Callable, target: Target, skip_first: bool, bound_self=None) -> Callable | None:
    """A function with the calling convention of ``fn`` (sync or async) that annotates it, or
    None when the target records nothing without the argument it cannot bind (reported).
    ``skip_first``: ``fn``'s first parameter is self/cls; ``bound_self``: the instance of a
    bound method."""
    import inspect

    hooks = _hooks_for(fn, target, skip_first, bound_self)
    if hooks is None:
        return None
    if target.kind == IDLE:     # sync or not: the hook runs before the call (an async one's coroutine returned)
        w = _idle_wrapper(fn, target.label)
    elif inspect.iscoroutinefunction(fn):
        w = _async_wrapper(fn, target.range_name if target.kind in (RANGE, ALLREDUCE_FN) else None,
                           hooks, target.label)
    elif target.kind in (RANGE, ALLREDUCE_FN):
        w = _range_wrapper(fn, target.range_name, target.kind == ALLREDUCE_FN, target.label)
    elif target.kind == ALLREDUCE_TP:
        w = _range_wrapper(fn, target.range_name, True, target.label,
                           only=_tp_only(_bindings(fn, target, skip_first, bound_self).get("the instance")))
    else:
        w = _sync_wrapper(fn, hooks, target.label)
    try:
        functools.update_wrapper(w, fn)
    except Exception:  # a callable object without __name__ etc.
        pass
    setattr(w, WRAPPED, fn)
    return w


def describe_kind(raw, in_class: bool) -> str:
    """What a raw attribute is: staticmethod, classmethod, property, async function, ..."""
    import inspect

    if isinstance(raw, staticmethod):
        inner = "async " if inspect.iscoroutinefunction(raw.__func__) else ""
        return inner + "staticmethod"
    if isinstance(raw, classmethod):
        inner = "async " if inspect.iscoroutinefunction(raw.__func__) else ""
        return inner + "classmethod"
    if isinstance(raw, property):
        return "property"
    if hasattr(type(raw), "__set__") or hasattr(type(raw), "__delete__"):
        return "data descriptor"
    if inspect.isgeneratorfunction(raw) or inspect.isasyncgenfunction(raw):
        return "generator function"
    if inspect.iscoroutinefunction(raw):
        return "async method" if in_class else "async function"
    if isinstance(raw, types.MethodType):
        return "bound method"
    if isinstance(raw, types.FunctionType):
        return "method" if in_class else "function"
    return "callable" if callable(raw) else "not callable"


UNWRAPPABLE = ("property", "data descriptor", "generator function", "not callable")


_RAW = "__specprof_nvtx_raw__"


def wrap_attribute(raw, target: Target, in_class: bool):
    """The replacement for ``raw`` (of the same kind), or None when it is left alone."""
    kind = describe_kind(raw, in_class)
    if kind in UNWRAPPABLE or is_wrapped(raw):
        return None
    as_static = False
    if isinstance(raw, staticmethod):
        w, as_static = make_wrapper(raw.__func__, target, skip_first=False), True
    elif isinstance(raw, classmethod):
        w = make_wrapper(raw.__func__, target, skip_first=True)
        if w is not None:
            setattr(w, _RAW, raw)
            return classmethod(w)
        return None
    elif isinstance(raw, types.MethodType):
        w, as_static = make_wrapper(raw, target, skip_first=False, bound_self=raw.__self__), in_class
    elif in_class and not hasattr(type(raw), "__get__"):
        w, as_static = make_wrapper(raw, target, skip_first=False), True  # a callable object: never bound
    else:
        w = make_wrapper(raw, target, skip_first=in_class)
    if w is None:
        return None
    setattr(w, _RAW, raw)
    return staticmethod(w) if as_static else w


def unwrap_attribute(cur):
    """The raw attribute a replacement made by :func:`wrap_attribute` stands for (None if ``cur``
    is not one)."""
    fn = cur.__func__ if isinstance(cur, (staticmethod, classmethod)) else cur
    return getattr(fn, _RAW, None)


def is_wrapped(raw) -> bool:
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    return getattr(raw, WRAPPED, None) is not None


def reset_for_tests(cycles_from: int = 1) -> None:
    """Fresh counters and warnings (tests only)."""
    global _cycle_numbers, _clock
    _cycle_numbers = itertools.count(cycles_from)
    _clock = WindowClock()
    for k in _stats:
        _stats[k] = 0
    _faults.clear()
    _warned.clear()
    _untagged.clear()
    _rank.update(mark=None, world=None, refresh=0, rank=None, clock=())
    _tls.cycle = _tls.accept = None
    _tls.resolving = 0


__all__: list[str] = ["make_wrapper", "wrap_attribute", "unwrap_attribute", "is_wrapped", "describe_kind",
                      "emit_accept", "emit_rank_mark", "stats", "faults", "warn_once"]
