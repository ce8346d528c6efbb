"""Where resolved cycles go: the worker thread only appends a row to a deque (:meth:`Sink.add`); a
daemon thread wakes every ``interval_s``, feeds the rows to the metrics and the Parquet log (which
writes a row group every N rows, or after ``flush_s`` seconds with rows waiting) and reports the
timer's drop counters. Nothing here runs on the hot path beyond the append (and, once, the thread
start)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class Sink:
    """``make_outputs()`` -> ``(log writer or None, metrics or None)``, called once on the sink's
    thread before the first rows are handled (the rank is known by then); ``counters()`` -> the
    timer's counters (drops)."""

    def __init__(self, make_outputs: Callable[[], tuple], counters: Callable[[], dict] | None = None,
                 interval_s: float = 1.0, flush_s: float = 30.0, threaded: bool = True,
                 clock: Callable[[], float] = time.monotonic, on_error: Callable[[str, BaseException], None] | None = None):
        self.make_outputs, self.counters, self.interval_s, self.flush_s = make_outputs, counters, interval_s, flush_s
        self.threaded, self.clock, self.on_error = threaded, clock, on_error
        self._rows: deque = deque()
        self._thread = None
        self._stop = None
        self._outputs = None
        self._last_write = clock()
        self.handled = 0

    # worker thread
    def add(self, row: dict) -> None:
        self._rows.append(row)
        if self._thread is None and self.threaded:
            self._start()

    def _start(self) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="specprof-live", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.drain()
            except Exception as exc:  # never kill the server: report once, keep going
                if self.on_error is not None:
                    self.on_error("live sink", exc)

    # sink thread (or the caller, in tests and at close)
    def outputs(self) -> tuple:
        if self._outputs is None:
            self._outputs = self.make_outputs()
        return self._outputs

    def drain(self) -> int:
        """Handle the rows waiting now; write a row group when the log asks or ``flush_s`` passed."""
        log, metrics = self.outputs()
        n = 0
        rows = self._rows
        while rows:
            row = rows.popleft()
            if metrics is not None:
                metrics.observe(row)
            if log is not None:
                log.add(row)
            n += 1
        if metrics is not None and self.counters is not None:
            metrics.count_drops(self.counters())
        if log is not None:
            now = self.clock()
            if log.buffered() and now - self._last_write >= self.flush_s:
                log.flush()
            if not log.buffered():
                self._last_write = now
                log.complete_if_old()          # idle: the last file of a burst still completes
        self.handled += n
        return n

    def close(self) -> None:
        """Stop the thread, handle what is left, complete the log file."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
        if self._outputs is None and not self._rows:
            return
        self.drain()
        log, _ = self.outputs()
        if log is not None:
            log.close()
