"""The best draft step count per batch size, and SGLang's adaptive speculation config written from it.

The best step count falls as the batch grows (a verify over batch x (steps + 1) tokens stops being
cheap, a draft step's host time stays): one number is not the answer for a server whose load moves.
:func:`per_batch` runs the whatif model (model.py) once per batch size the profile(s) hold enough
decode cycles of (each a model of its own cycles: acceptance, costs, tokens); :func:`adaptive_config`
turns the table into the JSON of SGLang's ``--speculative-adaptive-config`` (0.5.17,
``srt/speculative/adaptive_spec_params.py``): keys are batch sizes, each the lower bound of a bucket
(SGLang routes a batch to the largest key <= its CUDA-graph-padded size), each entry's
``candidate_steps`` the steps SGLang may pick from by acceptance. specprof writes the predicted best
alone (0 where speculation does not pay), so SGLang's acceptance-only switching cannot leave the step
count the cost model chose; a bucket not measured is said so and not written.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.timeline.cycles import steady
from analyze.tools.sides import as_side
from analyze.tools.whatif import model as W

MIN_CYCLES = 20
"""Batch sizes with fewer decode cycles than this in the profile(s) are not modelled on their own."""

ADAPTIVE_DEFAULTS = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
"""The per-bucket fields SGLang 0.5.17 reads besides candidate_steps (its defaults for buckets >= 8)."""


def batch_counts(profiles) -> pd.Series:
    """Steady decode cycles (timeline.cycles.steady) per batch size (requests per cycle, from the accept
    marks), over the profiles."""
    counts = pd.Series(dtype="int64")
    for p in profiles:
        c = steady(as_side(p).cycles, every_rank=True)
        if "requests" not in c.columns or not len(c):
            continue
        low = c[c["rank"] == c["rank"].min()]
        req = pd.to_numeric(low["requests"], errors="coerce").dropna().astype("int64")
        counts = counts.add(req.value_counts(), fill_value=0)
    return counts.astype("int64").sort_index()


def per_batch(profiles, steps=range(1, 11), *, min_cycles: int = MIN_CYCLES, baselines_tps: dict | None = None,
              calibrate: dict | None = None, most: int | None = None, **kw) -> pd.DataFrame:
    """One row per batch size with at least ``min_cycles`` cycles: the batch, its cycles, the
    profiled step count, the best step count, tokens/s at the best and at the profiled one, the
    baseline (``baselines_tps`` {batch: no-speculation tokens/s measured without the profiler}, else
    estimated) and the speed-up; ``best_or_off`` is 0 where no step count beats the baseline.
    ``calibrate``: {batch: unprofiled tokens/s at the profiled step count}; ``most``: only that many
    batch sizes, those with the most cycles (a bound on the work). ``kw``: whatif's."""
    profiles = [profiles] if not isinstance(profiles, (list, tuple)) else list(profiles)
    sides = [as_side(p) for p in profiles]
    counts = batch_counts(sides)
    if most is not None:
        counts = counts[counts >= min_cycles].sort_values(ascending=False, kind="stable").head(most).sort_index()
    rows = []
    memo: dict | None = {} if len(sides) == 1 else None     # the draft kernels, found once for every batch size
    for batch, n in counts.items():
        if n < min_cycles or batch < 1:
            continue
        base = (baselines_tps or {}).get(int(batch))
        cal = (calibrate or {}).get(int(batch))
        r = W.whatif(sides, steps, batch=int(batch), baseline_tps=base, calibrate_tps=cal, memo=memo, **kw)
        p = r["predictions"].set_index("steps")
        best = r["best"]
        k = r["profiles"][0]["steps"]
        rows.append({"batch": int(batch), "cycles": int(n), "profiled_steps": int(k),
                     "best_steps": int(best["steps"]), "tokens_per_s_best": float(best["tokens_per_s"]),
                     "tokens_per_s_profiled": float(p.loc[k, "tokens_per_s"]) if k in p.index else np.nan,
                     "tokens_per_s_baseline": float(r["baseline"]["tokens_per_s"]),
                     "baseline_source": r["baseline"]["source"], "speedup": float(best["speedup"]),
                     "best_or_off": int(best["steps"]) if best["speedup"] > 1.0 else 0,
                     "accepted_per_request": float(p.loc[best["steps"], "accepted_per_request"]),
                     "best_extrapolated": bool(best["extrapolated"]), "calibrated": cal is not None})
    cols = ["batch", "cycles", "profiled_steps", "best_steps", "tokens_per_s_best", "tokens_per_s_profiled",
            "tokens_per_s_baseline", "baseline_source", "speedup", "best_or_off", "accepted_per_request",
            "best_extrapolated", "calibrated"]
    return pd.DataFrame(rows, columns=cols)


def adaptive_config(table: pd.DataFrame) -> dict:
    """SGLang's ``--speculative-adaptive-config`` JSON from :func:`per_batch`'s table: one entry per
    measured batch size (a bucket from it up to the next), ``candidate_steps`` = [the best step count,
    or 0 where speculation does not pay]. A ``specprof`` key (not a batch size: SGLang's loader skips
    it) records what each entry rests on."""
    if table.empty:
        raise ValueError("no batch size with enough decode cycles to write an adaptive config")
    if (table["best_or_off"] == 0).all():
        raise ValueError("speculation does not pay at any batch size measured ("
                         + ", ".join(f"{r.batch}: {r.speedup:.2f}x" for r in table.itertuples())
                         + "): no adaptive config; run without --speculative-algorithm")
    cfg: dict = {}
    for row in table.sort_values("batch").itertuples():
        cfg[str(row.batch)] = {"candidate_steps": [int(row.best_or_off)], **ADAPTIVE_DEFAULTS}
    cfg["specprof"] = {
        "written_by": "analyze-trace whatif --adaptive-config",
        "buckets": {str(r.batch): {"cycles": int(r.cycles), "best_steps": int(r.best_steps),
                                   "speedup": round(float(r.speedup), 4), "baseline": r.baseline_source,
                                   "predicted_tokens_per_s": round(float(r.tokens_per_s_best), 1)}
                    for r in table.itertuples()},
        "note": "candidate_steps holds the predicted best alone (0: speculation off for that bucket); a batch "
                "routes to the largest key <= its CUDA-graph-padded size",
    }
    return cfg


def differs(table: pd.DataFrame) -> bool:
    """Whether the best (or off) step count differs between the batch sizes measured."""
    return len(table) >= 2 and table["best_or_off"].nunique() >= 2
