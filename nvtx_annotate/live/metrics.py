"""Prometheus metrics of the timing mode, per rank (label ``rank``), in SGLang's naming style.

| metric | type | labels | what |
|---|---|---|---|
| ``specprof:phase_seconds`` | histogram | phase, rank | GPU time of draft / verify / draft_extend / allreduce in one cycle (CUDA events) |
| ``specprof:cycle_seconds`` | histogram | rank | host time of one decode cycle (``forward_batch_generation``) |
| ``specprof:gpu_span_seconds`` | histogram | rank | first to last CUDA event of one cycle |
| ``specprof:accepted_tokens_per_cycle`` | histogram | rank | accepted draft tokens of one cycle, summed over its requests |
| ``specprof:accept_length`` | histogram | rank | accepted draft tokens per request of one cycle (mean over the batch) |
| ``specprof:tokens_per_second`` | gauge | rank | tokens produced (accepted + one per request) per host second, last ``window_s`` |
| ``specprof:cycles_total`` | counter | rank | cycles resolved and reported |
| ``specprof:dropped_cycles_total`` | counter | rank, reason | cycles not reported (``ring_overflow``, ``unresolved_at_close``) |

prometheus_client is imported by :func:`make_metrics` (None and one warning when it is missing).
With ``PROMETHEUS_MULTIPROC_DIR`` set before the import, prometheus_client keeps the values in that
directory (its multiprocess mode), where a collector such as SGLang's ``/metrics`` finds them.
"""

from __future__ import annotations

from collections import deque

PHASE_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1.0)
TOKEN_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
ACCEPT_LENGTH_BUCKETS = (0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 16)
PHASES = ("draft", "verify", "draft_extend", "allreduce")
NS = 1e-9


def tokens_per_second(window) -> float | None:
    """Tokens per host second over ``(start_ns, end_ns, tokens)`` cycles: their tokens over the time
    from the first start to the last end; None without time."""
    if not window:
        return None
    span = max(w[1] for w in window) - min(w[0] for w in window)
    if span <= 0:
        return None
    return sum(w[2] for w in window) / (span * NS)


class LiveMetrics:
    """The metric objects of one process, registered in ``registry`` (a CollectorRegistry)."""

    def __init__(self, prom, registry, rank: int, window_s: float = 10.0):
        self.rank = str(int(rank))
        self.window_ns = int(window_s * 1e9)
        self._window: deque = deque()
        self._reported = {}  # counter name -> value already added
        kw = {"registry": registry}
        self.phase = prom.Histogram("specprof:phase_seconds", "GPU time of one phase in one decode cycle (CUDA events)",
                                    ["phase", "rank"], buckets=PHASE_BUCKETS, **kw)
        self.cycle = prom.Histogram("specprof:cycle_seconds", "Host time of one decode cycle", ["rank"],
                                    buckets=PHASE_BUCKETS, **kw)
        self.span = prom.Histogram("specprof:gpu_span_seconds", "First to last CUDA event of one decode cycle",
                                   ["rank"], buckets=PHASE_BUCKETS, **kw)
        self.accepted = prom.Histogram("specprof:accepted_tokens_per_cycle",
                                       "Accepted draft tokens of one decode cycle (all its requests)", ["rank"],
                                       buckets=TOKEN_BUCKETS, **kw)
        self.accept_length = prom.Histogram("specprof:accept_length",
                                            "Accepted draft tokens per request of one decode cycle", ["rank"],
                                            buckets=ACCEPT_LENGTH_BUCKETS, **kw)
        self.tps = prom.Gauge("specprof:tokens_per_second", "Tokens produced per host second (recent cycles)",
                              ["rank"], multiprocess_mode="all", **kw)
        self.cycles = prom.Counter("specprof:cycles", "Decode cycles resolved and reported", ["rank"], **kw)
        self.dropped = prom.Counter("specprof:dropped_cycles", "Decode cycles not reported", ["rank", "reason"], **kw)
        for reason in ("ring_overflow", "unresolved_at_close"):
            self.dropped.labels(rank=self.rank, reason=reason)  # exported at 0 from the start

    def observe(self, row: dict) -> None:
        """One resolved cycle (a row of the timing log)."""
        r = self.rank
        for phase in PHASES:
            ns = row.get(f"{phase}_ns")
            if ns is not None:
                self.phase.labels(phase=phase, rank=r).observe(ns * NS)
        start, end = row["host_start_ns"], row["host_end_ns"]
        self.cycle.labels(rank=r).observe((end - start) * NS)
        if row.get("gpu_span_ns") is not None:
            self.span.labels(rank=r).observe(row["gpu_span_ns"] * NS)
        self.cycles.labels(rank=r).inc()
        acc, reqs = row.get("accepted_tokens"), row.get("requests")
        if acc is None or reqs is None:
            return
        self.accepted.labels(rank=r).observe(acc)
        if reqs > 0:
            self.accept_length.labels(rank=r).observe(acc / reqs)
        w = self._window
        w.append((start, end, acc + reqs))
        while w and w[0][1] < end - self.window_ns:
            w.popleft()
        tps = tokens_per_second(w)
        if tps is not None:
            self.tps.labels(rank=r).set(tps)

    def count_drops(self, counters: dict) -> None:
        """Add the growth of the timer's drop counters since the last call."""
        for reason in ("ring_overflow", "unresolved_at_close"):
            now = int(counters.get(reason, 0))
            delta = now - self._reported.get(reason, 0)
            if delta > 0:
                self.dropped.labels(rank=self.rank, reason=reason).inc(delta)
                self._reported[reason] = now


def load_prometheus():
    """The prometheus_client module, or None when it is not installed."""
    try:
        import prometheus_client
    except ImportError:
        return None
    return prometheus_client


def make_metrics(rank: int, registry=None, port: int | None = None, warn=None) -> LiveMetrics | None:
    """The metrics of this process (None, after one ``warn(key, text)``, without prometheus_client);
    ``port``: also serve ``registry`` over HTTP on that port (``/metrics``)."""
    prom = load_prometheus()
    if prom is None:
        if warn is not None:
            warn("live:prometheus", "nvtx_annotate: SPECPROF_TIMING: prometheus_client is not installed "
                                    "(pip install 'specprof[live]'): no metrics, the timing log is still written")
        return None
    if registry is None:
        registry = prom.CollectorRegistry()
    metrics = LiveMetrics(prom, registry, rank)
    metrics.registry = registry
    if port is not None:
        prom.start_http_server(int(port), registry=registry)
    return metrics
