"""Rounds of requests that start together and stop at a fixed length: the tail speculation pays.

A benchmark round (``engine.generate`` of B prompts, ``bench_offline_throughput``, ``bench_one_batch``)
starts B requests together, each to generate N new tokens, and ends when the LAST one is done.
Without speculation every request yields one token a step: all finish at step N together. With
speculation a request yields 1 + min(L, s) tokens a cycle, a random number: requests finish at
different cycles, and while the slowest ones run, the batch does a full cycle's work for fewer
tokens (the graphs replay the padded batch). The round's tokens/s is B N / (E[max_i T_i] x cycle),
not the steady B (1 + E[min(L, s)]) / cycle: the fraction

    efficiency(s) = N / ((1 + E[min(L, s)]) E[max_i T_i])

where T_i is the cycle at which request i reaches N tokens (its last cycle's extra tokens are cut:
that overshoot is in the fraction too). More steps draw more tokens a cycle with a larger variance:
the tail grows with s, and with B (the maximum of more requests). Measured on the H200 (real SGLang
0.5.17, V = 2, 64 layers, 3 steps; fixtures/real/sglang_v2_l64_s3_b4.sqlite): a batch of 64 requests
of 128 tokens ran 57 cycles at 64 requests and 22 more while the batch drained, 30% of the round's time
for 14% of its tokens.

The model: requests i.i.d., each cycle's draft acceptance drawn from the acceptance model (the
per-position rates of acceptance.py), the tail cycles costing a full cycle. Exact: the distribution
of T is computed by convolution, E[max of B] = sum_t (1 - P(T <= t)^B).

Which workload: a profile whose batch drains in lockstep rounds (:func:`lockstep_rounds`: the batch
starts at B requests and falls to 0 without growing) says its requests' length N; a server under
continuous load (requests replaced as they finish) has no such rounds and is predicted in steady state.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

NEGLIGIBLE = 1e-18
"""A token count this improbable (per cycle) is dropped from :func:`finish_cdf`'s window."""

MIN_FULL_CYCLES = 5
"""A lockstep round holds at least this many cycles at its full batch (fewer: no round to model)."""


def lockstep_rounds(cycles: pd.DataFrame, batch: int) -> pd.DataFrame:
    """The lockstep rounds of ``batch`` requests among ``cycles`` (the lowest rank's, in start order):
    a run of cycles that starts at ``batch`` requests right after a cycle with none (the round's
    requests came in together), never grows, holds at least :data:`MIN_FULL_CYCLES` cycles at
    ``batch`` and ends empty (the next cycle has no request), after a drain below ``batch`` or with every
    request done in one cycle (no tail: every draft token accepted, or one request). A batch that refills
    as requests finish (a server under continuous load), the drain of a larger round passing through
    ``batch``, and a run cut by the start or the end of the data are none. One row per round:
    ``full_cycles``, ``tail_cycles``, ``tokens`` (the accept marks' tokens), ``request_tokens``
    (tokens / batch) and ``gap_ns``: the host time from the end of the last cycle with requests before
    the round to the start of its first (what a round costs besides its decode cycles: the previous
    round's results returned, the requests admitted, their prefill; NaN for the data's first round)."""
    cols = ["first_cycle", "full_cycles", "tail_cycles", "tokens", "request_tokens", "gap_ns"]
    if cycles is None or not len(cycles) or "requests" not in cycles.columns or "tokens" not in cycles.columns:
        return pd.DataFrame(columns=cols)
    # in host order: the cycle range's own start (a cycle whose GPU data was lost has no GPU start)
    key = "cpu_start_ns" if "cpu_start_ns" in cycles.columns else "start_ns"
    end_key = "cpu_end_ns" if key == "cpu_start_ns" and "cpu_end_ns" in cycles.columns else "end_ns"
    low = cycles[cycles["rank"] == cycles["rank"].min()].sort_values(key, kind="stable")
    req = pd.to_numeric(low["requests"], errors="coerce").to_numpy(dtype="float64")
    tok = pd.to_numeric(low["tokens"], errors="coerce").to_numpy(dtype="float64")
    start = pd.to_numeric(low[key], errors="coerce").to_numpy(dtype="float64")
    end = (pd.to_numeric(low[end_key], errors="coerce").to_numpy(dtype="float64") if end_key in low.columns
           else np.full(len(low), np.nan))
    ids = low["cycle"].to_numpy()
    rows, i, n = [], 0, len(req)
    while i < n:
        if req[i] != batch or i == 0 or req[i - 1] != 0:
            i += 1
            continue
        j = i
        while j + 1 < n and np.isfinite(req[j + 1]) and 0 < req[j + 1] <= req[j]:
            j += 1
        seg = slice(i, j + 1)
        full = int((req[seg] == batch).sum())
        tail = int(j + 1 - i - full)
        drained = j + 1 < n and req[j + 1] == 0
        if full >= MIN_FULL_CYCLES and drained and np.isfinite(tok[seg]).all():
            t = float(tok[seg].sum())
            before = np.flatnonzero(req[:i] > 0)            # the last cycle with requests before the round
            gap = float(start[i] - end[before[-1]]) if len(before) else np.nan
            rows.append({"first_cycle": ids[i], "full_cycles": full, "tail_cycles": tail, "tokens": t,
                         "request_tokens": t / batch, "gap_ns": gap if gap > 0 else np.nan})
        i = j + 1
    return pd.DataFrame(rows, columns=cols)


def request_tokens(cycles: pd.DataFrame, batch: int | None) -> dict | None:
    """{request_tokens: [N of each round, rounded], rounds, full_cycles, tail_cycles} of the lockstep
    rounds of ``batch`` requests in ``cycles``; None when there is none (or no batch)."""
    if batch is None:
        return None
    r = lockstep_rounds(cycles, int(batch))
    if r.empty:
        return None
    gaps = pd.to_numeric(r["gap_ns"], errors="coerce").dropna()
    return {"request_tokens": [max(int(round(float(x))), 1) for x in r["request_tokens"]], "rounds": int(len(r)),
            "full_cycles": int(r["full_cycles"].sum()), "tail_cycles": int(r["tail_cycles"].sum()),
            "round_gap_ns": float(gaps.median()) if len(gaps) else None}


def tokens_pmf(survival: np.ndarray) -> np.ndarray:
    """P(a request yields 1 + j tokens in a cycle), j = 0..s, from the survival P(L >= j), j = 1..s
    (acceptance.py's table): index j + 1 holds P(min(L, s) = j); index 0 is 0 (a cycle yields >= 1)."""
    s = np.clip(np.nan_to_num(np.asarray(survival, dtype="float64")), 0.0, 1.0)
    s = np.minimum.accumulate(s) if len(s) else s           # a survival never grows
    k = len(s)
    p = np.zeros(k + 2)
    ext = np.r_[1.0, s, 0.0]                                 # P(L >= 0) = 1, P(L >= s + 1) cut at s
    p[1:k + 1] = ext[:k] - ext[1:k + 1]
    p[k + 1] = ext[k]
    return p


def finish_cdf(pmf: np.ndarray, n_tokens: int) -> np.ndarray:
    """P(T <= t) for t = 0..n_tokens: T the cycle at which a request's tokens reach ``n_tokens``, each
    cycle's tokens drawn from ``pmf`` (index = tokens, pmf[0] = 0). Exact up to :data:`NEGLIGIBLE`
    (the distribution of the tokens so far is convolved with ``pmf`` a cycle at a time, over the
    window where it still has mass; what reaches ``n_tokens`` is absorbed); T <= n_tokens since every
    cycle yields a token. Kept while the kept ones hold at most :data:`_FINISH_KEEP_BYTES` (whatif asks each
    (pmf, n_tokens) several times: the rounds' cycles and their efficiency, per batch size; the oldest go first); a
    copy is returned."""
    pmf = np.ascontiguousarray(pmf, dtype="float64")
    key = (pmf.tobytes(), int(n_tokens))
    got = _FINISH.get(key)
    if got is None:
        got = _finish_cdf(pmf, int(n_tokens))
        _FINISH[key] = got
        _FINISH_HELD[0] += got.nbytes
        while _FINISH_HELD[0] > _FINISH_KEEP_BYTES and len(_FINISH) > 1:
            _FINISH_HELD[0] -= _FINISH.pop(next(iter(_FINISH))).nbytes
    return got.copy()


_FINISH: dict = {}
_FINISH_HELD = [0]                  # bytes of the kept distributions
_FINISH_KEEP_BYTES = 32 << 20


def _finish_cdf(pmf: np.ndarray, n: int) -> np.ndarray:
    cdf = np.ones(n + 1)
    cdf[0] = 0.0
    live, off, done = np.ones(1), 0, 0.0       # P(tokens = off + j) for the requests not done yet
    for t in range(1, n + 1):
        moved = np.convolve(live, pmf)
        end = n - off                            # index of n tokens in ``moved``
        done += float(moved[end:].sum()) if end < len(moved) else 0.0
        live = moved[:end]
        mass = live > NEGLIGIBLE
        cdf[t] = min(done, 1.0)
        first = int(mass.argmax()) if len(mass) else 0
        if not len(mass) or not mass[first] or done >= 1.0 - 1e-12:
            break                                # cdf[t + 1:] stays 1
        last = len(mass) - 1 - int(mass[::-1].argmax())
        live, off = live[first:last + 1], off + first
    return cdf


def expected_max_cycles(pmf: np.ndarray, n_tokens: int, requests: int) -> float:
    """E[max over ``requests`` i.i.d. requests of T] (:func:`finish_cdf`): sum_t (1 - P(T <= t)^B)."""
    cdf = np.clip(finish_cdf(pmf, n_tokens), 0.0, 1.0)
    return float(np.sum(1.0 - cdf[:-1] ** max(int(round(requests)), 1)))


def round_cycles(survival: np.ndarray, n_tokens, requests: float) -> float:
    """The mean decode cycles of a round (E[max_i T_i], :func:`expected_max_cycles`) over rounds of ``n_tokens``
    (one length or one per round) for the survival P(L >= j), j = 1..s, of s draft steps (s = 0: N cycles)."""
    ns = [int(n) for n in np.atleast_1d(n_tokens) if int(n) >= 1]
    if not ns:
        return float("nan")
    pmf = tokens_pmf(survival)
    b = int(round(requests))
    lengths, counts = np.unique(ns, return_counts=True)      # one computation per distinct length
    return float(sum(int(c) * expected_max_cycles(pmf, int(n), b) for n, c in zip(lengths, counts)) / len(ns))


def efficiency(survival: np.ndarray, n_tokens, requests: float) -> float:
    """The rounds' tokens over the steady-state tokens of their cycles (module docstring), for the
    survival P(L >= j), j = 1..s, of s draft steps; 1 at s = 0 (every request finishes at step N).
    ``n_tokens``: the requests' length, or one per round (a mix: all rounds' tokens over all their
    cycles)."""
    ns = [int(n) for n in np.atleast_1d(n_tokens) if int(n) >= 1]
    pmf = tokens_pmf(survival)
    mean = float(np.dot(np.arange(len(pmf)), pmf))
    if not ns or mean <= 1.0:
        return 1.0
    b = int(round(requests))
    lengths, counts = np.unique(ns, return_counts=True)      # one computation per distinct length
    cycles = sum(int(c) * expected_max_cycles(pmf, int(n), b) for n, c in zip(lengths, counts))
    return float(sum(ns) / (mean * cycles))
