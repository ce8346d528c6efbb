"""Timing mode of the shim (``SPECPROF_TIMING=1``, with the shim loaded by ``SPECPROF_NVTX=1``):
CUDA events around draft / verify / draft_extend / all-reduce, host cycle times and accepted
tokens per decode cycle, resolved without blocking, out as Prometheus metrics and a Parquet log
per rank. See docs/live.md.

:func:`enable` puts a :class:`~nvtx_annotate.live.events.TeeBackend` in front of the NVTX emitter
(the wrappers call it as they call NVTX; nsys, when attached, still gets every range) and sets
``wrappers.on_accept``. With ``SPECPROF_TIMING`` unset nothing here runs: ``shim.install`` asks
:func:`timing_enabled` once. Standard library only at import; torch, pyarrow and prometheus_client
are imported when first needed, and only in a process that runs decode cycles.
"""

from __future__ import annotations

import os
from collections import namedtuple

ENV_TIMING = "SPECPROF_TIMING"
ENV_DIR = "SPECPROF_TIMING_DIR"
ENV_LOG = "SPECPROF_TIMING_LOG"
ENV_MAX_BYTES = "SPECPROF_TIMING_MAX_BYTES"
ENV_MAX_FILES = "SPECPROF_TIMING_MAX_FILES"
ENV_FILE_S = "SPECPROF_TIMING_FILE_S"
ENV_FLUSH_S = "SPECPROF_TIMING_FLUSH_S"
ENV_ROW_GROUP = "SPECPROF_TIMING_ROW_GROUP"
ENV_RING = "SPECPROF_TIMING_RING"
ENV_ALLREDUCE = "SPECPROF_TIMING_ALLREDUCE"
ENV_PORT = "SPECPROF_METRICS_PORT"
ENV_PAUSE_FILE = "SPECPROF_TIMING_PAUSE_FILE"
ENV_EVENTS = "SPECPROF_TIMING_EVENTS"
ENV_SAMPLE = "SPECPROF_TIMING_SAMPLE"
ENV_GATE = "SPECPROF_TIMING_GATE"
ENV_OWN_DETAIL = "SPECPROF_TIMING_OWN_DETAIL"

Settings = namedtuple("Settings", "directory log max_bytes max_files row_group_rows ring_size time_allreduce "
                                  "metrics_port flush_s file_s pause_file events sample_every gate own_detail",
                      defaults=(None, True, 41, True, False))
Settings.__doc__ = "The timing mode's settings (see :func:`settings_from_env` and docs/live.md)."

# a file completed every minute (readers see complete files only), 240 kept: 4 hours a process, ~30 bytes a cycle;
# what waits written to the open file every second (a SIGKILL loses the last second or two: nvtx_annotate/live/log.py);
# CUDA events in one cycle of 41: a timed cycle's period is 7-12% longer than an untimed one's on real SGLang
# (H100 / H200, 2026-12-06, the log's own timing_cost: +220-500 us at 3.2-4.1 ms cycles), so one in 17 cost
# 0.4-0.7% of tokens/s and one in 41 costs 0.17-0.3%; a prime, so that work SGLang does every N decode batches
# (its decode log every 40) falls on the timed cycles no more often than on the others
DEFAULTS = Settings(directory="specprof_live", log=True, max_bytes=64 << 20, max_files=240, row_group_rows=1024,
                    ring_size=256, time_allreduce=True, metrics_port=None, flush_s=1, file_s=60, sample_every=41)

_OFF = ("", "0", "false", "False", "no", "off")


def timing_enabled(environ=None) -> bool:
    return (os.environ if environ is None else environ).get(ENV_TIMING, "") not in _OFF


def settings_from_env(environ=None) -> tuple[Settings, list[str]]:
    """(settings, problems): a value that does not parse keeps its default and is named in ``problems``."""
    env = os.environ if environ is None else environ
    problems: list[str] = []

    def whole(name, default, least):
        text = env.get(name)
        if text in (None, ""):
            return default
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < least:
            problems.append(f"{name}={text!r} (want a whole number >= {least}; using {default})")
            return default
        return value

    return Settings(
        directory=env.get(ENV_DIR) or DEFAULTS.directory,
        log=env.get(ENV_LOG, "1") not in _OFF,
        max_bytes=whole(ENV_MAX_BYTES, DEFAULTS.max_bytes, 1),
        max_files=whole(ENV_MAX_FILES, DEFAULTS.max_files, 1),
        row_group_rows=whole(ENV_ROW_GROUP, DEFAULTS.row_group_rows, 1),
        ring_size=whole(ENV_RING, DEFAULTS.ring_size, 1),
        time_allreduce=env.get(ENV_ALLREDUCE, "1") not in _OFF,
        metrics_port=whole(ENV_PORT, None, 1),
        flush_s=whole(ENV_FLUSH_S, DEFAULTS.flush_s, 1),
        file_s=whole(ENV_FILE_S, DEFAULTS.file_s, 1),
        pause_file=env.get(ENV_PAUSE_FILE) or None,
        events=env.get(ENV_EVENTS, "1") not in _OFF,
        sample_every=whole(ENV_SAMPLE, DEFAULTS.sample_every, 1),
        gate=env.get(ENV_GATE, "1") not in _OFF,
        own_detail=env.get(ENV_OWN_DETAIL, "0") not in _OFF,
    ), problems


class Live:
    """The timing mode of one process: timer, sink, the backend it replaced."""

    def __init__(self, timer, sink, tee, previous_backend):
        self.timer, self.sink, self.tee, self.previous_backend = timer, sink, tee, previous_backend
        self.closed = False

    def close(self) -> None:
        """Resolve what is complete, drop the rest (counted), complete the log file."""
        if self.closed:
            return
        self.closed = True
        self.timer.close()
        self.sink.close()


_live: Live | None = None


def state() -> Live | None:
    """The process's timing mode, None when it is off."""
    return _live


def _outputs(settings: Settings, timer, warn):
    """``make_outputs`` of the sink: the Parquet log and the metrics, for the timer's rank."""
    def make():
        from .metrics import make_metrics

        rank = timer.rank if timer.rank is not None else 0
        log = None
        if settings.log:
            from .log import LogWriter

            log = LogWriter(settings.directory, rank, timer.pid, timer.spec, settings.row_group_rows,
                            settings.max_bytes, settings.max_files, max_age_s=settings.file_s)
            try:    # imported here, once, not inside a drain the log's sink_ns measures (a failure: the log says it)
                import pyarrow.parquet  # noqa: F401
            except Exception:  # noqa: BLE001
                pass
        port = settings.metrics_port + rank if settings.metrics_port is not None else None
        try:
            metrics = make_metrics(rank, port=port, warn=warn)
        except Exception as exc:  # noqa: BLE001 - the log goes on without the metrics
            warn("live:metrics", f"nvtx_annotate: SPECPROF_TIMING: no metrics ({type(exc).__name__}: {exc}); "
                                 "the timing log is still written")
            metrics = None
        return log, metrics
    return make


def _detail_writer(settings: Settings, timer):
    """``SPECPROF_TIMING_OWN_DETAIL=1`` (a diagnostic): the shim's own time by where it was spent (wrapper
    label and part, the graph hook), ``{key: [ns, calls]}``, rewritten atomically as
    ``own_detail-r{rank}-p{pid}.json`` in the log directory at every sink wake-up."""
    import json

    def write():
        detail = timer.own_detail
        if not detail:
            return
        rank = timer.rank if timer.rank is not None else 0
        os.makedirs(settings.directory, exist_ok=True)
        path = os.path.join(settings.directory, f"own_detail-r{rank}-p{timer.pid}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(dict(detail), f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
    return write


def enable(settings: Settings | None = None, events="auto", threaded: bool = True) -> Live:
    """Turn the timing mode on in this process (idempotent); ``events``: see :class:`~.events.Timer`."""
    global _live
    if _live is not None:
        return _live
    from .. import _nvtx, wrappers
    from .events import TeeBackend, Timer
    from .sink import Sink

    if settings is None:
        settings, problems = settings_from_env()
        for p in problems:
            wrappers.warn_once(f"live:env:{p}", f"nvtx_annotate: SPECPROF_TIMING: ignored {p}")
    if not settings.events:
        events = None           # SPECPROF_TIMING_EVENTS=0: host times only (no CUDA event is recorded)
    timer = Timer(None, events=events, identity=wrappers.identity,
                  ring_size=settings.ring_size, time_allreduce=settings.time_allreduce,
                  sample_every=settings.sample_every, gate="auto" if settings.gate else None)
    if settings.own_detail:
        timer.own_detail = {}
    sink = Sink(_outputs(settings, timer, wrappers.warn_once), counters=lambda: timer.counters,
                flush_s=settings.flush_s, threaded=threaded, on_error=wrappers.fault,
                detail=_detail_writer(settings, timer) if settings.own_detail else None, make_row=timer.row, make_values=timer.values)
    # rows to the sink; a cycle without events as its record, made into its row on the sink's thread
    timer.on_row = timer.on_record = sink.add
    previous = _nvtx._backend or _nvtx.get_backend()
    tee = TeeBackend(previous, timer, on_fault=wrappers.fault, pause_file=settings.pause_file)
    _nvtx.set_backend(tee)
    if not tee.records_marks:       # no profiler behind: the clock's marks would reach nothing
        wrappers.drop_clock()
    wrappers.on_accept = timer.accept
    wrappers.on_idle = timer.idle
    wrappers.on_cycle_steps = timer.cycle_steps
    wrappers.own_time = timer
    _live = Live(timer, sink, tee, previous)
    _register_exit_and_fork(settings, events, threaded)
    return _live


_hooks_registered = []


def _register_exit_and_fork(settings, events, threaded) -> None:
    if _hooks_registered:
        return
    _hooks_registered.append(True)
    import atexit

    atexit.register(_at_exit)
    hook_stop_signals()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _after_fork(settings, events, threaded))


def _at_exit() -> None:
    live = _live
    if live is not None:
        try:
            live.close()
        except Exception:  # pragma: no cover - never fail the interpreter's exit
            pass


STOP_SIGNALS = ("SIGINT",)
STOP_WAIT_S = 2.0
"""How long a stop signal's handler waits for the sink's thread to complete the log file before the signal takes
its course (the thread may need a lock the interrupted worker holds: then the wait runs out, nothing worse)."""


def hook_stop_signals() -> list:
    """On the main thread: SIGINT first completes the live log file (:meth:`Sink.complete_soon`), then does what it
    did (the handler found: Python's KeyboardInterrupt, or another). Ctrl-C in a terminal reaches every process of
    the group, SGLang's schedulers included, and the server then stops them with SIGKILL (``kill_process_tree``): an
    exit hook never runs there, and the open file (up to ``SPECPROF_TIMING_FILE_S`` of cycles) was left an unreadable
    ``.parquet.tmp`` (2026-12-06, a real server). SIGINT already runs Python code (KeyboardInterrupt), so hooking it
    changes no process's course; SIGTERM is left alone: a Python handler would make it wait for the main thread to
    run Python again (a worker stuck in a collective would no longer die on ``kill``). A signal ignored stays ignored;
    a handler installed later replaces this one. Returns the signals hooked."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return []
    hooked = []
    for name in STOP_SIGNALS:
        num = getattr(signal, name, None)
        if num is None:
            continue
        try:
            previous = signal.getsignal(num)
            if previous in (signal.SIG_IGN, None):
                continue
            signal.signal(num, _stop_handler(previous))
            hooked.append(name)
        except (ValueError, OSError, RuntimeError):  # pragma: no cover - not allowed here: the exit hook stays
            continue
    return hooked


_in_stop: list = []


def _stop_handler(previous):
    import signal

    def handler(signum, frame):
        live = _live
        if live is not None and not live.closed and not _in_stop:
            _in_stop.append(True)   # a second signal inside this one goes straight on (no wait on a held lock)
            try:
                live.sink.complete_soon(STOP_WAIT_S)
            except Exception:  # noqa: BLE001 - never stand between a signal and its course
                pass
            finally:
                _in_stop.clear()
        if callable(previous):
            return previous(signum, frame)
        signal.signal(signum, signal.SIG_DFL)       # the default's course: the process ends by this signal
        os.kill(os.getpid(), signum)
    return handler


def _after_fork(settings, events, threaded) -> None:
    """A forked child starts its own timing (fresh ring, its own files); the parent's is not its own."""
    global _live
    if _live is None:
        return
    _live.closed = True  # the parent's thread and file do not exist here
    _live = None
    from .events import unhook_cuda_graphs

    unhook_cuda_graphs()    # the child's own timer hooks the graphs again at its first cycle
    from .. import wrappers

    # none of the parent's timer stays hooked in (its pass_ranges would let the child's ranges pass unrecorded
    # should enable fail here)
    wrappers.on_accept = wrappers.on_idle = wrappers.on_cycle_steps = wrappers.own_time = None
    try:
        enable(settings, events, threaded)
    except Exception:  # pragma: no cover - never break a fork
        pass


def disable() -> None:
    """Close the timing mode and restore the backend and the accept hook (tests)."""
    global _live
    live = _live
    if live is None:
        return
    from .. import _nvtx, wrappers

    live.close()
    from .events import unhook_cuda_graphs

    unhook_cuda_graphs()
    if _nvtx._backend is live.tee:
        _nvtx.set_backend(live.previous_backend)
    wrappers.on_accept = None
    wrappers.on_idle = None
    wrappers.on_cycle_steps = None
    wrappers.own_time = None
    _live = None
