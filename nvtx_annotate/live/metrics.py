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
| ``specprof:shim_seconds_total`` | counter | rank, thread | the shim's own time (``worker``: the rows' ``shim_ns``, ``sink``: ``sink_ns``) |

prometheus_client is imported by :func:`make_metrics` (None and one warning when it is missing).
With ``PROMETHEUS_MULTIPROC_DIR`` set before the import, prometheus_client keeps the values in that
directory (its multiprocess mode), where a collector such as SGLang's ``/metrics`` finds them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, deque

from .sink import LOG_FIELDS, row_values

PHASE_BUCKETS = (25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 0.1, 0.25, 0.5, 1.0)
TOKEN_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
ACCEPT_LENGTH_BUCKETS = (0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 16)
PHASES = ("draft", "verify", "draft_extend", "allreduce")
_PHASE_KEYS = tuple((phase, f"{phase}_ns") for phase in PHASES)
NS = 1e-9
_AT = {name: i for i, name in enumerate(LOG_FIELDS)}
_PHASE_AT = tuple((phase, _AT[key]) for phase, key in _PHASE_KEYS)
(_START, _END, _TIMED, _SPAN, _SHIM, _SINK, _ACC, _REQS) = (_AT[k] for k in (
    "host_start_ns", "host_end_ns", "timed", "gpu_span_ns", "shim_ns", "sink_ns", "accepted_tokens", "requests"))


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
        self.shim = prom.Counter("specprof:shim_seconds", "Host time the shim itself took (the worker thread's "
                                 "shim_ns and the sink thread's sink_ns): its rate is the share of time it costs",
                                 ["rank", "thread"], **kw)
        self.dropped = prom.Counter("specprof:dropped_cycles", "Decode cycles not reported", ["rank", "reason"], **kw)
        for reason in ("ring_overflow", "unresolved_at_close"):
            self.dropped.labels(rank=self.rank, reason=reason)  # exported at 0 from the start
        r = self.rank       # the labelled children, looked up once (not per cycle)
        self._children = {phase: self.phase.labels(phase=phase, rank=r) for phase in PHASES}
        self._children.update(cycle=self.cycle.labels(rank=r), span=self.span.labels(rank=r),
                              cycles=self.cycles.labels(rank=r), accepted=self.accepted.labels(rank=r),
                              shim=self.shim.labels(rank=r, thread="worker"),
                              sink=self.shim.labels(rank=r, thread="sink"),
                              accept_length=self.accept_length.labels(rank=r), tps=self.tps.labels(rank=r))
        self._window_tokens = 0

    def observe(self, row: dict) -> None:
        """One resolved cycle (a row of the timing log): :meth:`observe_many` of it. The tokens/s gauge is set by
        :meth:`publish` (once per batch of rows: the window's running sum, never a rescan)."""
        self.observe_many((row,))

    def observe_many(self, rows) -> None:
        """Every row (a dict of the timing log's columns) of a drain: :meth:`observe_values` of them."""
        self.observe_values([row_values(row) for row in rows])

    def observe_values(self, rows) -> None:
        """Every row of a drain as its values in the log's column order (:data:`LOG_FIELDS`: the sink's rows, no
        dict a cycle), each histogram's buckets and sum added to once per drain (:func:`observe_all`: the sink's
        thread holds the GIL a fifth as long as with one observe a value)."""
        ch = self._children
        by_phase = {phase: [] for phase in PHASES}
        cycle, span, accepted, accept_length = [], [], [], []
        shim = sink = 0
        w = self._window
        window_ns = self.window_ns
        for v in rows:
            if v[_TIMED]:       # a cycle the sampling left without events has none of these
                for phase, at in _PHASE_AT:
                    ns = v[at]
                    if ns is not None:
                        by_phase[phase].append(ns * NS)
                if v[_SPAN] is not None:
                    span.append(v[_SPAN] * NS)
            start, end = v[_START], v[_END]
            cycle.append((end - start) * NS)
            shim += v[_SHIM] or 0
            sink += v[_SINK] or 0
            acc, reqs = v[_ACC], v[_REQS]
            if acc is None or reqs is None:
                continue
            accepted.append(acc)
            if reqs > 0:
                accept_length.append(acc / reqs)
            w.append((start, end, acc + reqs))
            self._window_tokens += acc + reqs
            while w and w[0][1] < end - window_ns:
                self._window_tokens -= w.popleft()[2]
        for key, vals in (*by_phase.items(), ("cycle", cycle), ("span", span), ("accepted", accepted),
                          ("accept_length", accept_length)):
            if vals:
                observe_all(ch[key], vals)
        if rows:
            ch["cycles"].inc(len(rows))
        if shim:
            ch["shim"].inc(shim * NS)
        if sink:
            ch["sink"].inc(sink * NS)

    def tokens_per_second(self) -> float | None:
        """Tokens per host second over the window: its tokens over the time from its first cycle's start
        to its last cycle's end (cycles of one process come in order); None without time."""
        w = self._window
        if not w:
            return None
        span = w[-1][1] - w[0][0]
        return self._window_tokens / (span * NS) if span > 0 else None

    def publish(self) -> None:
        """Set the gauges from what :meth:`observe` gathered (the sink calls it once per drain)."""
        tps = self.tokens_per_second()
        if tps is not None:
            self._children["tps"].set(tps)

    def count_drops(self, counters: dict) -> None:
        """Add the growth of the timer's drop counters since the last call."""
        for reason in ("ring_overflow", "unresolved_at_close"):
            now = int(counters.get(reason, 0))
            delta = now - self._reported.get(reason, 0)
            if delta > 0:
                self.dropped.labels(rank=self.rank, reason=reason).inc(delta)
                self._reported[reason] = now


def observe_all(child, values) -> None:
    """``values`` into a histogram ``child`` as ``child.observe(v)`` for each would: one increment a bucket
    touched and one of the sum (prometheus_client's ``_upper_bounds`` / ``_buckets`` / ``_sum``, stable since
    0.4: ``observe`` adds 1 to the first bucket whose bound is >= the value and the value to the sum); a
    client without them gets ``observe`` of each."""
    bounds, buckets, total = (getattr(child, a, None) for a in ("_upper_bounds", "_buckets", "_sum"))
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for v in values:
            child.observe(v)
        return
    for i, n in Counter(bisect_left(bounds, v) for v in values).items():
        if i < len(buckets):
            buckets[i].inc(n)
    total.inc(sum(values))


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
        try:
            prom.start_http_server(int(port), registry=registry)
        except OSError as exc:          # the port is taken: the metrics stay, without their HTTP endpoint
            if warn is not None:
                warn("live:port", f"nvtx_annotate: SPECPROF_METRICS_PORT: cannot serve /metrics on port {port} "
                                  f"({exc}); the metrics are kept in this process' registry only")
    return metrics
