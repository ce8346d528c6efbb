"""The best draft step count per batch size, and SGLang's adaptive speculation config written from it.

The best step count falls as the batch grows (a verify over batch x (steps + 1) tokens stops being
cheap, a draft step's host time stays): one number is not the answer for a server whose load moves.
:func:`per_batch` runs the whatif model (model.py) once per batch size the profile(s) hold enough
decode cycles of (each a model of its own cycles: acceptance, costs, tokens); :func:`adaptive_config`
turns the table into the JSON of SGLang's ``--speculative-adaptive-config`` (0.5.17,
``srt/speculative/adaptive_spec_params.py``): keys are batch sizes, each the lower bound of a bucket
(SGLang routes a batch to the largest key <= its CUDA-graph-padded size), each entry's
``candidate_steps`` the steps SGLang may pick from by acceptance. specprof writes the predicted best
step count alone (>= 1), so SGLang's acceptance-only switching cannot leave the step count the cost
model chose; a bucket not measured is said so and not written.

A bucket where no step count beats no speculation still gets its best step count, not 0: SGLang's
adaptive 0 steps is not speculation off (``_build_trivial_verify_input`` verifies one token and the
draft extend still runs). Measured on the H200 (fixtures/real/sglang_sweep_v2_l64_b4.json, V = 2,
64 layers, batch 64): adaptive at 0 steps 8,748 tok/s, fixed 3 steps 13,213, no speculation 15,858.
Speculation cannot be turned off by batch size in SGLang 0.5.17: such buckets are listed in the
config's ``specprof.not_paying`` and said in the report (a server that mostly runs there is faster
without ``--speculative-algorithm``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.errors import UsageError
from analyze.timeline import cycles as cycles_mod
from analyze.tools.sides import as_side, cut_by_steps, split_by_steps
from analyze.tools.whatif import model as W

COLUMNS = ("batch", "cycles", "profiled_steps", "best_steps", "tokens_per_s_best", "tokens_per_s_best_lo",
           "tokens_per_s_best_hi", "tokens_per_s_profiled",
           "tokens_per_s_baseline", "baseline_source", "speedup", "best_or_off", "accepted_per_request",
           "best_extrapolated", "calibrated", "verdict_uncertain", "baseline_from_live_log",
           "speedup_through_estimate", "rough_estimate", "verdict")
"""The columns of :func:`per_batch`'s table, in order."""

MIN_CYCLES = W.MIN_CYCLES
"""Batch sizes with fewer decode cycles than this in the profile(s) are not modelled on their own."""

ADAPTIVE_DEFAULTS = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
"""The per-bucket fields SGLang 0.5.17 reads besides candidate_steps (its defaults for buckets >= 8)."""


def batch_counts(profiles, timed_only: bool = False) -> pd.Series:
    """Steady decode cycles per batch size over the profiles (timeline.cycles.batch_counts of each, added)."""
    counts = pd.Series(dtype="int64")
    for p in profiles:
        counts = counts.add(cycles_mod.batch_counts(as_side(p).cycles, timed_only), fill_value=0)
    return counts.astype("int64").sort_index()


VISITED_SHARE = cycles_mod.VISITED_SHARE


def visited_batches(profiles: list) -> pd.Series:
    """Steady decode cycles per batch size the profiles' load *visits* (timeline.cycles.visited_of; the
    profiles' cycles counted together), indexed by batch size (:func:`batch_counts`)."""
    return visited_of(batch_counts(profiles))


visited_of = cycles_mod.visited_of


def request_cycles(counts: pd.Series) -> int:
    """The steady cycles of one request or more, of :func:`batch_counts` (a cycle of no request is no batch size
    the server ran)."""
    return int(counts[counts.index >= 1].sum())


def modelled_batch(visited: pd.Series, batch, baseline_tps, calibrate_tps, all_cycles: int | None = None) -> int | None:
    """The batch size whatif and advise model: ``batch`` where given; where the load visits several batch sizes
    (``visited``: :func:`visited_batches`) and no unprofiled figure was given (one given without --batch is the
    whole run's: pooled), the one most decode cycles ran: a pooled prediction is of no batch size the server ran
    (the speed-up at 18.4 requests of a profile that ran 1, 4, 16 and 64). The same where the load visits one
    batch size and its ramp (``all_cycles``, the steady cycles of every batch size, less the visited one's: the
    rounds' first and last cycles at fewer requests) holds :data:`VISITED_SHARE` of the cycles or more: a real
    profile of 16 requests in flight pooled 18% ramp cycles into 14.7 requests, and its estimated baseline with
    them (2,175 tokens/s against 2,352 at 16, 2,387 measured). None otherwise."""
    if batch is not None:
        return batch
    if len(visited) < 1 or baseline_tps is not None or calibrate_tps is not None:
        return None
    if len(visited) == 1 and not ramp_share(visited, all_cycles) >= VISITED_SHARE:
        return None
    return int(visited.sort_values(ascending=False, kind="stable").index[0])


def ramp_share(visited: pd.Series, all_cycles: int | None) -> float:
    """The share of the steady decode cycles at batch sizes the load does not visit (its ramps; 0 where
    ``all_cycles`` is unknown or none)."""
    if not all_cycles or not len(visited):
        return 0.0
    return max(0.0, 1.0 - float(visited.sum()) / all_cycles)


def chosen_said(batch: int, visited: int, ramp: float) -> str:
    """The note of the batch size :func:`modelled_batch` chose (``visited``: how many the load visited; ``ramp``:
    :func:`ramp_share`)."""
    if visited >= 2:
        return (f"batch {batch}: the batch size most decode cycles ran of the {visited} the load visited (a pooled "
                "prediction is of no batch size the server ran): --batch M for another, --per-batch for each")
    return (f"batch {batch}: the batch size the load ran; the {ramp:.0%} of its decode cycles at other batch sizes "
            "(its rounds' ramps, as requests start and finish) are left out (pooled, they are a batch size the "
            "server did not run): --batch M for another")


def per_batch(profiles, steps=range(1, 11), *, min_cycles: int = MIN_CYCLES, baselines_tps: dict | None = None,
              calibrate: dict | None = None, most: int | None = None, request_tokens="auto",
              calibration_sources: dict | None = None, only=None, **kw) -> pd.DataFrame:
    """One row per batch size with at least ``min_cycles`` cycles: the batch, its cycles, the
    profiled step count, the best step count, tokens/s at the best and at the profiled one, the
    baseline (``baselines_tps`` {batch: no-speculation tokens/s measured without the profiler}, else
    estimated) and the speed-up; ``best_or_off`` is 0 where no step count beats the baseline.
    ``calibrate``: {batch: unprofiled tokens/s at the profiled step count} (``calibration_sources``
    {batch: where it came from}: a live log's is of steady cycles, whatif's --calibrate-live); ``most``: only that many
    batch sizes, those with the most cycles (a bound on the work); ``only``: these batch sizes alone (before
    ``most``). ``request_tokens``: whatif's, or
    {batch: its value} (a batch not in it: "auto"). ``kw``: whatif's."""
    profiles = [profiles] if not isinstance(profiles, (list, tuple)) else list(profiles)
    sides = [as_side(p) for p in profiles]
    counts = batch_counts(sides)
    if only is not None:
        counts = counts[counts.index.isin(list(only))]
    if most is not None:
        counts = counts[counts >= min_cycles].sort_values(ascending=False, kind="stable").head(most).sort_index()
    rows = []
    with_times = batch_counts(sides, timed_only=True)
    few_timed: dict[int, list] = {}    # {batch: [cycles, timed]}: too few cycles with phase times (a sampled live log)
    boot = kw.get("n_boot", W.N_BOOT) > 0
    grid: dict[int, list[dict]] = {}       # every step count's prediction per batch size (the JSON's)
    memo: dict | None = {} if len(sides) == 1 else None     # the draft kernels, found once for every batch size
    splits = [split_by_steps(sd) for sd in sides]           # each side by step count, once for every batch size
    each = [batch_counts([sd]) for sd in sides] if len(sides) > 1 else None
    for batch, n in counts.items():
        if n < min_cycles or batch < 1:
            continue
        if with_times.get(batch, 0) < min_cycles:
            # the costs rest on the cycles with phase times (a sampled live log times one in N)
            few_timed[int(batch)] = [int(n), int(with_times.get(batch, 0))]
            continue
        base = (baselines_tps or {}).get(int(batch))
        cal = (calibrate or {}).get(int(batch))
        n_req = request_tokens.get(int(batch), "auto") if isinstance(request_tokens, dict) else request_tokens
        # a live log or a marked profile of SGLang's adaptive mode: the step counts that ran this batch size,
        # each its own side (as whatif --batch B takes them), not every cycle at the most common count
        use = range(len(sides)) if each is None else _holding(each, int(batch), min_cycles)
        cut = [cut_by_steps(sides[i], int(batch), min_cycles, parts=splits[i])[0] for i in use]
        parts = [q for c in cut for q in c]
        ks = {q.spec_config.steps for q in parts if q.spec_config is not None}
        if cal is not None and len(ks) > 1:
            raise UsageError(f"batch {int(batch)} was profiled at several step counts {sorted(ks)}, and one unprofiled "
                             f"figure a batch size ({cal:,.1f} tokens/s, --batch-tps or --calibrate-live) calibrates "
                             "one of them: give whatif --batch M with --calibrate-tps K:X for each profiled step count")
        n_req = W.live_cut_request_tokens(n_req, any(len(c) > 1 and c[0].live for c in cut))
        r = W.whatif(parts, steps, batch=int(batch), baseline_tps=base, calibrate_tps=cal,
                     memo=memo if each is None and len(cut[0]) == 1 and cut[0][0] is sides[0] else None,
                     request_tokens=n_req, calibration_source=(calibration_sources or {}).get(int(batch)), **kw)
        p = r["predictions"].set_index("steps")
        grid[int(batch)] = [{"steps": int(k), "tokens_per_s": float(row["tokens_per_s"]),
                             "tokens_per_s_lo": float(row["tokens_per_s_lo"]) if boot else None,
                             "tokens_per_s_hi": float(row["tokens_per_s_hi"]) if boot else None,
                             "extrapolated": bool(row["extrapolated"])} for k, row in p.iterrows()]
        best = r["best"]
        k = max(r["profiles"], key=lambda q: q["cycles"])["steps"]     # a cut side: the most-run step count
        rows.append({"batch": int(batch), "cycles": int(n), "profiled_steps": int(k),
                     "best_steps": int(best["steps"]), "tokens_per_s_best": float(best["tokens_per_s"]),
                     # the bootstrap's 95% interval at the best step count (NaN without one: n_boot=0)
                     "tokens_per_s_best_lo": float(p.loc[best["steps"]].get("tokens_per_s_lo", np.nan)) if boot
                     else np.nan,
                     "tokens_per_s_best_hi": float(p.loc[best["steps"]].get("tokens_per_s_hi", np.nan)) if boot
                     else np.nan,
                     "tokens_per_s_profiled": float(p.loc[k, "tokens_per_s"]) if k in p.index else np.nan,
                     "tokens_per_s_baseline": float(r["baseline"]["tokens_per_s"]),
                     "baseline_source": r["baseline"]["source"], "speedup": float(best["speedup"]),
                     "best_or_off": int(best["steps"]) if best["speedup"] > 1.0 else 0,
                     "accepted_per_request": float(p.loc[best["steps"], "accepted_per_request"]),
                     "best_extrapolated": bool(best["extrapolated"]), "calibrated": cal is not None,
                     "verdict_uncertain": bool(best["verdict_uncertain"]),
                     "baseline_from_live_log": bool(best.get("baseline_from_live_log")),
                     # a given baseline, the profile not calibrated: the speed-up is the profile's own (model.baseline_clock)
                     "speedup_through_estimate": bool(best.get("speedup_through_estimate")),
                     # a plain step estimated without shim ranges (a saved result): no band bounds it
                     "rough_estimate": bool(best.get("rough_estimate")),
                     # pays / does_not_pay / break_even / uncertain (whatif.model.verdict)
                     "verdict": best["verdict"]})
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    out.attrs["not_modelled"] = not_modelled(counts, min_cycles)
    out.attrs["few_timed"] = few_timed
    # figures given for batch sizes with no row: {batch: ["--batch-tps", ...]} (said, never silently dropped)
    given = {"--batch-tps": {b: v for b, v in (calibrate or {}).items() if not (calibration_sources or {}).get(int(b))},
             "--batch-baseline-tps": baselines_tps or {}}
    unused: dict[int, list[str]] = {}
    modelled = set(out["batch"])
    for flag, values in given.items():
        for b in sorted(values or {}):
            if int(b) not in modelled:
                unused.setdefault(int(b), []).append(flag)
    out.attrs["unused_figures"] = unused
    out.attrs["predictions"] = grid
    # where a batch size's calibration came from a profile's own clock (not a written column: the text says it)
    out.attrs["clock_calibrated"] = {int(b): int(src["cycles"]) for b, src in (calibration_sources or {}).items()
                                     if src and src.get("kind") == "profile_clock" and int(b) in set(out["batch"])}
    return out


def _holding(counts: list[pd.Series], batch: int, min_cycles: int) -> list[int]:
    """The profiles (indices) a batch size is modelled from: those holding ``min_cycles`` steady cycles of it,
    else (only their sum does) every one holding any: a profile that never ran it says nothing of it."""
    enough = [i for i, c in enumerate(counts) if c.get(batch, 0) >= min_cycles]
    return enough or [i for i, c in enumerate(counts) if c.get(batch, 0) > 0]


def not_modelled(counts: pd.Series, min_cycles: int = MIN_CYCLES) -> dict[int, int]:
    """{batch size: its steady cycles} of the batch sizes seen with fewer than ``min_cycles`` cycles (a round's
    drain, a drifting load): not modelled on their own; a config routes them to a key it has."""
    return {int(b): int(n) for b, n in counts.items() if b >= 1 and n < min_cycles}


def adaptive_config(table: pd.DataFrame) -> dict:
    """SGLang's ``--speculative-adaptive-config`` JSON from :func:`per_batch`'s table: one entry per
    measured batch size (a bucket from it up to the next), ``candidate_steps`` = [the best step count
    >= 1] (SGLang's adaptive 0 still verifies: module docstring). A ``specprof`` key (not a batch size:
    SGLang's loader skips it) records what each entry rests on and the buckets where speculation does
    not pay at all."""
    if table.empty:
        raise ValueError("no batch size with enough decode cycles to write an adaptive config")
    if len(not_paying(table)) == len(table):
        raise ValueError("speculation does not pay at any batch size measured ("
                         + ", ".join(f"{r.batch}: {r.speedup:.2f}x" for r in table.itertuples())
                         + "): no adaptive config; run without --speculative-algorithm")
    cfg: dict = {}
    for row in table.sort_values("batch").itertuples():
        cfg[str(row.batch)] = {"candidate_steps": [int(row.best_steps)], **ADAPTIVE_DEFAULTS}
    cfg["specprof"] = {
        "written_by": "analyze-trace whatif --adaptive-config",
        "buckets": {str(r.batch): {"cycles": int(r.cycles), "best_steps": int(r.best_steps),
                                   "speedup": round(float(r.speedup), 4), "baseline": r.baseline_source,
                                   "predicted_tokens_per_s": round(float(r.tokens_per_s_best), 1)}
                    for r in table.itertuples()},
        "not_paying": not_paying(table.sort_values("batch")),
        "note": "candidate_steps holds the predicted best step count alone; a batch routes to the largest key <= "
                "its CUDA-graph-padded size. Buckets in not_paying are slower with speculation at any step count "
                "than without it; SGLang's adaptive 0 steps still verifies one token and runs the draft extend "
                "(measured on the H200 below every step count >= 1 at batch 64), so they keep their best step count",
    }
    return cfg


def differs(table: pd.DataFrame) -> bool:
    """Whether the best step count (>= 1: what an adaptive config can hold) differs between the batch
    sizes measured, speculation paying at one of them at least (else: no speculation, no config)."""
    return len(table) >= 2 and table["best_steps"].nunique() >= 2 and bool((table["best_or_off"] > 0).any())


def not_paying(table: pd.DataFrame) -> list[int]:
    """The batch sizes at which no step count beats no speculation, the verdict not uncertain (an
    uncertain one, '?', is no basis for saying so: whatif.model.verdict_uncertain) nor a break-even ('~': within
    whatif.model.BREAK_EVEN of no speculation)."""
    sure = ~table["verdict_uncertain"].astype(bool)
    if "verdict" in table:
        sure &= table["verdict"] != "break_even"
    return [int(b) for b in table.loc[(table["best_or_off"] == 0) & sure, "batch"]]
