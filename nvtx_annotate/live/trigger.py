"""``python -m nvtx_annotate.live.trigger``: open a short nsys capture when the live timing moves.

Follows the timing mode's output (docs/live.md): the complete Parquet log files in ``--log-dir``
as they appear, or the Prometheus text of ``--metrics`` URLs. It keeps a baseline (the first
``--baseline-cycles`` cycles, or with ``--rolling`` the ``--baseline-cycles`` cycles just before the
window) and compares the last ``--window-cycles`` cycles with it. When the window's cycle time or
acceptance moved beyond its threshold (relative, either way) it POSTs SGLang's ``/start_profile``
with ``{"activities": ["CUDA_PROFILER"], "num_steps": --capture-steps}``: SGLang calls
``cudaProfilerStart`` and stops by itself after that many forward steps, and an SGLang running
under ``nsys profile --capture-range=cudaProfilerApi --capture-range-end=repeat`` gets one report
per capture. At most one POST per ``--cooldown-s``. docs/live_trigger.md says how to start the server.

The decision is pure (:func:`window_stats`, :func:`decide`: stats in, a :class:`Decision` out, as
structured data); :func:`run` is the thin I/O loop around it. One line per decision on stderr; one
JSON line per trigger in ``--events``. ``--dry-run`` decides and logs but POSTs nothing.

Statistics. Cycle time is the host time of a decode cycle (``host_end_ns - host_start_ns`` in the log,
``specprof:cycle_seconds`` in the metrics). Acceptance is accepted draft tokens per request of a
cycle (``accepted_tokens / requests``, the ``specprof:accept_length`` histogram), averaged over
cycles. From the log every cycle is a sample and the cycle statistic is the exact median; from
the metrics a sample is what one series (URL, rank) gained between two scrapes (its count, the
mean of its ``_sum``), and the cycle statistic is the count-weighted median of those means (a
histogram's buckets are too coarse for a median: +20% inside one bucket would not show).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, List, Optional, Sequence

CYCLE = "cycle_time"
ACCEPTANCE = "acceptance"


# ------------------------------------------------------------------ the decision (pure)

@dataclass(frozen=True)
class Sample:
    """``cycles`` decode cycles: their cycle time (seconds; the mean when ``cycles > 1``) and their
    mean accepted tokens per request over ``accept_cycles`` of them (None when none had requests)."""

    cycles: int
    cycle_s: Optional[float]
    accept: Optional[float] = None
    accept_cycles: int = 0


@dataclass(frozen=True)
class Stats:
    """What a run of samples says: ``cycles`` cycles, the (weighted) median cycle time in seconds,
    the mean acceptance over ``accept_cycles`` cycles."""

    cycles: int
    cycle_s: Optional[float]
    accept: Optional[float]
    accept_cycles: int


def weighted_median(pairs: Iterable[tuple]) -> Optional[float]:
    """The median of ``(value, weight)`` pairs (weights > 0); with even total weight the mean of the
    two middle values, as ``statistics.median`` gives for weights of 1."""
    items = sorted((v, w) for v, w in pairs if w > 0 and v is not None)
    if not items:
        return None
    total = sum(w for _, w in items)

    def at(index):  # the value at a 0-based position of the expanded list
        seen = 0
        for v, w in items:
            seen += w
            if index < seen:
                return v
        return items[-1][0]

    return (at((total - 1) // 2) + at(total // 2)) / 2


def window_stats(samples: Sequence[Sample]) -> Stats:
    """The statistics of ``samples``: the cycles-weighted median cycle time (exact median when
    every sample is one cycle) and the accept_cycles-weighted mean acceptance."""
    cycles = sum(s.cycles for s in samples)
    median = weighted_median((s.cycle_s, s.cycles) for s in samples if s.cycle_s is not None)
    acc = [(s.accept, s.accept_cycles) for s in samples if s.accept is not None and s.accept_cycles > 0]
    acc_n = sum(n for _, n in acc)
    accept = sum(a * n for a, n in acc) / acc_n if acc_n else None
    return Stats(cycles=cycles, cycle_s=median, accept=accept, accept_cycles=acc_n)


@dataclass(frozen=True)
class Thresholds:
    """Relative changes that trigger (0 or less: that check is off), sizes in cycles, cooldown."""

    cycle_change: float = 0.15
    acceptance_change: float = 0.15
    window_cycles: int = 200
    baseline_cycles: int = 1000
    cooldown_s: float = 600.0


@dataclass(frozen=True)
class Change:
    """One compared statistic: from ``baseline`` to ``window`` (``change`` relative, signed), and
    whether it moved beyond ``threshold``."""

    metric: str
    baseline: float
    window: float
    change: float
    threshold: float
    moved: bool


@dataclass(frozen=True)
class Decision:
    """``trigger``: POST now. ``reason``: ``moved`` (trigger), ``within`` (nothing moved enough),
    ``cooldown`` (moved, but the last trigger was less than ``cooldown_s`` ago), ``too_few_cycles``
    (the baseline or the window is not full yet), ``no_data`` (a statistic is missing on both
    checks)."""

    trigger: bool
    reason: str
    changes: tuple = ()
    baseline: Optional[Stats] = None
    window: Optional[Stats] = None
    cooldown_left_s: Optional[float] = None

    @property
    def moved(self) -> List[Change]:
        return [c for c in self.changes if c.moved]

    def to_json(self) -> dict:
        return {"trigger": self.trigger, "reason": self.reason,
                "changes": [asdict(c) for c in self.changes],
                "baseline": asdict(self.baseline) if self.baseline else None,
                "window": asdict(self.window) if self.window else None,
                "cooldown_left_s": self.cooldown_left_s}


def _change(metric: str, base: Optional[float], now: Optional[float], threshold: float) -> Optional[Change]:
    if threshold <= 0 or base is None or now is None or base <= 0:
        return None
    rel = now / base - 1.0
    return Change(metric=metric, baseline=base, window=now, change=rel, threshold=threshold,
                  moved=abs(rel) > threshold)


def decide(baseline: Optional[Stats], window: Optional[Stats], th: Thresholds, now: float,
           last_trigger: Optional[float] = None) -> Decision:
    """Trigger or not, and why. ``now`` and ``last_trigger`` are seconds on one clock (monotonic)."""
    if (baseline is None or window is None or baseline.cycles < th.baseline_cycles
            or window.cycles < th.window_cycles):
        return Decision(False, "too_few_cycles", baseline=baseline, window=window)
    changes = tuple(c for c in (_change(CYCLE, baseline.cycle_s, window.cycle_s, th.cycle_change),
                                _change(ACCEPTANCE, baseline.accept, window.accept, th.acceptance_change))
                    if c is not None)
    if not changes:
        return Decision(False, "no_data", baseline=baseline, window=window)
    if not any(c.moved for c in changes):
        return Decision(False, "within", changes, baseline, window)
    if last_trigger is not None and now - last_trigger < th.cooldown_s:
        return Decision(False, "cooldown", changes, baseline, window,
                        cooldown_left_s=th.cooldown_s - (now - last_trigger))
    return Decision(True, "moved", changes, baseline, window)


class History:
    """The samples seen, trimmed to what the decision needs. The baseline is the first
    ``baseline_cycles`` cycles (frozen once full) or, ``rolling``, the ``baseline_cycles`` cycles
    just before the window; the window is the newest samples holding ``window_cycles`` cycles.
    With multi-cycle samples (metrics) both may hold a little more than asked."""

    def __init__(self, baseline_cycles: int, window_cycles: int, rolling: bool = False):
        self.baseline_cycles, self.window_cycles, self.rolling = baseline_cycles, window_cycles, rolling
        self._base: List[Sample] = []
        self._frozen: Optional[Stats] = None
        self._recent: deque = deque()
        self._base_cycles = self._recent_cycles = 0
        self.cycles_seen = 0

    def add(self, samples: Iterable[Sample]) -> int:
        n = 0
        keep = self.window_cycles + (self.baseline_cycles if self.rolling else 0)
        for s in samples:
            if s.cycles <= 0:
                continue
            n += s.cycles
            if not self.rolling and self._frozen is None:
                self._base.append(s)
                self._base_cycles += s.cycles
                if self._base_cycles >= self.baseline_cycles:
                    self._frozen = window_stats(self._base)
                    self._base = []
                continue
            self._recent.append(s)
            self._recent_cycles += s.cycles
            while self._recent_cycles - self._recent[0].cycles >= keep:
                self._recent_cycles -= self._recent.popleft().cycles
        self.cycles_seen += n
        return n

    def _split(self):
        window, count = [], 0
        for s in reversed(self._recent):
            if count >= self.window_cycles:
                break
            window.append(s)
            count += s.cycles
        older = list(self._recent)[:len(self._recent) - len(window)]
        return older, window[::-1]

    def baseline(self) -> Optional[Stats]:
        if not self.rolling:
            return self._frozen if self._frozen is not None else (window_stats(self._base) if self._base else None)
        older, _ = self._split()
        return window_stats(older) if older else None

    def window(self) -> Optional[Stats]:
        _, window = self._split()
        return window_stats(window) if window else None


# ------------------------------------------------------------------ sources (I/O)

LOG_COLUMNS = ("rank", "host_start_ns", "host_end_ns", "accepted_tokens", "requests")


def rows_to_samples(rows: Iterable[dict]) -> List[Sample]:
    """Log rows (dicts with :data:`LOG_COLUMNS`) -> one :class:`Sample` per cycle, in host order."""
    out = []
    for r in sorted(rows, key=lambda r: r["host_start_ns"]):
        acc, reqs = r.get("accepted_tokens"), r.get("requests")
        has = acc is not None and reqs is not None and reqs > 0
        out.append(Sample(1, (r["host_end_ns"] - r["host_start_ns"]) * 1e-9,
                          acc / reqs if has else None, 1 if has else 0))
    return out


class LogDirSource:
    """The cycles of a timing-log directory, each read once: the complete ``*.parquet`` files as they appear and
    the open ``*.arrows`` streams as they grow (whole batches, written every second: nvtx_annotate/live/log.py), so
    the watcher is a second or two behind the server, not a file's age; a stream's rows taken before it was
    completed are not taken again from its Parquet file. Rows of ``rank`` (None: all ranks)."""

    def __init__(self, directory: str, rank: Optional[int] = 0, log: Callable[[str], None] = print):
        self.directory, self.rank, self.log = directory, rank, log
        self.seen: set = set()          # stems whose complete file was read
        self.taken: dict = {}           # stem -> rows taken from its open stream

    def poll(self) -> List[Sample]:
        from .log import OPEN_SUFFIX, SUFFIX

        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            self.log(f"cannot list {self.directory}: {exc}")
            return []
        done = {n[: -len(SUFFIX)] for n in names if n.endswith(SUFFIX)}
        rows = []
        for name in names:
            if name.endswith(SUFFIX):
                stem = name[: -len(SUFFIX)]
                if stem in self.seen:
                    continue
                self.seen.add(stem)
            elif name.endswith(OPEN_SUFFIX) and name[: -len(OPEN_SUFFIX)] not in done:
                stem = name[: -len(OPEN_SUFFIX)]
            else:
                continue
            got = self._read(os.path.join(self.directory, name), name.endswith(OPEN_SUFFIX))
            if got is None:
                continue
            rows.extend(r for r in got[self.taken.get(stem, 0):] if self.rank is None or r["rank"] == self.rank)
            if name.endswith(OPEN_SUFFIX):
                self.taken[stem] = max(len(got), self.taken.get(stem, 0))
            else:
                self.taken.pop(stem, None)
        return rows_to_samples(rows)

    def _read(self, path: str, opened: bool) -> Optional[List[dict]]:
        """Every row of a log file (an open stream: its whole batches, log.read_stream); None when it cannot be
        read."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from .log import read_stream

        try:
            if opened:
                schema, batches, _ = read_stream(path)
                if schema is None:
                    return None             # no batch written yet
            else:
                schema = pq.read_schema(path)
            missing = [c for c in LOG_COLUMNS if c not in schema.names]
            if missing or b"specprof.schema_version" not in (schema.metadata or {}):
                self.log(f"{path}: not a specprof timing log ({', '.join(missing) or 'no specprof metadata'}); skipped")
                return None
            table = (pa.Table.from_batches(batches, schema) if opened else pq.read_table(path)).select(list(LOG_COLUMNS))
        except FileNotFoundError:
            return None  # completed (its Parquet read at the next poll) or deleted by rotation since the listing
        except Exception as exc:  # noqa: BLE001 - one unreadable file must not stop the watcher
            self.log(f"{path}: unreadable ({str(exc)[:200]}); skipped")
            return None
        return table.to_pylist()


_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
SERIES = {"specprof:cycle_seconds_sum": "cycle_sum", "specprof:cycle_seconds_count": "cycle_n",
          "specprof:accept_length_sum": "accept_sum", "specprof:accept_length_count": "accept_n"}


def parse_metrics(text: str) -> dict:
    """Prometheus text -> {labels (sorted tuple, without ``le``): {cycle_sum, cycle_n, accept_sum,
    accept_n}} for the two histograms the trigger reads."""
    out: dict = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m or m.group(1) not in SERIES:
            continue
        labels = tuple(sorted((k, v) for k, v in _LABEL.findall(m.group(2) or "") if k != "le"))
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.setdefault(labels, {})[SERIES[m.group(1)]] = value
    return out


def metric_delta(prev: Optional[dict], cur: dict) -> Optional[Sample]:
    """The cycles one series gained between two scrapes as one :class:`Sample`; None when nothing
    new. A count that went down (the worker restarted) starts over from ``cur``."""
    if prev is not None and cur.get("cycle_n", 0) < prev.get("cycle_n", 0):
        prev = None
    p = prev or {}
    n = int(round(cur.get("cycle_n", 0) - p.get("cycle_n", 0)))
    if n <= 0:
        return None
    cycle_s = (cur.get("cycle_sum", 0) - p.get("cycle_sum", 0)) / n
    an = int(round(cur.get("accept_n", 0) - p.get("accept_n", 0)))
    if an < 0:
        an = 0
    accept = (cur.get("accept_sum", 0) - p.get("accept_sum", 0)) / an if an > 0 else None
    return Sample(n, cycle_s, accept, an if accept is not None else 0)


class MetricsSource:
    """Scrapes ``urls`` (``/metrics`` of the TP workers, or of a multiprocess collector); one sample
    per series (URL, labels) and scrape with new cycles; series of ``rank`` (None: all)."""

    def __init__(self, urls: Sequence[str], rank: Optional[int] = 0, log: Callable[[str], None] = print,
                 timeout_s: float = 10.0):
        self.urls, self.rank, self.log, self.timeout_s = list(urls), rank, log, timeout_s
        self.last: dict = {}

    def poll(self) -> List[Sample]:
        out = []
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=self.timeout_s) as r:
                    text = r.read().decode("utf-8", "replace")
            except (urllib.error.URLError, OSError, ValueError) as exc:
                self.log(f"cannot scrape {url}: {_why(exc)}")
                continue
            for labels, cur in sorted(parse_metrics(text).items()):
                rank = dict(labels).get("rank")
                if self.rank is not None and rank != str(self.rank):
                    continue
                key = (url, labels)
                sample = metric_delta(self.last.get(key), cur)
                self.last[key] = cur
                if sample is not None:
                    out.append(sample)
        return out


# ------------------------------------------------------------------ the loop

def _why(exc: BaseException) -> str:
    """One line for an HTTP/socket error, with the body SGLang sent (its error message) when any."""
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read().decode("utf-8", "replace").strip()
        except Exception:  # noqa: BLE001
            body = ""
        return f"HTTP {exc.code} {exc.reason}" + (f": {' '.join(body.split())[:300]}" if body else "")
    if isinstance(exc, urllib.error.URLError):
        return f"{exc.reason}"
    return " ".join(str(exc).split())[:300] or type(exc).__name__


def _ms(s: Optional[float]) -> str:
    return "n/a" if s is None else f"{s * 1e3:.3f} ms"


def _num(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def describe(d: Decision) -> str:
    """One line: the decision, what moved, from what to what, over how many cycles."""
    b, w = d.baseline, d.window
    if d.reason == "too_few_cycles":
        return (f"waiting: baseline {b.cycles if b else 0} cycles, window {w.cycles if w else 0} cycles "
                f"(too few cycles to decide)")
    parts = []
    for c in d.changes:
        fmt = _ms if c.metric == CYCLE else _num
        name = "cycle time" if c.metric == CYCLE else "acceptance"
        parts.append(f"{name} {fmt(c.baseline)} -> {fmt(c.window)} ({c.change * 100:+.1f}%, "
                     f"threshold {c.threshold * 100:g}%{', MOVED' if c.moved else ''})")
    head = {"moved": "TRIGGER", "within": "steady", "cooldown": "moved, in cooldown", "no_data": "no data"}[d.reason]
    tail = f" ({d.cooldown_left_s:.0f} s of cooldown left)" if d.reason == "cooldown" else ""
    return (f"{head}: " + ("; ".join(parts) or "no cycle time or acceptance to compare")
            + f" over {w.cycles} cycles (baseline {b.cycles} cycles)" + tail)


@dataclass
class Trigger:
    """What :func:`run` needs besides the source: where to POST, how, and where to write."""

    server: str
    thresholds: Thresholds
    capture_steps: int = 50
    dry_run: bool = False
    events: Optional[str] = None
    log: Callable[[str], None] = field(default=lambda s: print(f"specprof-trigger: {s}", file=sys.stderr, flush=True))
    clock: Callable[[], float] = time.monotonic
    last_trigger: Optional[float] = None
    triggers: int = 0

    def body(self) -> dict:
        return {"activities": ["CUDA_PROFILER"], "num_steps": int(self.capture_steps)}

    def step(self, history: History) -> Decision:
        """Decide on the history as it is now; act on a trigger."""
        now = self.clock()
        d = decide(history.baseline(), history.window(), self.thresholds, now, self.last_trigger)
        self.log(describe(d))
        if d.trigger:
            self.fire(d, now)
        return d

    def fire(self, d: Decision, now: float) -> None:
        from .. import serve

        self.last_trigger = now  # the cooldown counts from the attempt, failed or not
        self.triggers += 1
        record = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "unix_s": time.time(), "server": self.server,
                  "dry_run": self.dry_run, "posted": False, "body": self.body(), "response": None, "error": None,
                  "decision": d.to_json()}
        if self.dry_run:
            self.log(f"dry run: would POST {self.server}/start_profile {json.dumps(self.body())}")
        else:
            try:
                record["response"] = serve.start_profile(self.server, self.capture_steps).strip()
                record["posted"] = True
                self.log(f"POST {self.server}/start_profile {json.dumps(self.body())}: {record['response']}")
            except Exception as exc:  # noqa: BLE001 - any server error: one line, keep watching
                record["error"] = _why(exc)
                self.log(f"POST {self.server}/start_profile failed: {record['error']} (still watching; "
                         f"next capture possible after the {self.thresholds.cooldown_s:g} s cooldown)")
        if self.events:
            with open(self.events, "a") as f:
                f.write(json.dumps(record) + "\n")


def run(source, history: History, trig: Trigger, poll_s: float = 5.0, duration_s: Optional[float] = None,
        sleep: Callable[[float], None] = time.sleep, stop=None) -> int:
    """Poll ``source``; one decision each time new cycles arrived. Returns the triggers fired. ``stop``
    (a threading.Event): set, the loop ends after the poll under way (its wait cut short)."""
    t0 = trig.clock()
    while stop is None or not stop.is_set():
        samples = source.poll()
        if history.add(samples):
            trig.step(history)
        if duration_s is not None and trig.clock() - t0 >= duration_s:
            return trig.triggers
        if stop is not None:
            stop.wait(poll_s)
        else:
            sleep(poll_s)
    return trig.triggers


class Stop(threading.Event):
    """Set by SIGINT or SIGTERM (:meth:`on_signals`), with the signal that set it (``signum``)."""

    signum: Optional[int] = None

    def on_signals(self) -> "Stop":
        """Handle SIGINT and SIGTERM by setting this (installed whatever this process inherited: a command
        started in the background of a script inherits SIGINT ignored): the watcher stops between polls,
        never inside a read of a log file (an interrupt raised inside pyarrow's reader could leave its
        threads to hang the exit)."""
        def handler(signum, frame):
            self.signum = signum
            self.set()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        return self


def build_parser() -> argparse.ArgumentParser:
    from analyze.errors import positive_int  # no pandas (analyze/__init__.py)

    p = argparse.ArgumentParser(prog="python -m nvtx_annotate.live.trigger", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--server", required=True, help="SGLang's URL, http://HOST:PORT")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--log-dir", help="the timing log directory (SPECPROF_TIMING_DIR)")
    src.add_argument("--metrics", help="comma-separated /metrics URLs (SPECPROF_METRICS_PORT + rank)")
    p.add_argument("--rank", default="0", help="the rank followed (default 0), or 'all' (pooled: a cycle of R ranks "
                                               "counts R times)")
    p.add_argument("--cycle-change", type=float, default=0.15, help="relative change of the median cycle time that "
                                                                    "triggers (default 0.15; 0: off)")
    p.add_argument("--acceptance-change", type=float, default=0.15, help="relative change of the mean acceptance that "
                                                                         "triggers (default 0.15; 0: off)")
    p.add_argument("--window-cycles", type=positive_int, default=200, help="cycles in the recent window (default 200)")
    p.add_argument("--baseline-cycles", type=positive_int, default=1000, help="cycles in the baseline (default 1000)")
    p.add_argument("--rolling", action="store_true", help="baseline: the cycles just before the window "
                                                          "(default: the first cycles seen)")
    p.add_argument("--capture-steps", type=positive_int, default=50,
                   help="num_steps of /start_profile: SGLang stops the capture after that many forward steps (default 50)")
    p.add_argument("--cooldown-s", type=float, default=600, help="at most one capture per this many seconds (default 600)")
    p.add_argument("--events", default=None, help="append one JSON line per trigger to this file")
    p.add_argument("--poll-s", type=float, default=5.0, help="seconds between polls (default 5)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: never)")
    p.add_argument("--dry-run", action="store_true", help="decide and log, POST nothing")
    return p


def main(argv=None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.rank == "all":
        rank = None
    else:
        try:
            rank = int(a.rank)
        except ValueError:
            p.error(f"--rank: {a.rank!r} is neither a rank number nor 'all'")
    for name in ("cycle_change", "acceptance_change"):
        if not math.isfinite(getattr(a, name)) or getattr(a, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be a number >= 0")
    if a.cycle_change == 0 and a.acceptance_change == 0:
        p.error("--cycle-change 0 and --acceptance-change 0: nothing would ever trigger")
    th = Thresholds(a.cycle_change, a.acceptance_change, a.window_cycles, a.baseline_cycles, a.cooldown_s)
    trig = Trigger(server=a.server.rstrip("/"), thresholds=th, capture_steps=a.capture_steps, dry_run=a.dry_run,
                   events=a.events)
    if a.log_dir:
        source = LogDirSource(a.log_dir, rank, log=trig.log)
        what = f"log directory {a.log_dir}"
    else:
        urls = [u.strip() for u in a.metrics.split(",") if u.strip()]
        source = MetricsSource(urls, rank, log=trig.log)
        what = "metrics " + ", ".join(urls)
    trig.log(f"watching {what} (rank {a.rank}); baseline {'rolling ' if a.rolling else 'first '}"
             f"{th.baseline_cycles} cycles, window {th.window_cycles} cycles, thresholds cycle time "
             f"{th.cycle_change * 100:g}%, acceptance {th.acceptance_change * 100:g}%; on a trigger "
             f"{'(dry run) ' if a.dry_run else ''}POST {trig.server}/start_profile {json.dumps(trig.body())}, "
             f"cooldown {th.cooldown_s:g} s")
    history = History(th.baseline_cycles, th.window_cycles, rolling=a.rolling)
    stop = Stop().on_signals()
    try:
        run(source, history, trig, poll_s=a.poll_s, duration_s=a.duration, stop=stop)
    except KeyboardInterrupt:
        stop.set()
    if stop.is_set():
        trig.log(f"stopped ({trig.triggers} trigger(s))")
        return 128 + (stop.signum or signal.SIGINT)          # 130 (SIGINT), 143 (SIGTERM)
    trig.log(f"done after {a.duration:g} s ({trig.triggers} trigger(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
