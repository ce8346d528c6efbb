"""The acceptance model: how many draft tokens a request accepts, per draft position.

The shim records per decode cycle one mark ``accept_len=N reqs=M``: N accepted draft tokens summed
over the M requests of the batch, each request's accept length L capped at the profiled step count
k (a request cannot accept more drafts than were proposed). From those marks:

* **Per-request distribution, exact.** Newer shims append ``lens=l1,...,lM`` (each request's
  accepted length, for M <= 64): the distribution of min(L, k) is then the empirical histogram of
  all the per-request lengths of the cycles (capped at k), no model needed (method ``lens``).
* **Per-request distribution from sums** (marks without ``lens=``, method ``em``). With M = 1 the
  empirical histogram of N is the distribution of
  min(L, k). With M > 1 only the sum of M accept lengths is seen; requests are assumed independent
  and identically distributed, so N follows the M-fold convolution of the per-request distribution
  p = (P(min(L,k) = 0), ..., P(min(L,k) = k)). p is the maximum-likelihood estimate under that model,
  found by EM with an exact E-step (expected number of requests with length j given the sum:
  ``M p_j [p^{*(M-1)}]_{N-j} / [p^{*M}]_N``). For M = 1 this is the histogram; the per-request mean
  equals mean(N/M) exactly for any M.
* **Per-position (conditional) acceptance rates** a_i = P(L >= i | L >= i-1), i = 1..k, the
  Kaplan-Meier form of p. Positions beyond k are never observed (the cap censors them); rates for
  i > k_profiled are extrapolated: ``repeat`` (default: a_i = a_k, the last estimated rate repeats)
  or ``linear`` (least-squares line through the estimated rates, clipped to [0, 1]). Several
  profiles with different k are pooled per position over the profiles that observe it (weights:
  requests at risk).
* **Expected accepted tokens per request** with s steps: E[min(L, s)] = sum_{i<=s} prod_{j<=i} a_j;
  tokens per cycle = M (1 + E[min(L, s)]) (the verify pass adds one bonus token per request).
* **Uncertainty**: a seeded bootstrap over cycles (resample the cycles of each profile, refit),
  percentile intervals.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nvtx_annotate.protocol import parse_lens

EXTRAPOLATIONS = ("repeat", "linear")


# ---------------------------------------------------------------------------------------------
# per-request distribution from summed accept lengths
# ---------------------------------------------------------------------------------------------
def _conv_power(p: np.ndarray, m: int) -> np.ndarray:
    """The m-fold convolution of p with itself (p^{*m}); p^{*0} = [1]."""
    if m <= 0:
        return np.ones(1)
    k = len(p) - 1
    n = m * k + 1
    if m * len(p) > 4096:  # large batches: FFT (clip tiny negative round-off)
        size = 1 << int(np.ceil(np.log2(n)))
        out = np.fft.irfft(np.fft.rfft(p, size) ** m, size)[:n]
        return np.clip(out, 0.0, None)
    out, base = np.ones(1), p
    while m:
        if m & 1:
            out = np.convolve(out, base)
        m >>= 1
        if m:
            base = np.convolve(base, base)
    return out


def fit_request_pmf(accepted, requests, steps: int, *, tol: float = 1e-10, max_iter: int = 5000,
                    start: np.ndarray | None = None) -> np.ndarray:
    """MLE of the per-request distribution of min(L, steps) from per-cycle sums.

    ``accepted[c]`` = sum of the accept lengths of the ``requests[c]`` requests of cycle c.
    Returns p[0..steps]. Cycles with N > M*steps are clipped to M*steps (they break the cap)."""
    acc = np.asarray(accepted, dtype="int64")
    req = np.asarray(requests, dtype="int64")
    ok = req > 0
    acc, req = np.minimum(acc[ok], req[ok] * steps), req[ok]
    if len(acc) == 0:
        raise ValueError("no accept marks: cannot estimate acceptance")
    k = int(steps)
    if k == 0:
        return np.ones(1)
    groups = []
    for m in np.unique(req):
        hist = np.bincount(acc[req == m], minlength=m * k + 1).astype("float64")
        groups.append((int(m), hist))
    if all(m == 1 for m, _ in groups):  # exact: the histogram
        h = sum(hist for _, hist in groups)
        return h / h.sum()
    p = np.full(k + 1, 1.0 / (k + 1)) if start is None else np.clip(np.asarray(start, float), 1e-12, None)
    p = p / p.sum()
    total = float(sum(m * hist.sum() for m, hist in groups))

    def em(p):
        counts = np.zeros(k + 1)
        for m, hist in groups:
            q = _conv_power(p, m - 1)
            pm = np.convolve(q, p)
            r = np.where(hist > 0, hist / np.maximum(pm, 1e-300), 0.0)
            counts += m * p * np.correlate(r, q, "valid")
        return counts / total

    # EM, accelerated with SQUAREM (Varadhan & Roland 2008); falls back to plain EM steps
    for _ in range(max_iter):
        p1 = em(p)
        p2 = em(p1)
        r, v = p1 - p, p2 - 2 * p1 + p
        nv = float(np.sqrt(v @ v))
        new = p2
        if nv > 0:
            alpha = -float(np.sqrt(r @ r)) / nv
            cand = p - 2 * alpha * r + alpha * alpha * v
            if alpha < -1 and np.all(cand >= 0):
                new = em(cand / cand.sum())
        if np.max(np.abs(new - p)) < tol:
            p = new
            break
        p = new
    return p


def rates_from_pmf(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(survival S_i = P(L >= i), conditional a_i = S_i / S_{i-1}) for i = 1..len(p)-1."""
    p = np.asarray(p, dtype="float64")
    surv = np.clip(1.0 - np.cumsum(p)[:-1], 0.0, 1.0)   # P(L >= i), i = 1..k
    prev = np.r_[1.0, surv[:-1]]
    with np.errstate(invalid="ignore", divide="ignore"):
        cond = np.where(prev > 0, surv / prev, np.nan)
    return surv, cond


# ---------------------------------------------------------------------------------------------
# samples: per cycle (accepted, requests) for one profile
# ---------------------------------------------------------------------------------------------
def _empty_samples() -> pd.DataFrame:
    return pd.DataFrame({"accepted": pd.Series(dtype="int64"), "requests": pd.Series(dtype="int64"),
                         "lens": pd.Series(dtype=object)})


def cycle_samples(cycles: pd.DataFrame) -> pd.DataFrame:
    """One row per decode cycle with its accept mark: accepted (N), requests (M), lens (the
    per-request accept lengths ``"a,b,..."`` when the mark carried them, else None).

    Every TP rank records the same marks; the lowest rank that has them is used. Cycles without a
    ``reqs=`` field count as one request."""
    if cycles is None or cycles.empty or "accepted_tokens" not in cycles.columns:
        return _empty_samples()
    c = cycles[cycles["accepted_tokens"].notna()]
    if c.empty:
        return _empty_samples()
    c = c[c["rank"] == c["rank"].min()]
    req = c["requests"] if "requests" in c.columns else pd.Series(np.nan, index=c.index)
    req = pd.to_numeric(req, errors="coerce").fillna(1)
    lens = c["accept_lengths"] if "accept_lengths" in c.columns else pd.Series(None, index=c.index, dtype=object)
    lens = [x if isinstance(x, str) and x else None for x in lens]
    return pd.DataFrame({"accepted": c["accepted_tokens"].astype("int64").to_numpy(),
                         "requests": req.astype("int64").to_numpy(), "lens": pd.Series(lens, dtype=object)})


def _lengths(samples: pd.DataFrame) -> np.ndarray | None:
    """All per-request accept lengths of the cycles, when every cycle's mark carried ``lens=`` with
    as many lengths as requests (and their sum equals N); else None (the sums must be deconvolved). A cycle of no
    request (``accept_len=0 reqs=0``: every request of its batch had finished) has no length to give and is passed
    over (it left a profile's real marks to the deconvolution while 951 of its 955 marks carried their lengths)."""
    if "lens" not in samples.columns or not len(samples):
        return None
    out = []
    for text, m, n in zip(samples["lens"], samples["requests"], samples["accepted"]):
        try:
            if int(m) == 0 and int(n) == 0:
                continue
        except (TypeError, ValueError):     # a count missing (NA, NaN): parse_lens refuses it below
            pass
        vals = parse_lens(text, m, n)
        if vals is None:
            return None
        out.extend(vals)
    return np.asarray(out, dtype="int64") if out else None     # only cycles of no request: nothing exact to count


def request_pmf(samples: pd.DataFrame, steps: int, **em) -> tuple[np.ndarray, str]:
    """(p[0..steps], method): the exact histogram of the per-request lengths capped at ``steps``
    (``"lens"``) when the marks carry them, else the EM deconvolution of the sums (``"em"``)."""
    lens = _lengths(samples)
    if lens is not None:
        h = np.bincount(np.minimum(lens, int(steps)), minlength=int(steps) + 1).astype("float64")
        return h / h.sum(), "lens"
    p = fit_request_pmf(samples["accepted"], samples["requests"], steps, **em)
    return p, ("single" if (np.asarray(samples["requests"]) == 1).all() else "em")


# ---------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------
@dataclass
class Acceptance:
    """Per-position acceptance rates (estimated for 1..profiled_steps, extrapolated beyond)."""

    profiled_steps: int                  # the largest step count profiled (positions observed)
    rates: np.ndarray                    # a_1..a_K (estimated)
    rates_boot: np.ndarray               # (B, K) bootstrap replicates of the rates
    requests: float                      # mean requests per cycle (batch size) in the profiles
    cycles: int                          # cycles with an accept mark used
    extrapolation: str = "repeat"
    mean_accepted: float = float("nan")  # measured E[min(L, k)] per request (for one profile)
    notes: list = field(default_factory=list)
    method: str = "em"                   # "lens" | "single" (exact) | "em" (deconvolved sums) | "mixed"

    def rates_for(self, steps: int, rates: np.ndarray | None = None) -> np.ndarray:
        """a_1..a_steps: estimated, then extrapolated past profiled_steps."""
        r = self.rates if rates is None else rates
        K = len(r)
        if steps <= K:
            return r[:steps]
        extra = steps - K
        if K == 0:
            return np.zeros(steps)
        if self.extrapolation == "linear" and K >= 2:
            ok = np.isfinite(r)
            x = np.arange(1, K + 1)[ok]
            slope, icpt = np.polyfit(x, r[ok], 1)
            ext = np.clip(icpt + slope * np.arange(K + 1, steps + 1), 0.0, 1.0)
        else:
            last = r[np.isfinite(r)][-1] if np.isfinite(r).any() else 0.0
            ext = np.full(extra, last)
        return np.r_[r, ext]

    def expected_accepted(self, steps: int, rates: np.ndarray | None = None) -> float:
        """E[min(L, steps)] per request."""
        if steps <= 0:
            return 0.0
        a = np.nan_to_num(self.rates_for(steps, rates), nan=0.0)
        return float(np.cumprod(a).sum())

    def expected_accepted_ci(self, steps: int, level: float = 0.95) -> tuple[float, float]:
        if len(self.rates_boot) == 0:
            v = self.expected_accepted(steps)
            return v, v
        vals = np.array([self.expected_accepted(steps, b) for b in self.rates_boot])
        lo, hi = np.nanpercentile(vals, [50 * (1 - level), 50 * (1 + level)])
        return float(lo), float(hi)

    def table(self, steps: int | None = None, level: float = 0.95) -> pd.DataFrame:
        """Per position: rate (conditional acceptance), CI, survival P(L >= i), observed or
        extrapolated."""
        n = max(steps or 0, self.profiled_steps)
        a = self.rates_for(n)
        boot = np.array([self.rates_for(n, b) for b in self.rates_boot]) if len(self.rates_boot) else None
        lo = _column_percentile(boot, 50 * (1 - level)) if boot is not None else a
        hi = _column_percentile(boot, 50 * (1 + level)) if boot is not None else a
        return pd.DataFrame({"position": np.arange(1, n + 1), "rate": a, "rate_lo": lo, "rate_hi": hi,
                             "survival": np.cumprod(np.nan_to_num(a)),
                             "observed": np.arange(1, n + 1) <= self.profiled_steps})


def _column_percentile(values: np.ndarray, q: float) -> np.ndarray:
    """Per column, the ``q`` percentile of its finite values; NaN (without a warning) for a column
    with none (a draft position no resample reached)."""
    out = np.full(values.shape[1], np.nan)
    seen = np.isfinite(values).any(axis=0)
    if seen.any():
        out[seen] = np.nanpercentile(values[:, seen], q, axis=0)
    return out


def _pooled_rates(profiles: list[tuple[int, pd.DataFrame]], pmfs: list[np.ndarray]) -> np.ndarray:
    """Per position, at-risk weighted pooling of the conditional rates of the profiles observing it."""
    K = max(k for k, _ in profiles)
    succ, risk = np.zeros(K), np.zeros(K)
    for (k, s), p in zip(profiles, pmfs):
        w = float(s["requests"].sum())
        surv, _ = rates_from_pmf(p)
        prev = np.r_[1.0, surv[:-1]]
        succ[:k] += w * surv
        risk[:k] += w * prev
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(risk > 0, succ / risk, np.nan)


class NoAcceptMarks(ValueError):
    """No cycle of the profiles carries an accept mark: the acceptance model has nothing to rest on (the command says
    how to record them)."""


def estimate(profiles: list[tuple[int, pd.DataFrame]], *, extrapolation: str = "repeat",
             n_boot: int = 200, seed: int = 0) -> Acceptance:
    """Acceptance model from one or more profiles: ``[(steps, cycle_samples(cycles)), ...]``."""
    if extrapolation not in EXTRAPOLATIONS:
        raise ValueError(f"extrapolation must be one of {EXTRAPOLATIONS}")
    profiles = [(int(k), s.reset_index(drop=True)) for k, s in profiles if len(s)]
    if not profiles:
        raise NoAcceptMarks("no accept marks (`accept_len=N reqs=M`) in the profile: cannot model acceptance")
    notes = []
    for k, s in profiles:
        over = int((s["accepted"] > s["requests"] * k).sum())
        if over:
            notes.append(f"{over} cycles of the {k}-step profile report more accepted tokens than "
                         f"requests x steps: clipped to the cap")
    fitted = [request_pmf(s, k) for k, s in profiles]
    pmfs, methods = [p for p, _ in fitted], [m for _, m in fitted]
    rates = _pooled_rates(profiles, pmfs)
    rng = np.random.default_rng(seed)
    boot = []
    for _ in range(n_boot):
        bp, bs = [], []
        for (k, s), p in zip(profiles, pmfs):
            idx = rng.integers(0, len(s), len(s))
            r = s.iloc[idx]
            bp.append(request_pmf(r, k, start=p, tol=1e-8, max_iter=2000)[0])
            bs.append((k, r))
        boot.append(_pooled_rates(bs, bp))
    all_s = pd.concat([s for _, s in profiles])
    reqs = float(all_s["requests"].mean())
    em_multi = [(k, s) for (k, s), m in zip(profiles, methods) if m == "em" and (s["requests"] > 1).any()]
    if em_multi:
        notes.append("accept marks sum over requests (reqs>1) and carry no per-request lengths (an nsys mark's lens=, "
                     "a live log's accept_lens: logged since 2026-12-06): per-request accept lengths assumed i.i.d.; "
                     "their distribution is the maximum-likelihood deconvolution of the sums (EM), which pins the mean "
                     "accepted but not its shape over positions at large batches (see the rates' intervals)")
    method = methods[0] if len(set(methods)) == 1 else "mixed"
    mean_acc = float((all_s["accepted"] / all_s["requests"]).mean()) if len(profiles) == 1 else float("nan")
    return Acceptance(profiled_steps=len(rates), rates=rates, rates_boot=np.array(boot).reshape(-1, len(rates)),
                      requests=reqs, cycles=int(len(all_s)), extrapolation=extrapolation,
                      mean_accepted=mean_acc, notes=notes, method=method)


METHOD_TEXT = {
    "lens": "per-request accept lengths read from the marks (lens=): exact empirical distribution",
    "em": "per-request distribution deconvolved from the summed marks (EM, requests assumed i.i.d.)",
    "single": "one request per mark: each mark is a per-request accept length (exact empirical distribution)",
    "mixed": "per-request lengths where the marks carry them (lens=), EM deconvolution of the sums elsewhere",
}
