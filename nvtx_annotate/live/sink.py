"""Where resolved cycles go: the worker thread only appends a row to a deque (:meth:`Sink.add`); a
daemon thread wakes every ``interval_s``, feeds the rows to the metrics and the Parquet log (which
writes a batch every N rows, or after ``flush_s`` seconds with rows waiting: what a SIGKILL can lose) and reports the
timer's drop counters. Nothing here runs on the hot path beyond the append (and, once, the thread
start).

Once no new row came for ``idle_complete_s`` (5 s: a server between bursts), the log writes what it
holds and completes its file: SGLang ends its scheduler processes with SIGKILL (``Engine.shutdown``,
``kill_process_tree``; a parent's death: ``PR_SET_PDEATHSIG``), so no exit hook runs: the open file's
batches stay readable (log.py: analyze-trace and the trigger read them). A log or metrics that cannot be set up (a directory that
cannot be made, a port that is taken) is said once and left out; the other output goes on."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from .events import ROW_FIELDS

SINK_FIELDS = ("sink_ns",)
"""The column the sink adds to the timer's rows (the log's last): ``sink_ns``, the CPU time
(``time.thread_time_ns``) the sink's thread spent on the previous drain (the metrics and the log's row
groups), on the first row of the next drain, 0 on the others: summed over a stretch of rows, what the
output costs in CPU time besides the worker thread's ``shim_ns`` (in a Python server it holds the GIL
meanwhile)."""
LOG_FIELDS = ROW_FIELDS + SINK_FIELDS
"""The columns of a row as the sink hands it on (log.py's, metrics.py's), in order: the timer's, then the sink's."""
_NO_SINK_NS = (0,)
_TIMED_AT = LOG_FIELDS.index("timed")


def row_values(row: dict) -> tuple:
    """A row made as a dict (the timer's timed cycles, or elsewhere) as its values in :data:`LOG_FIELDS` order, a
    missing field null but a missing ``timed`` 1: a row that does not say counts as timed (as the metrics always
    counted it)."""
    values = tuple(map(row.get, LOG_FIELDS))
    return values if "timed" in row else values[:_TIMED_AT] + (1,) + values[_TIMED_AT + 1:]


class Sink:
    """``make_outputs()`` -> ``(log writer or None, metrics or None)``, called once on the sink's
    thread before the first rows are handled (the rank is known by then); ``counters()`` -> the
    timer's counters (drops)."""

    def __init__(self, make_outputs: Callable[[], tuple], counters: Callable[[], dict] | None = None,
                 interval_s: float = 1.0, flush_s: float = 1.0, threaded: bool = True, idle_complete_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic, on_error: Callable[[str, BaseException], None] | None = None,
                 detail: Callable[[], None] | None = None, make_row: Callable[[object], dict] | None = None,
                 make_values: Callable[[object], tuple] | None = None):
        self.make_outputs, self.counters, self.interval_s, self.flush_s = make_outputs, counters, interval_s, flush_s
        self.idle_complete_s = idle_complete_s
        self.detail = detail        # SPECPROF_TIMING_OWN_DETAIL: writes the shim's own time by place, each drain
        self.make_row = make_row    # a handed-over cycle record (not a dict) -> its row, made here (Timer.on_record)
        # the same record -> its row's values in the timer's field order (Timer.values: no dict a cycle); else make_row
        self.make_values = make_values
        self.threaded, self.clock, self.on_error = threaded, clock, on_error
        self._rows: deque = deque()
        self._thread = None
        self._stop = None
        self._outputs = None
        self._last_write = clock()
        self._idle_since = None
        self.handled = 0
        self._spent_ns = 0          # CPU time of drains not yet carried by a row (sink_ns)
        self._wake = self._completed = None     # threading.Events, made with the thread
        self._complete_now = False  # complete_soon(): the next drain completes the log file

    # worker thread
    def add(self, row) -> None:
        """A row (a dict), or a record that :attr:`make_row` makes into one on the sink's thread."""
        self._rows.append(row)
        if self._thread is None and self.threaded:
            self._start()

    def pending_rows(self) -> list[dict]:
        """The rows waiting for the next drain, made (records included), not taken: what a drain would handle."""
        make_row = self.make_row
        return [r if type(r) is dict else make_row(r) for r in list(self._rows)]

    def _start(self) -> None:
        import threading

        self._stop, self._wake, self._completed = threading.Event(), threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specprof-live", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.drain()
            except Exception as exc:  # never kill the server: report once, keep going
                if self.on_error is not None:
                    self.on_error("live sink", exc)

    # any thread (a signal handler on the main thread: nvtx_annotate/live/__init__.py)
    def complete_soon(self, wait_s: float = 0.0) -> bool:
        """Ask the sink's thread to write what waits and complete the log file now (the process is about to be
        stopped: SGLang's server kills its schedulers with SIGKILL, which no exit hook outlives), and wait up to
        ``wait_s`` for it; never takes a lock the worker may hold. True when the file was completed in time."""
        if self._thread is None or self._wake is None:
            return False            # no thread (no row yet, or unthreaded): nothing written to complete
        self._completed.clear()     # before the flag: a drain taking the flag sets it after this
        self._complete_now = True
        self._wake.set()
        return self._completed.wait(wait_s) if wait_s > 0 else False

    # sink thread (or the caller, in tests and at close)
    def outputs(self) -> tuple:
        if self._outputs is None:
            self._outputs = self.make_outputs()
        return self._outputs

    def _failed(self, what: str, exc: BaseException) -> None:
        """An output that fails is dropped (said once); the rows keep flowing to the other."""
        log, metrics = self._outputs
        self._outputs = (None, metrics) if what == "log" else (log, None)
        if what == "log" and log is not None:
            log.abandon()               # its file closed (completed where it still can be)
        if self.on_error is not None:
            self.on_error(f"live sink ({what}, now off)", exc)

    def drain(self) -> int:
        """Handle the rows waiting now; write a row group when the log asks or ``flush_s`` passed;
        when no row came for ``idle_complete_s``, write what waits and complete the file (module doc)."""
        self.outputs()              # made once (imports, the metrics' registration): no drain's recurring cost
        t0 = time.thread_time_ns()
        try:
            return self._drain()
        finally:
            self._spent_ns += time.thread_time_ns() - t0

    def _drain(self) -> int:
        log, metrics = self.outputs()
        # taken before the rows: every row added before complete_soon() is in the file it completes
        complete, self._complete_now = self._complete_now, False
        rows = self._rows
        batch = []              # each row's values in the log's column order (LOG_FIELDS: the timer's, then sink_ns)
        make_row, make_values = self.make_row, self.make_values
        while rows:
            row = rows.popleft()
            try:
                if type(row) is not dict and make_values is not None:
                    values = make_values(row) + _NO_SINK_NS
                else:
                    values = row_values(row if type(row) is dict else make_row(row))[:-1] + _NO_SINK_NS
            except Exception as exc:  # noqa: BLE001 - one record that cannot be made a row: said, left out
                if self.on_error is not None:
                    self.on_error("live sink (row)", exc)
                continue
            batch.append(values)
        if batch:       # the CPU time of the drains before this one goes on its first row (SINK_FIELDS)
            batch[0] = batch[0][:-1] + (self._spent_ns,)
            self._spent_ns = 0
        n = len(batch)
        if log is not None:
            add = getattr(log, "add_values", None)
            for values in batch:
                try:
                    add(values) if add is not None else log.add(dict(zip(LOG_FIELDS, values)))
                except Exception as exc:  # noqa: BLE001
                    self._failed("log", exc)
                    log = None
                    break
        if metrics is not None and batch:
            try:
                if hasattr(metrics, "observe_values"):
                    metrics.observe_values(batch)     # the drain's rows at once (metrics.observe_all)
                else:
                    metrics.observe_many([dict(zip(LOG_FIELDS, values)) for values in batch])
            except Exception as exc:  # noqa: BLE001 - never stop the log for the metrics
                self._failed("metrics", exc)
                metrics = None
        if metrics is not None:
            try:
                metrics.publish()
                if self.counters is not None:
                    metrics.count_drops(self.counters())
            except Exception as exc:  # noqa: BLE001
                self._failed("metrics", exc)
        if log is not None:
            try:
                now = self.clock()
                if n:
                    self._idle_since = None
                elif self._idle_since is None:
                    self._idle_since = now
                # idle, or asked (complete_soon): what was written is made readable now (module doc)
                finish = complete or (self._idle_since is not None and now - self._idle_since >= self.idle_complete_s)
                if log.buffered() and (finish or now - self._last_write >= self.flush_s):
                    log.flush()
                if not log.buffered():
                    self._last_write = now
                    if finish:
                        log.complete()
                    else:
                        log.complete_if_old()
            except Exception as exc:  # noqa: BLE001
                self._failed("log", exc)
        if complete and self._completed is not None:
            self._completed.set()
        if self.detail is not None:
            try:
                self.detail()
            except Exception as exc:  # noqa: BLE001 - a diagnostic: said once, then off
                self.detail = None
                if self.on_error is not None:
                    self.on_error("live sink (own detail, now off)", exc)
        self.handled += n
        return n

    def close(self) -> None:
        """Stop the thread, handle what is left, complete the log file."""
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join(timeout=5)
        if self._outputs is None and not self._rows:
            return
        self.drain()
        log, _ = self.outputs()
        if log is not None:
            log.close()
