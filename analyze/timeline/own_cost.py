"""What the shim's timing mode costs, read from its own live log (issue 43: under 1% of tokens/s, said by
the log itself rather than by a separate benchmark).

The log gives two measurements, per rank and batch size over the steady cycles (timeline.cycles.steady):

* **The events' cost.** The shim records CUDA events in one cycle of N (``SPECPROF_TIMING_SAMPLE``), every
  other cycle runs without them; the cycles are chosen by number, so a timed cycle differs from its
  neighbours in nothing but the timing. Their mean periods differ by what the events cost a timed cycle,
  host and GPU side (the stream gate included): ``timed_extra_ns``, with a 95% interval (Welch). Spread over
  all cycles it costs ``share_timed x timed_extra_ns``.
* **The shim's host time.** Each row carries the host time the shim spent on the worker thread
  (``shim_ns``: every wrapper's own part, the timer, the graph hook less the launch; nvtx_annotate/live)
  and the sink thread's CPU time (``sink_ns``). An untimed cycle's ``shim_ns`` is what every cycle pays
  (a timed cycle's extra is in ``timed_extra_ns`` already). Counted in full: an upper bound where the GPU
  and not the host sets the cycle.

cost per cycle = mean ``shim_ns`` of the untimed cycles + share_timed x ``timed_extra_ns`` + mean ``sink_ns``;
its share of the mean period is the share of tokens/s the mode costs (tokens/s = tokens / period: without
the mode the period would be shorter by the cost). Logs written before ``shim_ns``/``sink_ns`` give the
events' part only; a log with every cycle timed (``SPECPROF_TIMING_SAMPLE=1``, or no events at all) gives the
host part only; the ``basis`` column says which. ``shim_ns`` must be each cycle's own: a row carries the shim's
time from the previous cycle's end to its end (a shim of the morning of 2026-12-06 carried it two cycles late
under SGLang's overlap scheduler, which put a timed cycle's extra on an untimed row too: about 0.3 points high).
Pure functions over the cycle table of a live log (run/live.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.timeline.cycles import steady, timed

COLUMNS = ["rank", "requests", "cycles", "timed_cycles", "period_ns", "timed_extra_ns", "timed_extra_ci_ns",
           "shim_ns", "sink_ns", "cost_ns", "cost_pct", "cost_pct_low", "cost_pct_high", "basis"]
"""One row per (rank, batch size): cycles counted, the mean period, the timed cycles' extra period and its
95% half-width, the shim's and the sink's time a cycle, the cost a cycle, its share of the period (%) with
its 95% interval, and what the cost counts (:data:`BASES`)."""
T975 = {9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110,
        18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052,
        28: 2.048, 29: 2.045}
"""Student's t, 97.5% quantile, by degrees of freedom below 30 (above: the normal's 1.96)."""
MIN_CYCLES = 10
"""Fewest timed and untimed cycles of a batch size for a comparison of their periods (and fewest cycles for a
row at all)."""
Z95 = 1.959964
ALL, EVENTS_ONLY, HOST_ONLY = "events + shim + sink", "events only", "shim + sink"
"""What a row's cost counts (its ``basis``): the events' extra period of the timed cycles, the shim's host time and
the sink's CPU time; the events' part only (a log written before shim_ns / sink_ns); the host part only (no
untimed cycles to compare the timed ones with: the events' GPU-side cost is not separable)."""


def _mean_se(values: np.ndarray) -> tuple[float, float]:
    """(mean, its standard error) of the finite values; (nan, nan) without any."""
    v = values[np.isfinite(values)]
    if not len(v):
        return float("nan"), float("nan")
    return float(v.mean()), float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0


def _column(c: pd.DataFrame, name: str) -> np.ndarray:
    if name not in c.columns:
        return np.full(len(c), np.nan)
    return pd.to_numeric(c[name], errors="coerce").astype("Float64").to_numpy(dtype="float64", na_value=np.nan)


def group_cost(c: pd.DataFrame) -> dict | None:
    """The cost row of one rank's steady cycles of one batch size (``c``: cycle-table rows with
    ``period_ns``, ``timed`` and, where logged, ``shim_ns`` / ``sink_ns``); None below :data:`MIN_CYCLES`
    cycles, and for a sampled log below :data:`MIN_CYCLES` timed or untimed ones (the batch sizes a server
    passes through as requests finish: their events' share cannot be told)."""
    period = _column(c, "period_ns")
    ok = np.isfinite(period) & (period > 0)
    c, period = c[ok], period[ok]
    n = len(c)
    if n < MIN_CYCLES:
        return None
    is_timed = timed(c)
    n_t = int(is_timed.sum())
    shim, sink = _column(c, "shim_ns"), _column(c, "sink_ns")
    has_host = bool(np.isfinite(shim).any())
    compare = n_t >= MIN_CYCLES and n - n_t >= MIN_CYCLES
    if not compare and (not has_host or n_t < n):
        return None         # a sampled log's batch size with too few timed (or untimed) cycles to compare: no row
    extra = extra_se = float("nan")
    if compare:
        mt, st = _mean_se(period[is_timed])
        mu, su = _mean_se(period[~is_timed])
        # the timed cycles' few samples: their t quantile (conservative: their own degrees of freedom)
        extra, extra_se = mt - mu, float(np.hypot(st, su)) * T975.get(n_t - 1, Z95) / Z95
    share = n_t / n
    if has_host:
        base, base_se = _mean_se(shim[~is_timed] if compare else shim)
        sink_mean, sink_se = _mean_se(sink) if np.isfinite(sink).any() else (0.0, 0.0)
    else:
        base = base_se = sink_mean = sink_se = float("nan")
    parts = [(share * extra, share * extra_se)] if compare else []
    if has_host:
        parts += [(base, base_se), (sink_mean, sink_se)]
    cost = float(sum(p for p, _ in parts))
    se = float(np.sqrt(sum(s * s for _, s in parts)))
    mean_period = float(period.mean())
    return {"requests": int(c["requests"].iloc[0]) if "requests" in c.columns and pd.notna(c["requests"].iloc[0])
            else None, "cycles": n, "timed_cycles": n_t, "period_ns": round(mean_period),
            "timed_extra_ns": round(extra) if compare else None,
            "timed_extra_ci_ns": round(Z95 * extra_se) if compare else None,
            "shim_ns": round(base) if has_host else None, "sink_ns": round(sink_mean) if has_host else None,
            "cost_ns": round(cost), "cost_pct": 100 * cost / mean_period,
            "cost_pct_low": 100 * (cost - Z95 * se) / mean_period, "cost_pct_high": 100 * (cost + Z95 * se) / mean_period,
            "basis": ALL if compare and has_host else EVENTS_ONLY if compare else HOST_ONLY}


def cost_table(cycles: pd.DataFrame) -> pd.DataFrame:
    """Per rank and batch size (``requests``) of a live log's steady cycles: :data:`COLUMNS` (module doc);
    empty for a table without ``timed`` cycles to compare and without ``shim_ns`` (an nsys profile)."""
    if cycles is None or cycles.empty or ("shim_ns" not in cycles.columns and "timed" not in cycles.columns):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    st = steady(cycles)
    rows = []
    keys = ["rank", "requests"] if "requests" in st.columns else ["rank"]
    for key, c in st.groupby(keys, sort=True, dropna=False):
        row = group_cost(c)
        if row is not None:
            rows.append({"rank": int(key[0] if isinstance(key, tuple) else key), **row})
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    out = pd.DataFrame(rows)[COLUMNS]
    ints = ["requests", "timed_extra_ns", "timed_extra_ci_ns", "shim_ns", "sink_ns"]
    return out.astype({c: "Int64" for c in ints})
