"""``analyze-trace whatif REPORT``: predict tokens/s for every draft step count from one profile.

The model (every assumption is printed with the result, see docs/whatif.md):

* **Cycle time** T(s) for s draft steps = draft(s) + sum over the other phases of their exclusive
  GPU time + overhead, where overhead = measured cycle wall time (its period, host start to next
  start) minus the exclusive GPU time of all phases: other kernels, GPU idle gaps, host time.
  - one profile (k steps): draft(s) = draft(k) + (s - k) d, with d the marginal cost of one draft
    step: the start-to-start period of consecutive ``draft_step`` ranges on the GPU when the shim
    recorded them (includes launch gaps), else draft GPU time / k. When the profile's cycles differ
    in batch size (M_i requests, n_i = M_i (k+1) verified tokens), verify, draft_extend and allreduce
    are each a least-squares line in the verified tokens over the cycles (:func:`token_fit`): what a
    large MoE target needs, where more tokens touch more experts. With a constant batch one profile
    cannot tell: they keep their measured time (memory bound), unless ``verify_scaling`` F says
    which fraction of verify grows in proportion to the tokens. Overhead and the other phases keep
    their measured time (they follow the requests in the batch, not the step count).
  - several profiles with different step counts: every component is a least-squares line, draft
    in s, the others in the verified tokens n = M(s+1).
* **Tokens per cycle** = M (1 + E[min(L, s)]) from the acceptance model (acceptance.py): M requests,
  each accepting min(L, s) draft tokens plus the one token the verify pass always yields.
* tokens/s = tokens per cycle / T(s); best = argmax; speed-up = tokens/s over the baseline's:
  measured from a no-speculation report (``--baseline``), else *estimated* as one cycle without
  draft and draft_extend (verify at M tokens + allreduce + overhead) yielding M tokens.
* Confidence intervals: seeded bootstrap over cycles (costs and acceptance refit together).
"""
from __future__ import annotations

import dataclasses

from collections import Counter

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.codes import stable_order
from analyze.errors import UsageError
from analyze.render.text import left_out_text
from analyze.timeline import cycles as cycles_mod
from analyze.tools.sides import Side, as_side, marked_steps, per_cycle, time_column
from analyze.tools.whatif import acceptance as acc_mod
from analyze.tools.whatif import attention as att_mod
from analyze.tools.whatif import context as ctx_mod
from analyze.tools.whatif import rounds as rounds_mod

N_BOOT = 200
LEVEL = 0.95
DRAFT = "draft"
NO_DRAFT_IN_BASELINE = ("draft", "draft_extend")
# the components whose work grows with the verified tokens (fitted in n when the batch varies)
TOKEN_COMPONENTS = ("verify", "draft_extend", "allreduce")
# speed-up from one profile alone (estimated baseline, no calibration, rounds as the profile ran them) over
# the measured one on the real SGLang sweeps (tests/test_whatif_sglang_real.py holds every pair inside:
# the grid, 64 layers, batches 1/4/16/64: 0.80, 0.89, 0.88, 0.98; the older 64- and 8-layer profiles at
# 1 and 3 steps, batches 1/16: 0.95, 0.77, 1.18, 0.707, 1.00, 0.83, 0.88, 0.78; their batch-16 rounds were
# half the sweep's length; the H100 64-layer profile and sweep of 2026-12-05, batches 1/16: 0.90, 0.72): a
# verdict from such a speed-up inside the band is not one. Calibrating the profiled step count (--calibrate-tps,
# --calibrate-live) does not take the baseline's error away: calibrated, with the baseline estimated, the same
# pairs gave 0.76 to 1.15 (H100: 0.88, 0.81): the band holds for an estimated baseline, calibrated or not
PROFILE_ALONE_RATIO = (0.70, 1.22)
# a baseline estimated from a live log (no kernel tables: one cycle without draft and draft_extend, verify's
# event time holding its Python) is no estimate to decide on: the first real log's, in words for the outputs
LIVE_BASELINE_ERROR = ("42% low on the first real log (178 tokens/s at batch 1 against 308 measured, H100) and 41% "
                       "low on a second (352 against 599: V = 3, 32 layers, H100)")
# the recommended step count is the fewest whose predicted tokens/s is within this fraction of the highest:
# a smaller predicted gain is below what the model resolves (calibrated predictions at measured step counts
# were within 2-5% on the real sweeps), and each step adds draft work and rests more on extrapolated
# acceptance (positions past the profiled steps are never observed)
BEST_TOLERANCE = 0.01
BREAK_EVEN = 0.03
"""A predicted speed-up within this fraction of 1 (0.97x-1.03x) is a break-even, not "speculation pays" or "does
not": repeated unprofiled rounds of one SGLang engine are held to agree within 3% (recipes/sglang_sweep.py) and
engines of one configuration differed by more (8% at batch 8 and 17% at 32 on the 48-layer H100 sweep), so a
smaller difference is not one a decision can rest on (:func:`verdict`)."""
# a batch size takes part in the fit of verify's non-attention time over the batch sizes of one profile
# (:func:`batch_token_fit`) with at least this many steady cycles
MIN_BATCH_FIT_CYCLES = 20
MIN_CYCLES = cycles_mod.MIN_CYCLES
"""A prediction resting on fewer decode cycles than this (all profiles together) says so (``few_cycles``);
``--per-batch`` models no batch size with fewer on its own (timeline.cycles.MIN_CYCLES, the one figure)."""
# one profile tells how they grow only when its cycles' verified tokens spread this much
# (coefficient of variation of n over the cycles) over at least two batch sizes
MIN_TOKEN_SPREAD = 0.10


# ---------------------------------------------------------------------------------------------
# draft steps of a profile
# ---------------------------------------------------------------------------------------------
def _cycle_windows(cycles: pd.DataFrame, rank) -> pd.DataFrame:
    c = cycles[cycles["rank"] == rank].sort_values("cycle")
    lo = "cpu_start_ns" if "cpu_start_ns" in c.columns else "start_ns"
    hi = "cpu_end_ns" if "cpu_end_ns" in c.columns else "end_ns"
    return pd.DataFrame({"cycle": c["cycle"].to_numpy(), "lo": c[lo].to_numpy(dtype="int64"),
                         "hi": c[hi].to_numpy(dtype="int64")})


def draft_step_table(side: Side, rank=None) -> pd.DataFrame:
    """Per cycle (one rank): number of ``draft_step`` ranges and their GPU start-to-start period."""
    empty = pd.DataFrame({"cycle": pd.Series(dtype="int64"), "steps": pd.Series(dtype="int64"),
                          "step_period_ns": pd.Series(dtype="float64")})
    r = side.ranges
    if r is None or r.empty or side.cycles.empty:
        return empty
    rank = side.cycles["rank"].min() if rank is None else rank
    # the rank's rows first (NumPy), the text compared on those only, the columns used here copied
    rows = np.flatnonzero((r["rank"] == rank).to_numpy(dtype=bool, na_value=False))
    rows = rows[r["name"].to_numpy(dtype=object)[rows] == "draft_step"]
    if not len(rows):
        return empty
    st = r[[c for c in ("global_tid", "start_ns", "end_ns", "gpu_start_all", "gpu_start_ns") if c in r.columns]] \
        .take(rows)
    st = st.sort_values(["global_tid", "start_ns", "end_ns"], ascending=[True, True, False])
    keep, last_tid, last_end = [], None, None
    for tid, s, e in zip(st["global_tid"], st["start_ns"], st["end_ns"]):
        outer = tid != last_tid or s >= last_end      # drop copies nested in another draft_step
        keep.append(outer)
        if outer:
            last_tid, last_end = tid, e
    st = st[np.array(keep)]
    win = _cycle_windows(side.cycles, rank)
    pos = np.searchsorted(win["lo"].to_numpy(), st["start_ns"].to_numpy(dtype="int64"), side="right") - 1
    ok = (pos >= 0) & (st["end_ns"].to_numpy() <= win["hi"].to_numpy()[np.clip(pos, 0, None)])
    gcol = "gpu_start_all" if "gpu_start_all" in st.columns else "gpu_start_ns"
    st = st.assign(cycle=win["cycle"].to_numpy()[np.clip(pos, 0, None)])[ok]
    if st.empty:
        return empty
    gs = pd.to_numeric(st[gcol], errors="coerce").fillna(-1).astype("int64")
    g = pd.DataFrame({"cycle": st["cycle"].to_numpy(), "gs": gs.to_numpy()}).groupby("cycle")["gs"]
    agg = g.agg(["size", "min", "max"])
    n = agg["size"].to_numpy()
    period = np.where((n >= 2) & (agg["min"].to_numpy() >= 0),
                      (agg["max"].to_numpy() - agg["min"].to_numpy()) / np.maximum(n - 1, 1), np.nan)
    return pd.DataFrame({"cycle": agg.index.to_numpy(dtype="int64"), "steps": n.astype("int64"),
                         "step_period_ns": period.astype("float64")})


def _tandem_repeat(seq: list) -> tuple[int, int, int]:
    """(start i, period p, repeats r) of the tandem repeat covering most of ``seq`` (smallest p, then
    earliest i, on ties); r = 1 when no repeat covers at least half of ``seq``.

    Per period p, one vectorised pass: m[j] = seq[j] == seq[j + p]; the run of consecutive matches
    starting at i, L_i, gives the repeats of the block at i, 1 + L_i // p (each block equals the one
    before it). O(n^2 / 2) comparisons in NumPy instead of a Python scan of every (p, i, r): a draft
    of a few thousand kernels per cycle takes milliseconds, not minutes."""
    n = len(seq)
    if n < 2:
        return (0, 1, 1)
    codes = pd.factorize(pd.Series(list(seq), dtype=object))[0]
    best_cov, best_i, best_p, best_r = 1, 0, 1, 1
    idx = np.arange(n)
    for p in range(1, n // 2 + 1):
        if p * (n // p) <= best_cov:           # no repeat of this period can cover more
            continue
        m = codes[:n - p] == codes[p:]
        # run[j]: matches in a row from j on (a reverse cumulative count, reset at each mismatch)
        mism = np.flatnonzero(~m)
        nxt = np.full(n - p, n - p)
        if len(mism):
            pos = np.searchsorted(mism, idx[:n - p], side="left")
            has = pos < len(mism)
            nxt[has] = mism[pos[has]]
        run = nxt - idx[:n - p]
        reps = 1 + run // p
        cov = np.where(run >= p, p * reps, 0)
        i = int(np.argmax(cov))
        if cov[i] > best_cov:
            best_cov, best_i, best_p, best_r = int(cov[i]), i, p, int(reps[i])
    if best_r >= 2 and best_cov * 2 >= n:
        return (best_i, best_p, best_r)
    return (0, best_p, 1)


def _primitive_repeats(seq: list) -> tuple[int, int]:
    """(period p, repeats r) of the tandem repeat covering most of ``seq`` (smallest p on ties)."""
    _, p, r = _tandem_repeat(seq)
    return p, r


def _cycle_rows(ops: pd.DataFrame, rank) -> np.ndarray:
    """Rows of ``ops`` of ``rank`` inside a decode cycle (``cycle_range`` >= 0), ascending."""
    return np.flatnonzero((ops["rank"].to_numpy() == rank) & (ops["cycle_range"].to_numpy() >= 0))


def _draft_kernels(side: Side, rank=None, memo: dict | None = None) -> pd.DataFrame:
    """The draft phase's kernels of one rank (the lowest with cycles unless given) inside decode
    cycles, in start order; none when the draft phase has a graph launch (traced at graph level).
    ``memo``: a dict kept by a caller that asks again about the same ops (:func:`step_costs`)."""
    ops = side.gpu_ops
    if ops is None or ops.empty or side.cycles.empty or "cycle_range" not in ops.columns:
        return ops.iloc[0:0] if ops is not None else pd.DataFrame()
    rank = side.cycles["rank"].min() if rank is None else rank
    if memo is not None and ("draft", rank) in memo:
        return memo[("draft", rank)]
    # integer columns first: the text comparisons run on one rank's ops in cycles, not every op,
    # and only the draft kernels' rows of the columns read here and by the callers are copied
    cols = [c for c in ("kind", "rank", "cycle_range", "phase", "name", "start_ns", "end_ns") if c in ops.columns]
    rows = _rank_cycle_rows(ops, rank, memo)
    rows = rows[ops["phase"].iloc[rows].to_numpy() == DRAFT]
    if not len(rows) or _equals(ops["kind"], rows, "graph").any():
        out = ops[cols].iloc[0:0]
    else:
        rows = rows[_equals(ops["kind"], rows, "kernel")]
        out = ops[cols].take(rows).sort_values("start_ns")
    if memo is not None:
        memo[("draft", rank)] = out
    return out


def _rank_cycle_rows(ops: pd.DataFrame, rank, memo: dict | None) -> np.ndarray:
    """:func:`_cycle_rows`, kept in ``memo`` when given."""
    if memo is None:
        return _cycle_rows(ops, rank)
    if ("rows", rank) not in memo:
        memo[("rows", rank)] = _cycle_rows(ops, rank)
    return memo[("rows", rank)]


def _equals(column: pd.Series, rows: np.ndarray, value: str) -> np.ndarray:
    """``column.iloc[rows] == value`` as a NumPy mask; on a categorical column by its codes (no
    text array made)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        cats = column.cat.categories
        if value not in cats:
            return np.zeros(len(rows), dtype=bool)
        return column.cat.codes.to_numpy()[rows] == cats.get_loc(value)
    return column.iloc[rows].to_numpy() == value


def _cycle_groups(d: pd.DataFrame, limit: int | None = None) -> tuple[np.ndarray, list[int], np.ndarray]:
    """The draft kernels ``d`` (in start order) grouped by cycle, the cycles in order of first
    appearance (``groupby(sort=False)``'s order), only the first ``limit`` of them when given: (the
    rows of ``d`` in that order, the groups' bounds in those rows, the cycle ids in that order)."""
    codes, order_of_first = pd.factorize(d["cycle_range"].to_numpy(dtype="int64"))
    rows = np.arange(len(codes)) if limit is None else np.flatnonzero(codes < limit)
    rows = rows[stable_order(codes[rows], 0, len(order_of_first) - 1)]
    bounds = np.r_[0, np.flatnonzero(np.diff(codes[rows])) + 1, len(rows)].tolist()
    return rows, bounds, np.asarray(order_of_first)[:limit]


def kernel_step_table(side: Side, rank=None, memo: dict | None = None) -> pd.DataFrame:
    """Per cycle (one rank), from the draft kernels (eager, or graphs traced per node): the repeats of
    the draft kernel block and the GPU start-to-start period of one repeat, i.e. what one draft step
    costs on the GPU including the gaps between its kernels (the CUDA-graph analogue of the
    ``draft_step`` period: a graph replay has no per-step ranges)."""
    empty = pd.DataFrame({"cycle": pd.Series(dtype="int64"), "steps": pd.Series(dtype="int64"),
                          "step_period_ns": pd.Series(dtype="float64")})
    d = _draft_kernels(side, rank, memo)
    if d.empty:
        return empty
    rank = side.cycles["rank"].min() if rank is None else rank
    ops = side.gpu_ops
    mine = _rank_cycle_rows(ops, rank, memo)
    first = pd.Series(ops["start_ns"].to_numpy()[mine]).groupby(
        ops["cycle_range"].to_numpy()[mine]).min()                  # = the cycle's GPU window start
    cyc = side.cycles[side.cycles["rank"] == rank]
    cyc = cyc[cyc["start_ns"].notna()]          # cycles whose GPU data was lost have no GPU start
    by_start = dict(zip(cyc["start_ns"].astype("int64"), cyc["cycle"].astype("int64")))
    # one Python step per cycle, the repeat search once per distinct kernel sequence
    rows, bounds, order_of_first = _cycle_groups(d)
    names = d["name"].to_numpy(dtype=object)[rows].tolist()
    starts = d["start_ns"].to_numpy(dtype="int64")[rows]
    first_of = dict(zip(first.index.to_numpy(dtype="int64").tolist(), first.to_numpy(dtype="int64").tolist()))
    repeat_of: dict[tuple, tuple[int, int, int]] = {}
    found = []                                   # (cycle, first op, i, p, r) per cycle
    for a, b, cr in zip(bounds[:-1], bounds[1:], order_of_first.tolist()):
        cycle = by_start.get(first_of.get(cr, -1))
        if cycle is None:
            continue
        seq = tuple(names[a:b])
        if seq not in repeat_of:
            repeat_of[seq] = _tandem_repeat(list(seq))
        found.append((cycle, a) + repeat_of[seq])
    if not found:
        return empty
    cycle, a, i, p, r = (np.array(c, dtype="int64") for c in zip(*found))
    # one repeat's start-to-start period: (start of the last repeat - start of the first) / (r - 1)
    steps = r >= 2
    period = np.full(len(found), np.nan)
    first_op = a[steps] + i[steps]
    period[steps] = (starts[first_op + (r[steps] - 1) * p[steps]] - starts[first_op]) / (r[steps] - 1)
    return pd.DataFrame({"cycle": cycle, "steps": r, "step_period_ns": period}).sort_values("cycle")


MIN_ACCEPT_REQUESTS = 100
"""Per-request accept lengths a batch size's own cycles must give for its acceptance to come from them alone
(position rates to about +-0.05); fewer (a profile of batch-16 rounds asked about batch 1 has only the drain's
last cycles: 2 and 13 on the real H100 profiles at 5 steps and 128 layers, whose acceptance then said 0.5 and 0 at
positions 1 and 2 against 1/3 and 1/3 measured) and the acceptance comes from every steady cycle of the profile:
a request's accept length is its own (the draft and the target on its tokens), not its batch's."""

# cycles whose draft kernel sequence votes for the steps per cycle (steps_from_kernels)
STEP_SAMPLE_CYCLES = 50


def steps_from_kernels(side: Side, rank=None, memo: dict | None = None) -> int | None:
    """Draft steps per cycle from the repetition of the draft phase's kernel sequence (eager runs
    or graphs traced per node: one step's kernels repeat once per step). None when the draft phase
    shows no kernels (graph-level trace)."""
    d = _draft_kernels(side, rank, memo)
    if d.empty:
        return None
    # the first STEP_SAMPLE_CYCLES cycles: only their rows' names are taken, not every draft kernel's
    rows, bounds, _ = _cycle_groups(d, STEP_SAMPLE_CYCLES)
    names = d["name"].to_numpy(dtype=object)[rows].tolist()
    counts = Counter(_primitive_repeats(names[a:b])[1] for a, b in zip(bounds[:-1], bounds[1:]))
    return counts.most_common(1)[0][0] if counts else None


def has_draft_extend(side: Side) -> bool:
    """Whether the decode cycles do draft-extend work: SGLang's EAGLE loop, where the draft extend
    after verify proposes the next cycle's first draft token."""
    c = side.cycles
    col = "draft_extend_ns"
    return bool(len(c) and col in c.columns and (pd.to_numeric(c[col], errors="coerce").fillna(0) > 0).mean() > 0.5)


def infer_steps(side: Side, memo: dict | None = None) -> tuple[int | None, str]:
    """(profiled step count, where it comes from). The step count is SGLang's
    ``--speculative-num-steps``: the draft tokens proposed per request per cycle. The shim's
    ``spec_config`` mark records it; without the mark it is inferred: ``draft_step`` ranges per cycle,
    else the repeats of the draft kernel sequence (the draft forwards: on SGLang one fewer than its
    flag, which :func:`step_costs` says in a note)."""
    cfg = side.spec_config
    if cfg is not None and cfg.steps:
        return int(cfg.steps), "SGLang's --speculative-num-steps (the spec_config mark)"
    t = draft_step_table(side)
    if len(t):
        return int(t["steps"].mode().iloc[0]), "draft_step ranges per cycle"
    k = steps_from_kernels(side, memo=memo)
    if k is not None:
        return k, "repetitions of the draft kernel sequence per cycle"
    return None, ""


# ---------------------------------------------------------------------------------------------
# costs of one profile
# ---------------------------------------------------------------------------------------------
def batch_cycles(cycles: pd.DataFrame, batch: int | None) -> pd.DataFrame:
    """The cycles (every rank's rows) whose accept mark counts ``batch`` requests (all when None)."""
    if batch is None or not len(cycles):
        return cycles
    req = pd.to_numeric(cycles["requests"], errors="coerce") if "requests" in cycles.columns else None
    if req is None:
        return cycles.iloc[0:0]
    ids = set(cycles.loc[req == int(batch), "cycle"].tolist())
    return cycles[cycles["cycle"].isin(ids)]


def profile_samples(side: Side, keep_outliers: bool = False,
                    memo: dict | None = None, batch: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Per cycle (mean over ranks): wall time ``t_ns``, exclusive ns per phase, accepted, requests,
    the draft step period (when draft_step ranges exist), the host time of the spec-only ranges.
    ``memo``: see :func:`_draft_kernels`; ``batch``: only the cycles of that many requests."""
    chosen = batch_cycles(side.cycles, batch)
    if batch is not None and chosen.empty and len(side.cycles):
        seen = sorted(int(x) for x in pd.to_numeric(side.cycles.get("requests"), errors="coerce").dropna().unique()) \
            if "requests" in side.cycles.columns else []
        raise ValueError(f"{side.label}: no decode cycle of batch {batch} (requests per cycle seen: "
                         f"{', '.join(map(str, seen[:20])) or 'none'})")
    cycles, dropped = (cycles_mod.steady(chosen, keep_outliers, every_rank=True),
                       cycles_mod.left_out_counts(chosen, keep_outliers))
    if cycles.empty:
        raise ValueError(f"{side.label}: no decode cycles (`decode_cycle` ranges): cannot model a cycle")
    per = per_cycle(cycles, side.phase_names).rename(columns={time_column(cycles): "t_ns"})
    acc = marked_samples(cycles)
    if acc is not None:
        per = per.join(acc, on="cycle")
    else:
        per["accepted"], per["requests"] = np.nan, np.nan
    kept = Side(side.label, cycles, side.kernels, side.phase_names, side.ranges, side.gpu_ops,
                spec_config=side.spec_config)
    steps, source = draft_step_table(kept), "draft_step"
    if steps.empty or steps["step_period_ns"].isna().all():
        steps, source = kernel_step_table(kept, memo=memo), "kernels"
    per = per.merge(steps[["cycle", "step_period_ns"]], on="cycle", how="left") if len(steps) \
        else per.assign(step_period_ns=np.nan)
    per["step_period_source"] = source
    if "draft_replay_ns" in cycles.columns:      # a live log: the draft graph's GPU time (CUDA events)
        replay = pd.to_numeric(cycles["draft_replay_ns"], errors="coerce").astype("float64")
        per = per.merge(replay.groupby(cycles["cycle"]).mean().rename("draft_gpu_ns"), left_on="cycle",
                        right_index=True, how="left")
    per = per.merge(range_host_times(kept, cycles), on="cycle", how="left")
    per = per.merge(host_waits(cycles), on="cycle", how="left")
    per = per.merge(att_mod.per_cycle(side.gpu_ops, cycles), on="cycle", how="left")
    return per.reset_index(drop=True), dropped


def marked_samples(cycles: pd.DataFrame) -> pd.DataFrame | None:
    """acceptance.cycle_samples of ``cycles`` (accepted, requests, lens of the lowest rank with accept
    marks) indexed by those cycles' numbers, to join onto per-cycle rows; None without accept marks."""
    marked = cycles[cycles["accepted_tokens"].notna()] if "accepted_tokens" in cycles.columns else cycles.iloc[0:0]
    if marked.empty:
        return None
    acc = acc_mod.cycle_samples(cycles)
    acc.index = marked[marked["rank"] == marked["rank"].min()].sort_values("cycle")["cycle"].to_numpy()
    return acc


HOST_RANGES = {"draft_cpu_ns": "draft", "draft_extend_cpu_ns": "draft_extend", "verify_cpu_ns": "verify",
               "replay_draft_cpu_ns": "graph_replay_draft", "replay_draft_extend_cpu_ns": "graph_replay_draft_extend",
               "replay_verify_cpu_ns": "graph_replay_verify"}
"""Per-cycle host (CPU) time of these shim ranges: the spec-only work a plain decode step does not do,
and the draft graph replay SGLang runs only at --speculative-num-steps >= 2."""


def range_host_times(side: Side, cycles: pd.DataFrame) -> pd.DataFrame:
    """Per cycle of the lowest rank: the summed CPU duration of the ranges in :data:`HOST_RANGES`
    that start inside the cycle's host window (NaN columns when the side has no ranges)."""
    out = pd.DataFrame({"cycle": cycles["cycle"].drop_duplicates().to_numpy()})
    r = side.ranges
    if r is None or r.empty or "name" not in r.columns or not len(cycles):
        for col in HOST_RANGES:
            out[col] = np.nan
        return out
    rank = cycles["rank"].min()
    w = _cycle_windows(cycles, rank)
    rr = r[(r["rank"] == rank) & r["end_ns"].notna()]
    starts = w["lo"].to_numpy()
    for col, name in HOST_RANGES.items():
        x = rr[rr["name"] == name]
        s0 = x["start_ns"].to_numpy(dtype="int64")
        dur = (x["end_ns"].to_numpy(dtype="float64") - s0)
        i = np.searchsorted(starts, s0, side="right") - 1
        ok = (i >= 0) & (s0 < w["hi"].to_numpy()[np.clip(i, 0, None)])
        sums = np.bincount(i[ok], weights=dur[ok], minlength=len(w)) if len(w) else np.zeros(0)
        out[col] = pd.Series(sums, index=w["cycle"].to_numpy()).reindex(out["cycle"]).to_numpy()
    return out


def host_waits(cycles: pd.DataFrame) -> pd.DataFrame:
    """Per cycle of the lowest rank: ``host_wait_ns``, its host period's time in synchronize calls outside
    the phases, and ``launch_excess_ns``, its graph launches' time beyond the report's fastest launch
    (timeline.cycles; NaN where the report could not tell)."""
    out = pd.DataFrame({"cycle": cycles["cycle"].drop_duplicates().to_numpy()})
    low = cycles[cycles["rank"] == cycles["rank"].min()] if len(cycles) else cycles
    for col in cycles_mod.HOST_CALL_COLUMNS:
        if col not in cycles.columns or not len(cycles):
            out[col] = np.nan
            continue
        v = pd.Series(pd.to_numeric(low[col], errors="coerce").to_numpy(dtype="float64", na_value=np.nan),
                      index=low["cycle"].to_numpy())
        out[col] = v.reindex(out["cycle"]).to_numpy()
    return out


def _phase_cols(samples: pd.DataFrame, phase_names) -> list[str]:
    """The phase columns the model uses: those the samples hold a value of (a live log's all-reduce at
    TP 1 is null throughout: nothing ran, nothing to model; an nsys profile's is 0)."""
    return [f"{p}_ns" for p in phase_names if f"{p}_ns" in samples.columns and samples[f"{p}_ns"].notna().any()]


def live_cut_request_tokens(request_tokens, live_cut: bool):
    """``request_tokens`` as given, but ``"steady"`` for ``"auto"`` where a live log was cut by step count: the
    log measured each step count over its steady cycles, so the predictions beside them are of the steady
    state too (the one rule for ``whatif --batch B`` and ``--per-batch``)."""
    return "steady" if live_cut and request_tokens == "auto" else request_tokens


def timed_samples(samples: pd.DataFrame) -> np.ndarray:
    """Per cycle: does it hold phase times? :func:`analyze.timeline.cycles.timed` (the per-cycle rows carry
    the cycle table's ``timed`` flag: false for a sampled live log's untimed cycles) and a phase value (a log
    written with the CUDA events off, ``SPECPROF_TIMING_EVENTS=0`` or no CUDA, flags every cycle timed and
    holds no phase time)."""
    flag = cycles_mod.timed(samples)
    cols = [c for c in ("draft_ns", "verify_ns", "draft_extend_ns") if c in samples.columns]
    return flag & samples[cols].notna().any(axis=1).to_numpy() if cols else flag


def verified_tokens(samples: pd.DataFrame, steps: int) -> np.ndarray:
    """Per cycle: the tokens verified, M (k + 1) (M = the cycle's requests; NaN when unknown)."""
    req = samples["requests"] if "requests" in samples.columns else pd.Series(np.nan, index=samples.index)
    return pd.to_numeric(req, errors="coerce").to_numpy(dtype="float64") * (steps + 1)


def batch_spread(samples: pd.DataFrame, steps: int) -> dict:
    """How much the profile's cycles differ in verified tokens: whether one profile can tell how the
    token-dependent components grow with them (``varies``: at least two batch sizes and a coefficient
    of variation of n >= MIN_TOKEN_SPREAD, at least two batch sizes seen in two cycles or more;
    cycles whose mark counts no request are left out)."""
    n = verified_tokens(samples, steps)
    n = n[np.isfinite(n) & (n > 0)]          # a mark with 0 requests counts no tokens: no point of the line
    if not len(n):
        return {"varies": False, "cycles": 0, "tokens_min": np.nan, "tokens_max": np.nan, "tokens_cv": np.nan,
                "batch_sizes": 0}
    cv = float(n.std() / n.mean())
    values, counts = np.unique(n, return_counts=True)
    repeated = int((counts >= 2).sum())      # batch sizes seen in two cycles or more: one odd cycle is no slope
    return {"varies": bool(repeated >= 2 and cv >= MIN_TOKEN_SPREAD), "cycles": int(len(n)),
            "tokens_min": float(n.min()), "tokens_max": float(n.max()), "tokens_cv": cv,
            "batch_sizes": int(len(values))}


def token_fit(samples: pd.DataFrame, steps: int, phase_names, verify_scaling=None) -> dict | None:
    """{component: {intercept_ns, per_token_ns, source}} for the token-dependent components, from ONE
    profile: time = intercept + per_token * n with n = M (k+1) the cycle's verified tokens.

    ``verify_scaling`` None: least squares over the cycles when the batch varies (:func:`batch_spread`),
    else None (one profile cannot tell). ``"constant"``: None (every component keeps its measured
    time). A number F in [0, 1]: verify's measured time v at the profile's mean n0 splits into
    (1 - F) v constant and F v proportional to n (intercept (1 - F) v, per token F v / n0); the other
    components keep their measured time."""
    comps = [c for c in TOKEN_COMPONENTS if f"{c}_ns" in _phase_cols(samples, phase_names)]
    if verify_scaling == "constant" or not comps:
        return None
    n = verified_tokens(samples, steps)
    ok = np.isfinite(n) & (n > 0)
    if verify_scaling is not None:
        f = float(verify_scaling)
        if "verify" not in comps or not ok.any():
            return None
        vv = samples["verify_ns"].to_numpy(dtype="float64", na_value=np.nan)
        ok &= np.isfinite(vv)              # a sampled live log: the timed cycles
        if not ok.any():
            return None
        v, n0 = float(vv[ok].mean()), float(n[ok].mean())
        return {"verify": {"intercept_ns": (1 - f) * v, "per_token_ns": f * v / n0 if n0 > 0 else 0.0,
                           "source": "given"}}
    if not batch_spread(samples[timed_samples(samples)], steps)["varies"]:   # a sampled log: its timed cycles
        return None
    out = {}
    for c in comps:
        y_all = samples[f"{c}_ns"].to_numpy(dtype="float64", na_value=np.nan)
        known = ok & np.isfinite(y_all)    # a sampled live log: the cycles its events timed
        x, y = n[known], y_all[known]
        if not np.any(y):                  # no such work in this trace (allreduce at TP 1)
            continue
        if len(np.unique(x)) < 2:          # one batch size (a bootstrap resample, the timed cycles): no slope
            b, a = 0.0, float(y.mean())
        else:
            b, a = np.polyfit(x, y, 1)
        if b < 0 or a < 0:
            # more tokens never take less GPU time, and no work takes negative time: a fit that says so
            # measures something else (clock states, kernel choices between batch sizes): refused,
            # the component keeps its mean measured time
            out[c] = {"intercept_ns": float(y.mean()), "per_token_ns": 0.0, "source": "refused",
                      "fitted_per_token_ns": float(b), "fitted_intercept_ns": float(a)}
            continue
        out[c] = {"intercept_ns": float(a), "per_token_ns": float(b), "source": "fit"}
    return out


def batch_fit_samples(side: Side, keep_outliers: bool = False) -> pd.DataFrame | None:
    """What :func:`batch_token_fit` reads, per steady cycle of every batch size (requests, verify_ns,
    verify_attention_ns: the columns :func:`profile_samples` gives them, nothing else computed); None
    unless two batch sizes have :data:`MIN_BATCH_FIT_CYCLES` cycles (a profile of one batch size:
    nothing to fit, and nothing read from the ops)."""
    cyc = cycles_mod.steady(side.cycles, keep_outliers, every_rank=True) if side.cycles is not None else None
    if cyc is None or cyc.empty or "requests" not in cyc.columns or "verify" not in side.phase_names:
        return None
    # the requests profile_samples joins (marked_samples: the lowest rank with accept marks), counted
    # per batch size before anything else is computed
    acc = marked_samples(cyc)
    if acc is None:
        return None
    sizes = acc["requests"].value_counts()
    if int((sizes[sizes.index > 0] >= MIN_BATCH_FIT_CYCLES).sum()) < 2:
        return None
    per = per_cycle(cyc, side.phase_names).join(acc[["requests"]], on="cycle")
    per = per.merge(att_mod.per_cycle(side.gpu_ops, cyc), on="cycle", how="left")
    return per[["cycle", "requests", "verify_ns", "verify_attention_ns"]].reset_index(drop=True)


def batch_token_fit(all_samples: pd.DataFrame, steps: int) -> dict | None:
    """How verify's time grows with the verified tokens, from the batch sizes of ONE profile: the part
    of verify that is not attention (GEMMs, norms, activations, the LM head: work over the batch x
    (k + 1) verified tokens, the same kernels whatever the context) as a least-squares line in the
    verified tokens n = M (k + 1) over the per-batch means (weights: the cycles); attention reads each
    request's context and stays with its batch. None without the per-cycle attention split (kernel
    names: attribute/attention.py) or without two batch sizes of :data:`MIN_BATCH_FIT_CYCLES` cycles.
    ``per_token_ns`` never negative (a falling line is refused: 0, ``refused``)."""
    need = {"requests", "verify_ns", "verify_attention_ns"}
    if all_samples is None or not need <= set(all_samples.columns):
        return None
    x = all_samples[["requests", "verify_ns", "verify_attention_ns"]].apply(pd.to_numeric, errors="coerce").dropna()
    x = x[x["requests"] > 0]
    if x.empty:
        return None
    g = x.assign(rest=x["verify_ns"] - x["verify_attention_ns"]).groupby("requests")
    pts = pd.DataFrame({"cycles": g.size(), "rest_ns": g["rest"].mean()})
    pts = pts[pts["cycles"] >= MIN_BATCH_FIT_CYCLES]
    if len(pts) < 2:
        return None
    n = pts.index.to_numpy(dtype="float64") * (steps + 1)
    slope, _ = np.polyfit(n, pts["rest_ns"].to_numpy(dtype="float64"), 1, w=np.sqrt(pts["cycles"].to_numpy()))
    refused = bool(slope < 0)
    return {"per_token_ns": 0.0 if refused else float(slope), "refused": refused, "fitted_per_token_ns": float(slope),
            "points": [{"batch": int(b), "tokens": float(t), "cycles": int(c), "rest_ns": float(r)}
                       for b, t, c, r in zip(pts.index, n, pts["cycles"], pts["rest_ns"])]}


def apply_batch_fit(c: dict, fit: dict | None) -> dict:
    """``c`` (one batch size's costs) with verify as its measured time at its verified tokens plus the
    batch fit's slope per token away from them (:func:`batch_token_fit`), where nothing else says how
    verify grows (a constant batch, no --verify-scaling); ``c`` itself otherwise."""
    if not fit or c.get("token_fit") or "verify_ns" not in c:
        return c
    n0, slope = float(c["verified_tokens"]), fit["per_token_ns"]
    line = {"intercept_ns": float(c["verify_ns"]) - slope * n0, "per_token_ns": slope, "source": "batches"}
    return dict(c, token_fit={"verify": line}, batch_fit=fit)


def sampled_samples(samples: pd.DataFrame, phase_names) -> pd.DataFrame:
    """A sampled live log's samples with its timed cycles' phase times carried onto every cycle's period
    (timeline/cycles.sampled_scale: the timed cycles pay the events and run longer), so that the mean
    costs, the fits over the verified tokens and the bootstrap all see the one split; the samples as
    they are otherwise (a profile, a log timed in every cycle)."""
    if samples is None or not len(samples) or "t_ns" not in samples.columns:
        return samples
    scale = cycles_mod.sampled_scale(samples["t_ns"].to_numpy(dtype="float64"), timed_samples(samples))
    if scale == 1.0:
        return samples
    cols = _phase_cols(samples, phase_names)
    return samples.assign(**{c: pd.to_numeric(samples[c], errors="coerce").astype("float64") * scale for c in cols})


def costs_from_samples(samples: pd.DataFrame, steps: int, phase_names, verify_scaling=None,
                       sglang_loop: bool = False) -> dict:
    """Mean costs per cycle of one profile (see the module docstring). ``sglang_loop``: SGLang's EAGLE
    loop (the spec_config mark says so): ``steps`` is its --speculative-num-steps, the draft phase runs
    ``steps - 1`` draft forwards in one graph replay (none at 1 step), the first draft token comes from
    the draft extend."""
    cols = _phase_cols(samples, phase_names)
    t = float(samples["t_ns"].mean())
    # _phase_cols: each holds a value (a sampled live log: its timed cycles', carried onto all cycles' period
    # by :func:`sampled_samples` before this)
    comp = {c[:-3]: float(samples[c].mean()) for c in cols}
    overhead = t - sum(comp.values())
    per = samples["step_period_ns"].dropna() if "step_period_ns" in samples.columns else pd.Series(dtype=float)
    src = samples["step_period_source"].iloc[0] if "step_period_source" in samples.columns and len(samples) \
        else "draft_step"
    sglang = bool(sglang_loop)
    forwards = draft_forwards(steps, sglang)
    replay_gpu = samples["draft_gpu_ns"][timed_samples(samples)].dropna() if "draft_gpu_ns" in samples.columns \
        else pd.Series(dtype=float)
    if len(per) and forwards >= 1:
        d, how = float(per.mean()), ("draft_step period on the GPU (start to start)" if src == "draft_step" else
                                     "period of the repeating draft kernel block on the GPU (start to start)")
    elif len(replay_gpu) and forwards >= 1 and sglang:
        # a live log: the draft phase's events span the host's work around the replay too (the replay's
        # preparation, the verify input's construction), which does not grow with the steps; the draft
        # graph's own GPU time (its gated replay events) is the forwards'
        d, how = float(replay_gpu.mean()) / forwards, ("the draft graph replay's GPU time (live log, CUDA events) / "
                                                       "draft forwards")
    elif forwards >= 1:
        d, how = comp.get(DRAFT, 0.0) / forwards, "draft GPU time / draft forwards"
    elif sglang:
        d, how = comp.get("draft_extend", 0.0), ("no draft forward at 1 step: the draft extend's GPU time (a forward "
                                                 "of the same draft model over more tokens: an upper estimate)")
    else:
        d, how = comp.get(DRAFT, 0.0), "draft GPU time"
    busy = sum(comp.values())
    idle_frac = min(max((t - busy) / t, 0.0), 1.0) if t > 0 else 0.0
    def mean_of(col: str) -> float:
        """The column's mean over the samples, NaN where it has no value."""
        return float(samples[col].mean()) if col in samples.columns and samples[col].notna().any() else np.nan
    host = {col: mean_of(col) for col in HOST_RANGES}
    attention = {col: mean_of(col) for col in att_mod.COLUMNS}
    req = samples["requests"].dropna()
    m = float(req.mean()) if len(req) else 1.0
    tok = samples["accepted"].dropna() + samples["requests"].fillna(1)[samples["accepted"].notna()] \
        if samples["accepted"].notna().any() else pd.Series(dtype=float)
    tsum = samples.loc[samples["accepted"].notna(), "t_ns"].sum() if len(tok) else np.nan
    return {"steps": int(steps), "cycles": int(len(samples)), "requests": m, "cycle_ns": t, **{f"{k}_ns": v for k, v in comp.items()},
            "overhead_ns": overhead, "draft_step_ns": d, "draft_step_source": how,
            "sglang_loop": sglang, "draft_forwards": forwards, "idle_fraction": idle_frac,
            **{k: v for k, v in host.items()}, **attention, **{col: mean_of(col) for col in cycles_mod.HOST_CALL_COLUMNS},
            "verified_tokens": m * (steps + 1),
            "tokens_per_cycle": float(tok.mean()) if len(tok) else np.nan,
            "tokens_per_s": float(tok.sum() * 1e9 / tsum) if len(tok) and tsum else np.nan,
            "batch": batch_spread(samples, steps),
            "token_fit": token_fit(samples, steps, phase_names, verify_scaling)}


def step_costs(analysis, steps: int | None = None, *, keep_outliers: bool = False,
               verify_scaling=None, batch: int | None = None, memo: dict | None = None,
           calibration_source: dict | None = None) -> dict:
    """Costs per cycle of one profile: cycle time, exclusive GPU time per phase, overhead, the
    marginal cost of one draft step, requests, tokens, and (``token_fit``) how the token-dependent
    components grow with the verified tokens. ``steps``: the profiled draft step count (inferred
    from the trace when None); ``verify_scaling``: see :func:`token_fit`."""
    side = as_side(analysis)
    source = "given"
    # the draft kernels, found once for the step count and the samples (a caller modelling several
    # batch sizes of one side passes its own memo: they depend on the ops, not on the cycles chosen)
    memo = {} if memo is None else memo
    if side.cycles is None or side.cycles.empty:   # the first thing to say of a trace without speculation
        raise ValueError(f"{side.label}: no decode cycles (`decode_cycle` ranges): cannot model a cycle (a profile "
                         "of a speculative SGLang server under profile-trace has them)")
    if steps is None:
        steps, source = infer_steps(side, memo)
        if steps is None:
            raise ValueError(f"{side.label}: cannot tell the profiled draft step count (no draft_step ranges, "
                             "no per-kernel draft trace): give it (--profiled-steps K)")
    marks_note = None
    if source != "given":
        steps, source, marks_note = marked_step_count(side, steps, source, batch)
    samples, dropped = profile_samples(side, keep_outliers, memo, batch)
    samples = sampled_samples(samples, side.phase_names)
    if len(samples) and not timed_samples(samples).any():
        # a live log without CUDA events in these cycles (SPECPROF_TIMING_EVENTS=0, no CUDA, or a sampled
        # log none of whose timed cycles fell here): a cycle of pure overhead would make draft steps free
        raise ValueError(f"{side.label}: no phase times in its steady cycles{f' at batch {batch}' if batch else ''} "
                         "(a live log whose cycles carry no CUDA-event times): cannot model a draft step")
    cfg = side.spec_config
    sglang_loop = cfg is not None and cfg.algo not in ("none", "NGRAM") and bool(cfg.steps)
    c = costs_from_samples(samples, steps, side.phase_names, verify_scaling, sglang_loop)
    notes = []
    if source != "given" and cfg is None and has_draft_extend(side):
        notes.append(f"{side.label}: no spec_config mark (a profile of an older shim): {steps} draft step(s) inferred "
                     f"from the trace; if this is SGLang, its --speculative-num-steps is {steps + 1} (its draft_forward "
                     "runs steps - 1 forwards, the first draft token comes from the draft extend): pass "
                     "--profiled-steps, or profile with the current shim, which records the flag")
    if sglang_loop and (cfg.topk or 1) > 1:
        notes.append(tree_note(side.label, cfg))
    if cfg is not None and cfg.events_every == 1 and not side.live:
        notes.append(events_note(side.label))
    if cfg is not None and cfg.adaptive and not side.live and marked_steps(side) is None:
        notes.append(adaptive_note(side.label, cfg))      # no spec_steps marks: the switches are unknown
    if marks_note:
        notes.append(marks_note)
    if side.live:
        notes += live_profile_notes(side.label)
    notes += [f"{side.label}: {n.count} {n.message}" for n in side.notes
              if getattr(n, "code", None) == N.LIVE_LOG_ZERO_STEPS]
    c["rounds"] = rounds_mod.request_tokens(side.cycles, batch)
    pooled = pooled_acceptance(side, samples, batch, keep_outliers, memo)
    if pooled is not None:
        c["acc_samples"], note = pooled
        notes.append(note)
    if batch is not None and verify_scaling is None and not c.get("token_fit"):
        key = ("batch_fit_samples", keep_outliers)
        if key not in memo:
            memo[key] = batch_fit_samples(side, keep_outliers)
        c = apply_batch_fit(c, batch_token_fit(memo[key], steps))
    c.update(label=side.label, run=side.run or side.label, steps_source=source, left_out_cycles=dropped,
             phase_names=list(side.phase_names), live=bool(side.live), draft_topk=cfg.topk if cfg is not None else None,
             profile_notes=notes, context_trend=ctx_mod.context_trend(samples),
             samples=samples, verify_scaling=verify_scaling, batch_filter=batch)
    return c


def accept_requests(samples: pd.DataFrame) -> int:
    """Per-request accept lengths the cycles give (the requests of those with an accept mark)."""
    if samples is None or not len(samples) or "accepted" not in samples.columns:
        return 0
    req = pd.to_numeric(samples["requests"], errors="coerce").fillna(1)
    return int(req[samples["accepted"].notna()].sum())


def pooled_acceptance(side: Side, samples: pd.DataFrame, batch: int | None, keep_outliers: bool,
                      memo: dict) -> tuple[pd.DataFrame, str] | None:
    """(every steady cycle's samples, a note) where ``batch``'s own cycles give fewer than
    :data:`MIN_ACCEPT_REQUESTS` accept lengths and the whole profile gives more; else None."""
    own = accept_requests(samples)
    if batch is None or own >= MIN_ACCEPT_REQUESTS:
        return None
    every = profile_samples(side, keep_outliers, memo, None)[0]
    total = accept_requests(every)
    if total <= own:
        return None
    return every, (f"{side.label}: batch {batch}'s own {len(samples)} cycle(s) give {own} accept length(s) (fewer than "
                   f"{MIN_ACCEPT_REQUESTS}: cycles of {batch} request(s) in a profile of other batch sizes, e.g. a "
                   f"round's drain): acceptance from every steady cycle ({total} accept lengths; a request's accept "
                   f"length does not depend on its batch), the costs from those {len(samples)} cycle(s)")


def tree_note(label: str, cfg) -> str:
    """What the model assumes of a profile that SGLang ran with top-k > 1 (a draft tree): it models a
    chain (top-k 1: steps + 1 tokens verified a request, one accepted length per position)."""
    verified = f"{cfg.draft_tokens} draft tokens" if cfg.draft_tokens else "--speculative-num-draft-tokens"
    return (f"{label}: SGLang ran --speculative-eagle-topk {cfg.topk} (a draft tree: {verified} verified a request, "
            f"not steps + 1 = {cfg.steps + 1}); this model is a chain's (top-k 1: verified tokens M (s + 1), "
            "acceptance per position of one chain), so its predictions at other step counts are a chain's: "
            "profile with --speculative-eagle-topk 1 for a prediction this trace supports")


def events_note(label: str) -> str:
    """What a profile recorded with the shim's timing mode timing every cycle (its ``spec_config`` mark's
    ``events_every=1``) does to a prediction from it."""
    return (f"{label}: the shim's timing mode recorded CUDA events in every cycle of this profile "
            "(SPECPROF_TIMING_SAMPLE=1): on real SGLang they cost 3% (batch 1) to 12% (batch 16) of tokens/s "
            "(docs/live.md), in the speculative cycle and not in the estimated plain decode step, so a speed-up "
            "from this profile alone is low by up to that much: give --calibrate-tps, or profile with the "
            "default sampling (one cycle in 17)")


def marked_step_count(side: Side, steps: int, source: str, batch: int | None) -> tuple[int, str, str | None]:
    """(steps, source, note) of a profile whose shim marked each cycle's step count (sides.marked_steps):
    the count its marked cycles (of ``batch`` where given) ran, the most common where they ran several
    (with a note: ``whatif REPORT`` cuts such a profile by step count; a caller modelling it whole, e.g.
    --per-batch or advise, gets the majority). Unchanged without marks."""
    marked = marked_steps(side)
    if marked is None and side.live and "steps" in side.cycles.columns \
            and pd.to_numeric(side.cycles["steps"], errors="coerce").nunique() > 1:
        # a live log modelled whole (--per-batch, advise) whose cycles ran several step counts: its own column
        marked = pd.to_numeric(side.cycles["steps"], errors="coerce")
    if marked is None:
        return steps, source, None
    sel = marked
    if batch is not None and "requests" in side.cycles.columns:
        sel = marked[(pd.to_numeric(side.cycles["requests"], errors="coerce") == batch).to_numpy()]
    counts = pd.to_numeric(sel, errors="coerce").dropna().astype("int64").value_counts()
    if counts.empty:
        return steps, source, None
    k = int(counts.idxmax())
    note = None
    if len(counts) > 1:
        ran = ", ".join(f"{int(n)} at {int(v)}" for v, n in counts.sort_index().items())
        note = (f"{side.label}: its cycles{f' of batch {batch}' if batch else ''} ran several step counts ("
                + ("the log's steps column" if side.live else "the shim's spec_steps marks")
                + f": {ran} cycles): modelled at the most common, {k}; `analyze-trace whatif "
                "REPORT` without --per-batch fits each step count on its own")
    return k, ("the log's steps column" if side.live else "the shim's spec_steps marks") + \
        " (SGLang's --speculative-adaptive)", note


def adaptive_note(label: str, cfg) -> str:
    """What a profile of a server run with SGLang's ``--speculative-adaptive`` does to a prediction: its step
    count changed at run time and an nsys profile does not record the switches."""
    return (f"{label}: SGLang ran --speculative-adaptive: its step count changed at run time with the acceptance, "
            f"and this profile does not record the switches (a shim before its spec_steps marks), so every cycle is "
            f"modelled at the start value ({cfg.steps} steps): cycles that ran other step counts bias the fit. "
            "Profile with the current shim (it marks each cycle's step count), with a fixed step count, or read "
            "the shim's live timing log of the run (SPECPROF_TIMING=1)")


def live_profile_notes(label: str) -> list[str]:
    """What modelling a live timing log (run/live.py) lacks, said once per profile."""
    return [f"{label}: a live timing log: kernel tables absent; one draft forward's cost is the draft graph's GPU "
            "time (its replay events) / draft forwards, or where no replay was timed (eager) the draft phase's time / "
            "draft forwards (no per-step ranges or draft kernels); no host time per range (draft_cpu_ns, "
            "graph_replay_*): the baseline is one cycle without draft and draft_extend "
            "(not the plain-step host model); the all-reduce is timed inside the phases that ran it, so the "
            "'overhead' column is the untimed rest of the period less the all-reduce time (their sum is unchanged)"]


# ---------------------------------------------------------------------------------------------
# prediction
# ---------------------------------------------------------------------------------------------
def draft_forwards(steps, sglang: bool):
    """Draft-model forwards in the draft phase at ``steps`` (array or int): SGLang's
    ``draft_forward`` runs ``steps - 1`` (its first draft token comes from the draft extend)."""
    steps = np.asarray(steps)
    out = np.maximum(steps - 1, 0) if sglang else steps
    return int(out) if out.ndim == 0 else out


def _components(costs: list[dict]) -> list[str]:
    names = list(dict.fromkeys(p for c in costs for p in c["phase_names"] if f"{p}_ns" in c))
    return [p for p in names if p != DRAFT] + ["overhead"]


def cost_model(costs: list[dict], steps, requests: float) -> pd.DataFrame:
    """Per step count: the time of each component (ns) and the cycle time."""
    steps = np.asarray(list(steps), dtype="float64")
    ks = np.array([c["steps"] for c in costs], dtype="float64")
    out = pd.DataFrame({"steps": steps.astype(int)})
    multi = len(np.unique(ks)) >= 2
    if multi:
        w = np.array([c["cycles"] for c in costs], dtype="float64")
        draft = np.array([c.get(f"{DRAFT}_ns", 0.0) for c in costs])
        slope, icpt = np.polyfit(ks, draft, 1, w=np.sqrt(w))
        out[f"{DRAFT}_ns"] = icpt + slope * steps
        n_obs = np.array([c["verified_tokens"] for c in costs])
        n = requests * (steps + 1)
        per_step = slope                  # how much the cycle grows per step, the overhead aside
        for comp in _components(costs):
            y = np.array([c.get(f"{comp}_ns", 0.0) for c in costs])
            b, a = np.polyfit(n_obs, y, 1, w=np.sqrt(w))
            if comp != "overhead" and b < 0:     # more tokens never take less GPU time: refused, the mean
                b, a = 0.0, float(np.average(y, weights=w))
            if comp == "overhead" and per_step + b * requests < 0:
                # the overhead (host time, GPU idle) may fall as the GPU work grows (a host-bound cycle: the GPU
                # waits less), never by more than that work: a cycle with more steps is never shorter. Held so that
                # the cycle stays flat, through the profiles' (cycle-weighted) mean
                b = -per_step / requests if requests > 0 else 0.0
                a = float(np.average(y, weights=w)) - b * float(np.average(n_obs, weights=w))
            elif comp != "overhead":
                per_step += b * requests
            out[f"{comp}_ns"] = a + b * n
    else:
        c = costs[0]
        sg = bool(c.get("sglang_loop"))
        fw = draft_forwards(steps, sg) - draft_forwards(c["steps"], sg)
        out[f"{DRAFT}_ns"] = c.get(f"{DRAFT}_ns", 0.0) + fw * c["draft_step_ns"]
        fit = c.get("token_fit") or {}
        n = requests * (steps + 1)
        for comp in _components(costs):
            if comp in fit:      # grows with the verified tokens (linear: its mean over the batch mix)
                out[f"{comp}_ns"] = fit[comp]["intercept_ns"] + fit[comp]["per_token_ns"] * n
            else:
                out[f"{comp}_ns"] = c.get(f"{comp}_ns", 0.0)
    comp_cols = [f"{DRAFT}_ns"] + [f"{p}_ns" for p in _components(costs)]
    for col in comp_cols:                 # no component of a cycle takes negative time
        if col != "overhead_ns":
            out[col] = out[col].clip(lower=0.0)
    out["cycle_ns"] = out[comp_cols].sum(axis=1)
    if multi:
        # a fitted overhead line below 0 (the cycle shorter than its own GPU work): held at 0
        out["overhead_ns"] = out["overhead_ns"].clip(lower=0.0)
        out["cycle_ns"] = out[comp_cols].sum(axis=1)
        # after the clipping too (a fitted draft line below 0 at the fewest steps): never shorter at more steps,
        # the difference on the overhead
        held = out["cycle_ns"].cummax()
        out["overhead_ns"] = out["overhead_ns"] + (held - out["cycle_ns"])
        out["cycle_ns"] = held
    return out


def round_efficiency(acceptance: acc_mod.Acceptance, steps, request_tokens) -> np.ndarray:
    """Per step count: the rounds' tokens over their cycles' steady tokens (rounds.py) for rounds of
    requests of ``request_tokens`` new tokens each (one N, or one per round), started together; 1 where
    None (steady state)."""
    steps = [int(s) for s in steps]
    if request_tokens is None or not len(np.atleast_1d(request_tokens)):
        return np.ones(len(steps))
    return np.array([rounds_mod.efficiency(np.cumprod(np.nan_to_num(acceptance.rates_for(s), nan=0.0)),
                                           request_tokens, acceptance.requests) if s > 0 else 1.0
                     for s in steps])


def round_gap_share(acceptance: acc_mod.Acceptance, steps, request_tokens, round_gap_ns: float | None) -> np.ndarray:
    """Per step count: the time a round costs besides its decode cycles (``round_gap_ns``: rounds.py's gap before
    a round, the previous results returned, the requests admitted and prefilled) spread over the round's cycles
    (:func:`rounds.round_cycles`); 0 in the steady state or where the profile shows no such gap. A round is the
    same N tokens a request whatever the step count, in fewer cycles the more tokens a cycle yields, so this
    share grows with the step count: with every draft token accepted (V = 1, 64 requests of 128 tokens: 32
    cycles a round at 3 steps, 12 at 10) the profile's 54 ms gap is 1.7 ms a cycle at 3 steps and 4.5 ms at 10."""
    steps = [int(s) for s in steps]
    if not round_gap_ns or not np.isfinite(round_gap_ns) or request_tokens is None \
            or not len(np.atleast_1d(request_tokens)):
        return np.zeros(len(steps))
    out = []
    for s in steps:
        surv = np.cumprod(np.nan_to_num(acceptance.rates_for(s), nan=0.0)) if s > 0 else np.zeros(0)
        n = rounds_mod.round_cycles(surv, request_tokens, acceptance.requests)
        out.append(float(round_gap_ns) / n if n and np.isfinite(n) and n > 0 else 0.0)
    return np.array(out)


def calibration_shift(costs, acceptance: acc_mod.Acceptance, calibrate: tuple[int, float],
                      request_tokens: list[int] | None = None, round_gap_ns: float | None = None,
                      scale_gap: bool = True) -> float:
    """ns to take off the overhead of every predicted cycle so that the model's tokens/s at step
    count k equals X, the user's UNPROFILED measurement of that configuration (``calibrate=(k, X)``;
    ``(k, X, True)``: X is of steady cycles, a live timing log's, not of whole rounds).

    The whole profiled-vs-unprofiled difference is put on the overhead component (host time and GPU
    idle), none on the kernels: CUPTI times kernels on the GPU, the profiler's cost is on the host
    (API interception, NVTX, per-node graph tracing) and shows as GPU idle in a host-bound cycle."""
    k, x = int(calibrate[0]), float(calibrate[1])
    steady = len(calibrate) > 2 and bool(calibrate[2])
    if not x > 0:
        raise UsageError("--calibrate-tps: tokens/s must be > 0")
    costs = [costs] if isinstance(costs, dict) else list(costs)
    m = acceptance.requests
    t_model = float(cost_model(costs, [k], m)["cycle_ns"].iloc[0])
    # X of whole rounds (a benchmark's tokens/s) holds the rounds' tail; X of steady cycles (a live log's
    # tokens over its cycles' periods) does not: the cycle it gives is the steady one either way
    eff = 1.0 if steady else float(round_efficiency(acceptance, [k], request_tokens)[0])
    gap = 0.0 if steady else float(round_gap_share(acceptance, [k], request_tokens, round_gap_ns)[0])
    t_round = m * (1.0 + acceptance.expected_accepted(k)) * eff * 1e9 / x      # the cycle + the round's share
    if scale_gap and gap > 0 and t_model > 0:
        # the round's gap is host time under the profiler too: on the calibrated clock it shrinks as the cycle does
        # (x its calibrated / profiled ratio, :func:`gap_scale`), so cycle' (1 + gap / cycle) = t_round
        return t_model - t_round / (1.0 + gap / t_model)
    return t_model - (t_round - gap)


def gap_scale(costs, acceptance: acc_mod.Acceptance, k: int, shift_ns: float) -> float:
    """The calibrated / profiled ratio of the model's cycle at the calibrated step count ``k``: what the round's
    gap (profiled host time) is multiplied by on the calibrated clock (1 where it is not a ratio)."""
    t = float(cost_model(costs, [int(k)], acceptance.requests)["cycle_ns"].iloc[0])
    return (t - shift_ns) / t if t > 0 and t - shift_ns > 0 else 1.0


def separate_runs(costs: list[dict]) -> bool:
    """Whether ``costs`` are profiles of several step counts taken in separate profiled runs (separate
    reports), each under its own profiler stretch: on real SGLang four runs of one configuration (V = 3, 32
    layers, batch 16, H100; 2, 3, 5, 6 steps) measured 4.7 / 2.4 / 5.6 / 4.2 ms of overhead a cycle where each
    run's unprofiled tokens/s leaves 0.83 / 0.77 / 0.67 / 0.57 ms. Parts of one report (an adaptive run cut by step
    count) share one stretch; live logs were measured without a profiler."""
    if len({c["steps"] for c in costs}) < 2 or all(c.get("live") for c in costs):
        return False
    return len({c.get("run") for c in costs}) > 1


def shift_overhead(c: dict, shift_ns: float) -> dict:
    """``c`` with ``shift_ns`` taken off its overhead and cycle (the shift kept: a bootstrap resample takes the
    same off its own)."""
    if not shift_ns:
        return c
    return dict(c, overhead_ns=c["overhead_ns"] - shift_ns, cycle_ns=c["cycle_ns"] - shift_ns,
                overhead_shift_ns=c.get("overhead_shift_ns", 0.0) + shift_ns)


def calibrate_each(costs: list[dict], acceptance: acc_mod.Acceptance, tps: dict, request_tokens,
                   round_gap_ns: float | None = None) -> tuple[list, list]:
    """Each profile put on its own unprofiled clock: its overhead shifted so that the model of that profile
    alone reproduces ``tps[k]``, the tokens/s measured without the profiler at its step count k
    (:func:`calibration_shift`). (the shifted costs, one record a profile)."""
    out, rows = [], []
    for c in costs:
        shift = calibration_shift([c], acceptance, (c["steps"], tps[c["steps"]]), request_tokens, round_gap_ns,
                                  scale_gap=False)
        out.append(shift_overhead(c, shift))
        rows.append({"steps": int(c["steps"]), "label": c.get("label"), "tokens_per_s": float(tps[c["steps"]]),
                     "shift_ns": float(shift), "profiled_cycle_ns": float(c["cycle_ns"]),
                     "overhead_ns": float(c["overhead_ns"] - shift)})
    return out, rows


def held_overhead_note(held: dict) -> str:
    """The note of :func:`hold_overhead`'s record."""
    each = ", ".join(f"{k} steps {v / 1e3:,.1f} us" for k, v in sorted(held["profiles"].items()))
    return ("the profiles ran separately, each under its own profiler stretch (overhead a cycle: " + each + "): "
            "the overhead is not fitted across them but held at "
            + (f"the calibrated profile's ({held['overhead_ns'] / 1e3:,.1f} us before calibration)"
               if held["from"] == "calibrated" else
               f"the {held['steps']}-step profile's, the one the no-speculation step is estimated from "
               f"({held['overhead_ns'] / 1e3:,.1f} us)")
            + " at every step count; give --calibrate-tps K:X for each profiled step count (unprofiled tokens/s) "
            "to fit how the unprofiled overhead changes with the steps")


def hold_overhead(costs: list[dict], acceptance: acc_mod.Acceptance, calibrate, request_tokens) -> tuple[list, dict]:
    """Profiles of separate runs (:func:`separate_runs`) without a calibration for each: their overheads
    differ by the profiler's stretch of each run, not by the step count, so no line is fitted through them.
    The overhead is held at one value at every step count: the calibrated profile's (the calibration then
    puts it on the unprofiled clock), else that of the profile the no-speculation step is estimated from
    (:func:`baseline_profile`: both sides of the speed-up then carry one run's stretch). (the costs, a record)."""
    each = {int(c["steps"]): float(c["overhead_ns"]) for c in costs}
    at = [c for c in costs if calibrate is not None and c["steps"] == int(calibrate[0])]
    ref = at or [baseline_profile(costs)]
    held = float(np.average([c["overhead_ns"] for c in ref], weights=[c["cycles"] for c in ref]))
    out = [shift_overhead(c, c["overhead_ns"] - held) for c in costs]
    return out, {"overhead_ns": held, "from": "calibrated" if at else "baseline_profile",
                 "steps": int(ref[0]["steps"]), "profiles": each}


def predict(costs, acceptance: acc_mod.Acceptance, steps=range(1, 11),
            calibrate: tuple[int, float] | None = None, request_tokens: list[int] | None = None,
            round_gap_ns: float | None = None, gap_unprofiled: bool = False) -> pd.DataFrame:
    """Predicted cycle time, tokens per cycle and tokens/s per step count. ``calibrate=(k, X)``:
    shift every cycle's overhead so that tokens/s at k equals X (see :func:`calibration_shift`).
    ``request_tokens`` [N, ...]: tokens/s of rounds of requests of N tokens started together (the tail:
    :func:`round_efficiency`; ``round_gap_ns``, the time a round costs besides its cycles, spread over them:
    :func:`round_gap_share`, the column ``round_gap_ns``), else (None) of the steady state; ``gap_unprofiled``:
    that gap was measured without the profiler (the shim's clock), so a calibration does not rescale it."""
    costs = [costs] if isinstance(costs, dict) else list(costs)
    steps = list(steps)
    m = acceptance.requests
    out = cost_model(costs, steps, m)
    scale = 1.0
    if calibrate is not None:
        shift = calibration_shift(costs, acceptance, calibrate, request_tokens, round_gap_ns,
                                  scale_gap=not gap_unprofiled)
        out["overhead_ns"] -= shift
        out["cycle_ns"] -= shift
        if not gap_unprofiled:
            scale = gap_scale(costs, acceptance, calibrate[0], shift)
    out["accepted_per_request"] = [acceptance.expected_accepted(s) for s in steps]
    out["tokens_per_cycle"] = m * (1.0 + out["accepted_per_request"])
    out["round_efficiency"] = round_efficiency(acceptance, steps, request_tokens)
    gap = round_gap_share(acceptance, steps, request_tokens, round_gap_ns) * scale
    out["tokens_per_s"] = out["tokens_per_cycle"] * out["round_efficiency"] * 1e9 / (out["cycle_ns"] + gap)
    if gap.any():       # not a component of the cycle (not in its sum): the round's share a cycle, beside it
        out["round_gap_ns"] = gap
    ks = sorted({c["steps"] for c in costs})
    out["profiled"] = out["steps"].isin(ks)
    out["extrapolated"] = (out["steps"] > max(ks)) | ((out["steps"] < min(ks)) & (len(ks) > 1))
    return out


def plain_step(c: dict) -> dict | None:
    """A plain decode step (no speculation) estimated from one speculative profile's costs ``c``, or
    None without the shim's phase ranges. A plain step runs the target forward and the scheduler's
    work; SGLang overlaps the host work of one step with the GPU work of the previous (overlap
    scheduler), so the step takes the longer of the two:

    * GPU: the cycle's GPU work but the draft's and the draft extend's (verify, all-reduce, other),
      the verify's attention swapped for decode attention where the draft forwards show its cost
      (attention.py: the verify runs the backend's extend kernel, a plain step its decode kernel);
    * host: the cycle's host time outside the draft, verify and draft_extend ranges (the scheduler:
      batch building, result processing) plus the target forward's own host time, which is its graph
      replay (``graph_replay_verify``) with CUDA graphs, else the whole verify range (eager launches).
      The speculative verify's other host work (tree masks, accept bookkeeping) is left out, and so is
      the scheduler's wait for the GPU (``host_wait_ns``: its synchronize calls outside the phases, e.g.
      SGLang's one cudaEventSynchronize a cycle): waiting is not host work."""
    host_in = [c.get(k, np.nan) for k in ("draft_cpu_ns", "verify_cpu_ns", "draft_extend_cpu_ns")]
    if not all(np.isfinite(host_in)):
        return None
    replay = c.get("replay_verify_cpu_ns", np.nan)
    forward_host = replay if np.isfinite(replay) and replay > 0 else c["verify_cpu_ns"]
    wait = c.get("host_wait_ns", np.nan)
    wait = float(wait) if np.isfinite(wait) else 0.0
    host = max(c["cycle_ns"] - sum(host_in) - wait, 0.0) + forward_host
    gpu = sum(v for k, v in c.items() if k.endswith("_ns") and k[:-3] in c.get("phase_names", ())
              and k[:-3] not in NO_DRAFT_IN_BASELINE)
    swap, why_not = att_mod.plain_attention(c)
    if swap is not None:
        gpu = max(gpu - swap["verify_attention_ns"] + swap["plain_attention_ns"], 0.0)
    return {"gpu_ns": float(gpu), "host_ns": float(host), "host_wait_ns": wait, "forward_host": "graph_replay_verify" if
            np.isfinite(replay) and replay > 0 else "verify", "attention": swap, "attention_not_swapped": why_not}


def baseline_profile(costs: list[dict]) -> dict:
    """The profile a no-speculation step is estimated from: of the fewest steps whose draft forwards show
    decode attention, else of the fewest steps."""
    swappable = [x for x in costs if att_mod.plain_attention(x)[0] is not None]
    return min(swappable or costs, key=lambda x: x["steps"])


def estimated_baseline(costs, requests: float, host_scale: float = 1.0) -> dict:
    """No speculation, estimated from the speculative profile (:func:`plain_step`): the longer of the
    plain step's GPU and host time, the host time x ``host_scale`` (a calibration's unprofiled /
    profiled ratio: the profiler stretches host time, not kernels), from the profile of the fewest
    steps. Without the shim's ranges (a JSON result: no host time per range to split the cycle by):
    one cycle without the draft and draft_extend GPU time, all of it scaled where the calibration
    shrinks it (a ratio above 1 is not applied: there is no host part to stretch)."""
    costs = [costs] if isinstance(costs, dict) else list(costs)
    c = baseline_profile(costs)
    plain = plain_step(c)
    if plain is not None:
        host = plain["host_ns"] * host_scale
        t = max(plain["gpu_ns"], host)
        bound = "host" if host >= plain["gpu_ns"] else "GPU"
        a = plain["attention"]
        swapped = (f" (the verify's attention not swapped for decode attention: {plain['attention_not_swapped']})"
                   if a is None else
                   f", the verify's attention ({a['verify_attention_ns'] / 1e3:,.1f} us over {a['layers']:.0f} layers) "
                   f"as decode attention at the draft forwards' {a['decode_attention_per_layer_ns'] / 1e3:,.1f} us a layer")
        method = (f"a plain decode step estimated from the {c['steps']}-step profile: the longer of its GPU work "
                  f"without draft and draft_extend{swapped} ({plain['gpu_ns'] / 1e3:,.1f} us) and its host time (the scheduler's, "
                  f"outside the speculative ranges" + (f" less its wait for the GPU ({plain['host_wait_ns'] / 1e3:,.1f} us "
                  "in synchronize calls)" if plain["host_wait_ns"] > 0 else "")
                  + f", + the target forward's {plain['forward_host']} range: "
                  f"{plain['host_ns'] / 1e3:,.1f} us" + (f" x{host_scale:.3f} calibrated" if host_scale != 1.0 else "")
                  + f"); {bound} bound")
        return {"source": "estimated", "cycle_ns": t, "tokens_per_cycle": requests,
                "tokens_per_s": requests * 1e9 / t if t > 0 else np.nan, "method": method,
                "gpu_ns": plain["gpu_ns"], "host_ns": host}
    comps = [p for p in _components(costs) if p not in NO_DRAFT_IN_BASELINE]
    model = cost_model(costs, [0], requests).iloc[0]
    t = float(sum(model[f"{p}_ns"] for p in comps)) * (host_scale if host_scale < 1.0 else 1.0)
    method = ("one cycle of the profile without draft and draft_extend (" + " + ".join(comps)
              + "), verify as at M tokens, yielding M tokens" + (f", x{host_scale:.3f} calibrated" if host_scale < 1.0
                                                                  else ""))
    # no real sweep bounded this estimate's error (PROFILE_ALONE_RATIO is the shim-range estimate's): a JSON
    # result of sglang_v2_l64_s3 said 1.83x here where its report's estimate said 0.98x (the sweep: 1.10x)
    return {"source": "estimated", "cycle_ns": t, "tokens_per_cycle": requests,
            "tokens_per_s": requests * 1e9 / t if t > 0 else np.nan, "method": method, "rough": True}


def with_round_gap(base: dict, round_gap_ns: float | None, request_tokens) -> dict:
    """A no-speculation step of the profile (estimated, or a no-speculation profile's cycles) in rounds: the
    round's time besides its cycles (:func:`round_gap_share`) spread over its N cycles (one token a request a
    step), as the speculative predictions carry it. Unchanged in the steady state or without a gap."""
    ns = [int(n) for n in np.atleast_1d(request_tokens if request_tokens is not None else []) if int(n) >= 1]
    if not round_gap_ns or not np.isfinite(round_gap_ns) or not ns or not np.isfinite(base.get("tokens_per_s", np.nan)):
        return base
    share = float(round_gap_ns) / float(np.mean(ns))
    t = base["cycle_ns"] + share
    return dict(base, cycle_ns=t, tokens_per_s=base["tokens_per_cycle"] * 1e9 / t if t > 0 else np.nan,
                round_gap_ns=share, method=base["method"] + f"; + {share / 1e3:,.1f} us a step, the round's "
                f"{round_gap_ns / 1e6:,.1f} ms besides its cycles over its {np.mean(ns):,.0f} steps")


def scale_baseline(base: dict, ratio: float) -> dict:
    """A baseline measured or estimated under the profiler, put on the unprofiled clock of the
    calibration: its step time x ``ratio`` (unprofiled / profiled cycle at the calibrated step count)."""
    t = base["cycle_ns"] * ratio
    return dict(base, cycle_ns=t, tokens_per_s=base["tokens_per_cycle"] * 1e9 / t if t > 0 else np.nan,
                profiled_cycle_ns=base["cycle_ns"], scale=ratio,
                method=base["method"] + f"; scaled x{ratio:.3f} to the unprofiled clock of the calibration")


def baseline_clock(pred: pd.DataFrame, base: dict, est: dict) -> tuple[pd.DataFrame, dict]:
    """Predictions of the profiled clock put on the clock of a no-speculation figure measured without the profiler
    (``base``, given; ``est``: the plain step estimated from the profile, on the profiled clock): every predicted
    cycle x profiled / unprofiled plain step, the difference in its overhead (the profiler stretches host time), the
    tokens/s and their intervals / that ratio. The speed-up over ``base`` is then the profile's own over its
    estimated plain step: a ratio of two figures of one clock, as uncertain as that estimate
    (:data:`PROFILE_ALONE_RATIO`). Before (2026-12-07) the profiled predictions were set against the unprofiled
    figure as they were: on the committed real sweeps 0.39x to 1.28x of the measured speed-up, and four verdicts
    the wrong way round stated as sure; so 0.72x to 1.21x (a newcomer's run found it)."""
    q = float(base["tokens_per_s"]) / float(est["tokens_per_s"])
    if est.get("rough") or not (np.isfinite(q) and q > 0):
        # no estimate to carry the clock (none, or a JSON result's rough one: through it sglang_v2_l64_s3's 370 tokens/s
        # became 579 where 328 were measured): left on the profiled clock, the speed-up two clocks' and uncertain
        return pred, dict(base, clock={"estimated_tokens_per_s": float(est["tokens_per_s"]), "ratio": None,
                                       "estimated_method": est["method"], "rough": True})
    pred = pred.copy()
    cycle = pred["cycle_ns"] / q
    pred["overhead_ns"] = pred["overhead_ns"] + (cycle - pred["cycle_ns"])
    pred["cycle_ns"] = cycle
    for col in ("tokens_per_s", "tokens_per_s_lo", "tokens_per_s_hi"):
        if col in pred:
            pred[col] = pred[col] * q
    base = dict(base, clock={"estimated_tokens_per_s": float(est["tokens_per_s"]), "ratio": q,
                             "estimated_method": est["method"], "rough": bool(est.get("rough"))})
    return pred, base


def measured_baseline(side: Side, requests: float, keep_outliers: bool = False) -> dict:
    """Decode step time of a no-speculation report: its cycles when it has them, else the start-to-
    start interval of its outermost verify-phase ranges (the target forward, e.g. graph replays)."""
    side = as_side(side)
    if not side.cycles.empty:
        cyc = cycles_mod.steady(side.cycles, keep_outliers, every_rank=True)
        t = float(per_cycle(cyc, side.phase_names)[time_column(cyc)].mean())
        method = "mean decode cycle"
    else:
        r = side.ranges
        if r is None or r.empty or "phase" not in r.columns:
            raise ValueError(f"{side.label}: no decode steps found in the baseline (no cycles, no ranges)")
        rank = r["rank"][r["rank"] >= 0].min()
        v = r[(r["rank"] == rank) & (r["phase"] == "verify")]
        if "outermost" in v.columns:
            v = v[v["outermost"].astype(bool)]
        starts = np.sort(v["start_ns"].to_numpy(dtype="int64"))
        if len(starts) < 3:
            raise ValueError(f"{side.label}: fewer than 3 decode steps (verify-phase ranges) in the baseline")
        gaps = np.diff(starts).astype("float64")
        gaps = gaps if keep_outliers else gaps[gaps <= cycles_mod.OUTLIER_FACTOR * np.median(gaps)]
        t = float(gaps.mean())
        method = f"start-to-start interval of {len(starts)} '{v['name'].mode().iloc[0]}' ranges"
    return {"source": "measured", "label": side.label, "cycle_ns": t, "tokens_per_cycle": requests,
            "tokens_per_s": requests * 1e9 / t, "method": method}


def _resample(samples: pd.DataFrame, rng) -> pd.DataFrame:
    """A bootstrap resample of the cycles; a sampled live log's timed and untimed cycles are resampled
    apart (as many of each as there are), so that no resample is without phase times."""
    timed = timed_samples(samples)
    if timed.all() or not timed.any():
        return samples.iloc[rng.integers(0, len(samples), len(samples))].reset_index(drop=True)
    t, u = np.flatnonzero(timed), np.flatnonzero(~timed)
    pick = np.concatenate([t[rng.integers(0, len(t), len(t))], u[rng.integers(0, len(u), len(u))]])
    return samples.iloc[pick].reset_index(drop=True)


def at_batch(acc: acc_mod.Acceptance, costs: list[dict], batch: int | None) -> acc_mod.Acceptance:
    """The acceptance at ``batch`` requests a cycle where some profile's came from all its batch sizes
    (:func:`pooled_acceptance`): the rates are the pool's, the batch is the one asked."""
    if batch is None or not any("acc_samples" in c for c in costs):
        return acc
    return dataclasses.replace(acc, requests=float(batch))


def _acc_profiles(costs: list[dict], samples_list) -> list:
    out = []
    for c, s in zip(costs, samples_list):
        s = s[s["accepted"].notna()]
        lens = s["lens"].to_numpy(dtype=object) if "lens" in s.columns else np.full(len(s), None, dtype=object)
        out.append((c["steps"], pd.DataFrame({"accepted": s["accepted"].astype("int64").to_numpy(),
                                              "requests": s["requests"].fillna(1).astype("int64").to_numpy(),
                                              "lens": pd.Series(lens, dtype=object)})))
    return out


def whatif(profiles, steps=range(1, 11), *, baseline=None, profiled_steps=None, extrapolation: str = "repeat",
           n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL, keep_outliers: bool = False,
           measured: dict | None = None, calibrate_tps: float | None = None, calibrate_steps: int | None = None,
           baseline_tps: float | None = None, measured_baseline_tps: float | None = None,
           verify_scaling=None, batch: int | None = None, memo: dict | None = None,
           calibration_source: dict | None = None, request_tokens="auto", progress: bool = False) -> dict:
    """The whole prediction: ``profiles`` (Analysis / JSON result / path, one or several step counts),
    ``profiled_steps`` (int or list, else inferred), ``baseline`` (a no-speculation measurement),
    ``measured`` ({steps: tokens/s} measured without the profiler, shown next to the prediction).

    ``calibrate_tps``: the user's own tokens/s of the profiled configuration measured WITHOUT the
    profiler (``calibrate_steps``: its step count; default the profiled one); every predicted cycle's
    overhead is shifted by the same amount so that the model reproduces it (profiler overhead taken
    as host/idle time, not kernel time). ``baseline_tps``: the no-speculation tokens/s measured
    without the profiler (instead of ``baseline``). ``measured_baseline_tps``: only shown/plotted.
    ``calibration_source``: where ``calibrate_tps`` came from (e.g. ``{"kind": "live_log", "path": ...,
    "cycles": N, "rank": R}``: whatif's --calibrate-live), kept in ``result["calibration"]["source"]``.

    ``verify_scaling`` (one profile only): None = fit verify, draft_extend and allreduce in the
    verified tokens over the cycles when their batch sizes differ, else keep them constant and say
    so; ``"constant"``; or F in [0, 1], the fraction of verify time proportional to the verified
    tokens (:func:`token_fit`).

    ``request_tokens``: ``"auto"`` = rounds of the length the profile's lockstep rounds show at
    ``batch`` (rounds.py; none seen: the steady state), ``None``/0 = the steady state (a server under
    continuous load), N = rounds of requests of N new tokens started together."""
    profiles = [profiles] if not isinstance(profiles, (list, tuple)) else list(profiles)
    if profiled_steps is None or isinstance(profiled_steps, int):
        profiled_steps = [profiled_steps] * len(profiles)
    verify_scaling = check_verify_scaling(verify_scaling)
    costs = [step_costs(p, k, keep_outliers=keep_outliers, verify_scaling=verify_scaling, batch=batch,
                        memo=memo if len(profiles) == 1 else None)
             for p, k in zip(profiles, profiled_steps)]
    if verify_scaling is not None and len({c["steps"] for c in costs}) > 1:
        raise ValueError("--verify-scaling: profiles of several step counts fit verify in the verified tokens "
                         "themselves; give it with one profile only")
    steps = sorted(set(int(s) for s in steps))
    samples = [c["samples"] for c in costs]
    acc_samples = [c.get("acc_samples", c["samples"]) for c in costs]
    acc = at_batch(acc_mod.estimate(_acc_profiles(costs, acc_samples), extrapolation=extrapolation, n_boot=n_boot,
                                    seed=seed), costs, batch)
    calibrate = None
    ks = sorted({c["steps"] for c in costs})
    tps_each = per_profile = None          # {k: X}, a figure for each profiled step count; its records
    if isinstance(calibrate_tps, dict):
        if len(calibrate_tps) == 1:
            (calibrate_steps, calibrate_tps), = calibrate_tps.items()
        else:
            tps_each = {int(k): float(v) for k, v in calibrate_tps.items()}
            calibrate_tps = None
    for i, c in enumerate(costs):          # a loaded analysis or a dict has no label: each its own run
        if not c.get("run"):
            c["run"] = f"#{i}"
    separate = separate_runs(costs)
    if tps_each is not None:
        missing = sorted(set(ks) - set(tps_each))
        unknown = sorted(set(tps_each) - set(ks))
        if missing or unknown:
            raise UsageError("--calibrate-tps given several times: one K:X for each profiled step count "
                             f"{ks}" + (f" (none for {missing})" if missing else "")
                             + (f" ({unknown} not profiled)" if unknown else "")
                             + ", or once (K:X) to calibrate at one step count")
    if calibrate_tps is not None:
        if calibrate_steps is None:
            if len(ks) != 1:
                raise UsageError(f"--calibrate-tps: profiles of several step counts {ks}: say which one was "
                                 f"measured (K:X, e.g. {ks[0]}:{float(calibrate_tps):g}), or give K:X once for each")
            calibrate_steps = ks[0]
        steady = bool(calibration_source) and calibration_source.get("kind") in STEADY_SOURCES
        calibrate = (int(calibrate_steps), float(calibrate_tps), steady)
    round_info = resolve_rounds(costs, request_tokens)
    n_req = round_info["request_tokens"] if round_info else None
    gap_ns = round_info.get("round_gap_ns") if round_info else None
    gap_unprofiled = False
    clock_gap = (calibration_source or {}).get("round_gap_ns") if calibrate is not None and calibrate[2] else None
    if gap_ns and clock_gap:
        # the profile's rounds have a gap and its clock measured one without the profiler: that one, as it is
        round_info = dict(round_info, round_gap_ns=float(clock_gap), round_gap_profiled_ns=gap_ns,
                          round_gap_source="profile_clock")
        gap_ns, gap_unprofiled = float(clock_gap), True
    overhead_held, profiled_costs = None, costs
    if tps_each is not None:
        # each profile on its own unprofiled clock: the overhead line is then fitted over unprofiled overheads
        # (a host-bound cycle hides part of an added step's GPU work: its overhead falls as the GPU work grows)
        costs, per_profile = calibrate_each(costs, acc, tps_each, n_req, gap_ns)
    elif separate:
        costs, overhead_held = hold_overhead(costs, acc, calibrate, n_req)
    pred = predict(costs, acc, steps, calibrate, n_req, gap_ns, gap_unprofiled)
    # joint bootstrap: cycles resampled per profile, costs and acceptance refit together
    rng = np.random.default_rng(seed)
    boot, boot_slopes = [], []
    from analyze.run.progress import progress as progress_bar

    for _ in progress_bar(range(n_boot), progress, total=n_boot, desc="whatif bootstrap", unit="resample"):
        bs = [_resample(s, rng) for s in samples]
        bsa = [_resample(a, rng) if "acc_samples" in c else b for a, b, c in zip(acc_samples, bs, costs)]
        bc = [apply_batch_fit(dict(c, **costs_from_samples(s, c["steps"], c["phase_names"], c.get("verify_scaling"),
                                                           c.get("sglang_loop", False))), c.get("batch_fit"))
              for c, s in zip(costs, bs)]
        if tps_each is None:               # held: the point estimate's shift (calibrate, if any, follows)
            bc = [shift_overhead(b, c.get("overhead_shift_ns", 0.0)) for b, c in zip(bc, costs)]
        try:
            ba = at_batch(acc_mod.estimate(_acc_profiles(bc, bsa), extrapolation=extrapolation, n_boot=0), costs, batch)
        except ValueError:
            continue
        if tps_each is not None:           # each resample on each run's unprofiled clock, as the estimate
            bc = calibrate_each(bc, ba, tps_each, n_req, gap_ns)[0]
        boot.append(predict(bc, ba, steps, calibrate, n_req, gap_ns, gap_unprofiled)["tokens_per_s"].to_numpy())
        boot_slopes.append({k: v["per_token_ns"] for k, v in (bc[0].get("token_fit") or {}).items()})
    if boot:
        q = np.nanpercentile(np.array(boot), [50 * (1 - level), 50 * (1 + level)], axis=0)
        pred["tokens_per_s_lo"], pred["tokens_per_s_hi"] = q[0], q[1]
    else:
        pred["tokens_per_s_lo"] = pred["tokens_per_s_hi"] = pred["tokens_per_s"]
    scaling = scaling_summary(costs, boot_slopes, level, verify_scaling)
    if scaling.get("method") == "fit" and scaling.get("tokens_max") is not None:
        # lines fitted over the profile's token counts: a prediction beyond them extrapolates the line
        n_pred = acc.requests * (pred["steps"] + 1)
        pred["tokens_extrapolated"] = (n_pred > scaling["tokens_max"] + 1e-9) | (n_pred < scaling["tokens_min"] - 1e-9)
    m = acc.requests
    # the calibrated step count's profiled cycle and the shift the calibration takes off it (once)
    cal_row = cost_model(costs, [calibrate[0]], m).iloc[0] if calibrate is not None else None
    shift = (calibration_shift(costs, acc, calibrate, n_req, gap_ns, scale_gap=not gap_unprofiled)
             if calibrate is not None else 0.0)
    k_base = int(baseline_profile(profiled_costs)["steps"])     # the profile a plain step is estimated from
    if per_profile is not None:
        first = next(x for x in per_profile if x["steps"] == k_base)
    if baseline_tps is not None:
        base = {"source": "given", "cycle_ns": m * 1e9 / float(baseline_tps), "tokens_per_cycle": m,
                "tokens_per_s": float(baseline_tps), "method": "no-speculation tokens/s measured without the profiler"}
    else:
        ratio = 1.0
        if per_profile is not None:
            t_prof, t_cal = first["profiled_cycle_ns"], first["profiled_cycle_ns"] - first["shift_ns"]
            ratio = t_cal / t_prof if t_prof > 0 and t_cal > 0 else 1.0
        elif calibrate is not None and overhead_held is not None and k_base != int(calibrate[0]):
            # separate runs, another one calibrated: the baseline's run on the calibrated clock is its GPU work
            # plus the held (calibrated) overhead, the model's cycle at its step count
            t_prof = float(next(c for c in profiled_costs if c["steps"] == k_base)["cycle_ns"])
            t_cal = float(cost_model(costs, [k_base], m)["cycle_ns"].iloc[0]) - shift
            ratio = t_cal / t_prof if t_prof > 0 and t_cal > 0 else 1.0
        elif calibrate is not None:
            # the profiler stretched the baseline's host time too: put it on the calibrated clock
            t_prof = float(cal_row["cycle_ns"])
            t_cal = t_prof - shift
            ratio = t_cal / t_prof if t_prof > 0 and t_cal > 0 else 1.0
        if baseline is not None:
            base = measured_baseline(baseline, m, keep_outliers)
            if ratio != 1.0:
                base = scale_baseline(base, ratio)
        else:
            base = estimated_baseline(profiled_costs, m, ratio)
        base = with_round_gap(base, gap_ns * ratio if gap_ns and not gap_unprofiled else gap_ns, n_req)
    on_profiled_clock = (calibrate is None and per_profile is None and not all(c.get("live") for c in costs))
    if baseline_tps is not None and on_profiled_clock:
        # a figure measured without the profiler against predictions of the profiled clock: the speed-up is taken
        # against the profile's own plain step (same clock), the predictions put on the given figure's clock
        est = with_round_gap(estimated_baseline(profiled_costs, m), gap_ns, n_req)
        pred, base = baseline_clock(pred, base, est)
    pred["speedup"] = pred["tokens_per_s"] / base["tokens_per_s"]
    if measured:
        pred["measured_tokens_per_s"] = pred["steps"].map({int(k): float(v) for k, v in measured.items()})
        pred["error_pct"] = 100 * (pred["tokens_per_s"] / pred["measured_tokens_per_s"] - 1)
    best = pred.loc[best_row(pred)]
    # the highest prediction (the best is the fewest steps within BEST_TOLERANCE of it): whether speculation pays is
    # its word, "does not pay" meaning no step count searched is faster, "break-even" none more than 3% away
    top = pred.loc[pred["tokens_per_s"].idxmax()] if np.isfinite(pred["tokens_per_s"].to_numpy(dtype="float64")).any() \
        else best
    n_cycles = int(sum(c["cycles"] for c in costs))
    live_baseline = base["source"] == "estimated" and all(c.get("live") for c in costs)
    # a verdict against an estimate no real sweep has bounded: a JSON result's (no shim ranges: one cycle without the
    # draft phases), or none at all (a given baseline whose clock no estimate carries)
    rough = bool(base.get("rough") if base["source"] == "estimated" else (base.get("clock") or {}).get("rough"))
    result = {
        "profiles": [{k: v for k, v in c.items() if k not in ("samples", "acc_samples", "profile_notes")} for c in profiled_costs],
        "acceptance": acc.table(max(steps)),
        "predictions": pred,
        "baseline": base,
        "best": {"steps": int(best["steps"]), "tokens_per_s": float(best["tokens_per_s"]),
                 "speedup": float(best["speedup"]), "extrapolated": bool(best["extrapolated"]),
                 "baseline_source": base["source"],
                 "verdict_uncertain": verdict_uncertain(float(best["speedup"]),
                                                        "estimated" if base.get("clock") else base["source"],
                                                        unbounded=live_baseline or rough),
                 "rough_estimate": rough,
                 "top_steps": int(top["steps"]), "top_speedup": float(top["speedup"]),
                 "speedup_through_estimate": bool(base.get("clock")) and base["clock"]["ratio"] is not None,
                 "baseline_from_live_log": live_baseline,
                 "cycles": n_cycles, "few_cycles": n_cycles < MIN_CYCLES},
        "notes": list(acc.notes) + [n for c in costs for n in c.get("profile_notes", [])],
        "acceptance_method": acc.method,
        "calibration": None,
        "measured_baseline_tps": measured_baseline_tps,
        "verify_scaling": scaling,
        "rounds": round_info,
        "n_boot": int(n_boot),            # 0: point estimates (the intervals' bounds equal them)
    }
    result["best"]["verdict"] = verdict(result["best"]["top_speedup"], result["best"]["verdict_uncertain"])
    if scaling["method"] == "cannot_tell":
        result["notes"].append(scaling["message"])
    if overhead_held is not None:
        result["overhead_held"] = overhead_held
        result["notes"].append(held_overhead_note(overhead_held))
    if per_profile is not None:
        result["calibration"] = dict(first, source=calibration_source or {"kind": "given"}, steady=False,
                                     per_profile=per_profile)
        if any(x["overhead_ns"] < 0 for x in per_profile):
            result["notes"].append("calibration leaves a NEGATIVE overhead in a profile: its unprofiled cycle is "
                                   "shorter than its profiled GPU time, so the profiler slowed the kernels too")
    elif calibrate is not None:
        result["calibration"] = {"steps": calibrate[0], "tokens_per_s": calibrate[1], "shift_ns": shift,
                                 "profiled_cycle_ns": float(cal_row["cycle_ns"]),
                                 "overhead_ns": float(cal_row["overhead_ns"]) - shift,
                                 "source": calibration_source or {"kind": "given"},
                                 # X of steady cycles (a live log): the prediction at K is X x the rounds' tail
                                 "steady": bool(calibrate[2])}
        if float(cal_row["overhead_ns"]) - shift < 0:
            result["notes"].append("calibration leaves a NEGATIVE overhead: the unprofiled cycle is shorter than the "
                                   "profiled GPU time, so the profiler slowed the kernels too; the shift is not "
                                   "only host time")
    clock = base.get("clock")
    if clock is not None and clock["ratio"] is not None:
        if (pred["overhead_ns"] < 0).any():
            result["notes"].append(f"the given baseline's clock leaves a NEGATIVE overhead (cycles x{1 / clock['ratio']:.3f}): "
                                   f"the given {base['tokens_per_s']:,.0f} tokens/s is faster than the profile's own GPU "
                                   "work allows at its estimated plain step; is it of this configuration and batch size?")
        note = lengthened_note(1e9 / clock["estimated_tokens_per_s"], 1e9 / base["tokens_per_s"], 0,
                               what="the given baseline's plain step")
        if note:
            result["notes"].append(note)
    cal_rows = (per_profile if per_profile is not None else
                [result["calibration"]] if result["calibration"] is not None else [])
    for x in cal_rows:
        note = lengthened_note(x["profiled_cycle_ns"], x["profiled_cycle_ns"] - x["shift_ns"], x["steps"])
        if note:
            result["notes"].append(note)
    result["assumptions"] = assumptions(profiled_costs, acc, base, extrapolation, result["calibration"],
                                        profiled_baseline=baseline is not None and baseline_tps is None,
                                        scaling=scaling, intervals=n_boot > 0,
                                        live=all(c.get("live") for c in costs), rounds=round_info)
    return result


CALIBRATION_LENGTHENS_MAX = 1.35
"""A calibration that makes the profiled cycle longer than this many times itself is said to be suspect: a profiler
does not speed a run up, and engines of one configuration on one machine differed by up to 27% (docs/whatif.md: the
three 3-step engines of ``sglang_sweep_h100_v2_l64``). A newcomer calibrated a profile with a live log of another
run that had been recorded beside nsys: 5,454 -> 9,786 us a cycle (x1.79), a false "does not pay"."""


def lengthened_note(profiled_ns: float, calibrated_ns: float, steps: int, what: str | None = None) -> str | None:
    """The note for a calibration that lengthens the profiled cycle past :data:`CALIBRATION_LENGTHENS_MAX`, else None
    (``what``: another figure than a calibration's, e.g. a given baseline against the profile's plain step: times of
    a token there)."""
    if not (profiled_ns > 0 and calibrated_ns > CALIBRATION_LENGTHENS_MAX * profiled_ns):
        return None
    head = (f"calibration LENGTHENED the profiled cycle at {steps} steps x{calibrated_ns / profiled_ns:.2f} "
            f"({profiled_ns / 1e3:,.1f} us -> {calibrated_ns / 1e3:,.1f} us)" if what is None else
            f"{what} is LONGER than the profile's estimate x{calibrated_ns / profiled_ns:.2f} (every cycle scaled so)")
    return (head + ": a profiler does not speed a run up, and "
            "engines of one configuration on one machine differed by up to 27%; the unprofiled figure may be of "
            "another configuration, machine or batch size, or of a run that was itself profiled: check it before "
            "deciding on it")


def best_row(pred: pd.DataFrame, tolerance: float = BEST_TOLERANCE):
    """The index of the recommended step count: the fewest steps whose predicted tokens/s is within
    ``tolerance`` of the highest (:data:`BEST_TOLERANCE`)."""
    tps = pred["tokens_per_s"].to_numpy(dtype="float64")
    if not np.isfinite(tps).any():
        return pred.index[0]
    top = np.nanmax(tps)
    near = pred[np.nan_to_num(tps, nan=-np.inf) >= (1.0 - tolerance) * top]
    return near["steps"].idxmin()


def resolve_rounds(costs: list[dict], request_tokens="auto") -> dict | None:
    """What the prediction's tokens/s is of: None (the steady state) or {request_tokens, source, ...}
    (rounds of requests of that many tokens started together; source "profile": the lockstep rounds
    of the first profile that has them, "given")."""
    if request_tokens is None or request_tokens == 0 or request_tokens == "steady":
        return None
    if request_tokens != "auto":
        n = int(request_tokens)
        if n < 1:
            raise UsageError(f"--request-tokens: {request_tokens}: give a number of tokens >= 1, or 'steady'")
        return {"request_tokens": [n], "source": "given"}
    for c in costs:
        if c.get("rounds"):
            return dict(c["rounds"], source="profile")
    return None


def verdict(speedup: float, uncertain: bool) -> str:
    """Whether speculation pays, from the highest predicted speed-up: ``"uncertain"`` (inside an estimated
    baseline's error, :func:`verdict_uncertain`), ``"break_even"`` (within :data:`BREAK_EVEN` of no speculation),
    ``"pays"`` or ``"does_not_pay"``."""
    if uncertain:
        return "uncertain"
    if not np.isfinite(speedup):
        return "uncertain"
    if abs(speedup - 1.0) < BREAK_EVEN:
        return "break_even"
    return "pays" if speedup > 1.0 else "does_not_pay"


def verdict_uncertain(speedup: float, baseline_source: str, unbounded: bool = False) -> bool:
    """Whether "speculation pays" (speed-up > 1) could flip within the error an estimated baseline showed
    on real sweeps (:data:`PROFILE_ALONE_RATIO`): an estimated baseline and a speed-up S with
    S / hi < 1 < S / lo, calibrated or not (the calibration puts the profiled step count on the
    unprofiled clock, not the plain step the baseline estimates). ``unbounded``: an estimate no real sweep
    bounds the error of (a live log's, :data:`LIVE_BASELINE_ERROR`; a rough one without shim ranges, or none to
    carry a given baseline's clock): uncertain at any S."""
    lo, hi = PROFILE_ALONE_RATIO
    if baseline_source == "estimated" and unbounded:
        return True
    return baseline_source == "estimated" and lo < speedup < hi


def check_verify_scaling(value):
    """None, ``"constant"`` or a fraction in [0, 1] (``--verify-scaling``)."""
    if value is None or value == "constant":
        return value
    if isinstance(value, str) and value.strip().lower() in ("fit", "auto"):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"--verify-scaling {value!r}: give a fraction F in [0, 1] (share of verify time "
                         "proportional to the verified tokens), 'constant' or 'fit'") from None
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"--verify-scaling {value!r}: F must be in [0, 1]")
    return f


def scaling_summary(costs: list[dict], boot_slopes: list[dict], level: float, verify_scaling) -> dict:
    """How the token-dependent components were modelled, as data (method, per component: the line
    and the bootstrap interval of its slope; the verified-token range observed)."""
    ks = sorted({c["steps"] for c in costs})
    if len(ks) > 1:
        return {"method": "profiles", "steps": ks, "components": {}, "tokens_min": None, "tokens_max": None}
    c = costs[0]
    batch = c.get("batch") or {}
    fit = c.get("token_fit") or {}
    comps = {}
    for name, line in fit.items():
        vals = np.array([b[name] for b in boot_slopes if name in b], dtype="float64")
        lo, hi = (np.nanpercentile(vals, [50 * (1 - level), 50 * (1 + level)]).tolist() if len(vals)
                  else (line["per_token_ns"], line["per_token_ns"]))
        comps[name] = {**line, "per_token_lo_ns": float(lo), "per_token_hi_ns": float(hi)}
    out = {"steps": ks, "components": comps, "tokens_min": batch.get("tokens_min"),
           "tokens_max": batch.get("tokens_max"), "tokens_cv": batch.get("tokens_cv"),
           "batch_sizes": batch.get("batch_sizes")}
    if verify_scaling == "constant":
        return {**out, "method": "constant"}
    if verify_scaling is not None:
        return {**out, "method": "given", "fraction": float(verify_scaling)}
    if fit and all(line.get("source") == "batches" for line in fit.values()):
        return {**out, "method": "batches", "batch_fit": c.get("batch_fit")}
    if fit:
        return {**out, "method": "fit"}
    what = ("has no per-cycle request counts (no accept marks)" if not batch.get("cycles") else
            f"verifies nearly the same number of tokens in every cycle ({batch.get('batch_sizes')} batch size(s), "
            f"{batch.get('tokens_min', 0):.0f} to {batch.get('tokens_max', 0):.0f} tokens)")
    return {**out, "method": "cannot_tell",
            "message": f"one profile cannot tell how verify time grows with the verified tokens: its batch {what}; "
                       "verify, draft_extend and allreduce are kept at their measured time (right for a memory-bound "
                       "dense target; where verify grows with the tokens, as on a large MoE target, this picks too "
                       "many steps). Give a second "
                       "profile at another step count, or --verify-scaling F (the fraction of verify time "
                       "proportional to the verified tokens)"}


def _scaling_lines(c: dict, scaling: dict | None, intervals: bool = True) -> list[str]:
    """The one-profile assumption about verify (and draft_extend, allreduce) vs verified tokens
    (``intervals``: the slopes' bootstrap intervals exist, i.e. resamples were drawn)."""
    method = (scaling or {}).get("method")
    comps = (scaling or {}).get("components") or {}
    if method == "fit":
        parts = []
        for name, line in comps.items():
            ci = (f" [{line['per_token_lo_ns'] / 1e3:,.2f}, {line['per_token_hi_ns'] / 1e3:,.2f}]"
                  if intervals else "")
            parts.append(f"{name} {line['intercept_ns'] / 1e3:,.1f} us + {line['per_token_ns'] / 1e3:,.2f} us{ci} "
                         "per token")
        return [f"the profile's cycles verify {scaling['tokens_min']:.0f} to {scaling['tokens_max']:.0f} tokens "
                f"({scaling['batch_sizes']} batch sizes): each token-dependent component is a least-squares line in "
                "the verified tokens n = M(s+1) over the cycles" + (" (95% CI of the slope): " if intervals else ": ")
                + "; ".join(parts),
                "the other phases keep their measured time per cycle (they follow the batch's requests, which do "
                "not change with the step count)"]
    if method == "batches":
        line = comps.get("verify") or {"intercept_ns": 0.0, "per_token_ns": 0.0}
        bf = scaling.get("batch_fit") or {}
        pts = ", ".join(f"{p['batch']}: {p['rest_ns'] / 1e3:,.1f} us at {p['tokens']:.0f} tokens"
                        for p in bf.get("points", []))
        how = (f"fitted {bf['fitted_per_token_ns'] / 1e3:,.2f} us per token, refused (more tokens never take less "
               "time): 0" if bf.get("refused") else f"{line['per_token_ns'] / 1e3:,.2f} us per verified token")
        return [f"verify's non-attention time (GEMMs, norms, LM head: work over the batch x (s + 1) verified tokens) "
                f"grows {how}, a least-squares line over the profile's batch sizes ({pts}); its attention (the "
                "context each request reads) keeps its measured time; draft_extend, allreduce and the other phases "
                "keep theirs"]
    if method == "given":
        line = comps.get("verify") or {"intercept_ns": 0.0, "per_token_ns": 0.0}
        return [f"given (--verify-scaling {scaling['fraction']:g}): {100 * scaling['fraction']:.0f}% of verify's "
                f"measured time grows in proportion to the verified tokens: verify = {line['intercept_ns'] / 1e3:,.1f} "
                f"us + {line['per_token_ns'] / 1e3:,.2f} us per token; draft_extend, allreduce and the other phases "
                "keep their measured time per cycle"]
    why = ("(--verify-scaling constant)" if method == "constant" else
           "(one profile of a constant batch cannot tell; see the note)" if method == "cannot_tell" else "")
    return ["verify, draft_extend, allreduce and the other phases keep their measured time per cycle at any "
            "step count (small decode batches are memory bound: time independent of the "
            f"{c['verified_tokens']:.0f} verified tokens)" + (f" {why}" if why else "")]


def launch_excess_text(costs: list[dict]) -> str:
    """What the profiler added to the host's time, where the profile's graph launches say it (its mean
    ``launch_excess_ns`` a cycle over 10 us): a clause for the uncalibrated note, else ""."""
    parts = [(c["steps"], c["launch_excess_ns"], c["cycle_ns"]) for c in costs
             if np.isfinite(c.get("launch_excess_ns", np.nan)) and c["launch_excess_ns"] > 10_000
             and np.isfinite(c.get("cycle_ns", np.nan)) and c["cycle_ns"] > 0]
    if not parts:
        return ""
    said = "; ".join(f"{x / 1e3:,.1f} us a cycle at {k} steps ({100 * x / t:.0f}% of its {t / 1e3:,.1f} us cycle)"
                     for k, x, t in parts)
    return ("; the profile's CUDA graph launches took " + said + " longer than its fastest launch: mostly the "
            "profiler's (nsys' node-level graph tracing slows each launch; a launch can also block while the GPU's "
            "queue is full). Where the host sets the cycle, the profiled cycle is about that much too long or more "
            "(the code between the calls slows too); where the GPU sets it, the host's stretch is hidden")


def assumptions(costs: list[dict], acc: acc_mod.Acceptance, base: dict, extrapolation: str,
                calibration: dict | None = None, profiled_baseline: bool = False,
                scaling: dict | None = None, intervals: bool = True, live: bool = False,
                rounds: dict | None = None) -> list[str]:
    ks = sorted({c["steps"] for c in costs})
    out = []
    for c in costs:
        out.append(f"profile {c.get('label') or ''}: {c['steps']} draft steps ({c.get('steps_source', 'given')}), "
                   f"{c['cycles']} cycles"
                   + (f" ({left_out_text(c['left_out_cycles'])} left out)" if c.get("left_out_cycles") else ""))
    if len(ks) == 1:
        c = costs[0]
        if c.get("sglang_loop"):
            out.append(f"SGLang's loop: s steps run s - 1 draft forwards in one CUDA-graph replay (none at 1 step), the "
                       f"first draft token comes from the draft extend; one draft forward costs "
                       f"{c['draft_step_ns'] / 1e3:.1f} us ({c['draft_step_source']}); the host work around the "
                       "draft (the replay's preparation and launch; at 1 step SGLang's eager draft_forward) stays in "
                       "the overhead at every step count")
        else:
            out.append(f"one draft step costs {c['draft_step_ns'] / 1e3:.1f} us ({c['draft_step_source']}); "
                       "draft time is linear in the step count")
        out += _scaling_lines(c, scaling, intervals)
    else:
        out.append(f"draft time linear in the step count, every other component linear in the verified tokens "
                   f"M(s+1) (least squares over the profiled step counts {ks})")
    per_profile = (calibration or {}).get("per_profile")
    held = len(ks) > 1 and separate_runs(costs) and not per_profile
    if base.get("clock") and base["clock"]["ratio"] is not None:
        out.append("the overhead figures below are of the profiled clock; the table's are scaled to the given "
                   "baseline's (NOT calibrated, below)")
    out.append("overhead (cycle wall time minus GPU time of all phases: other kernels, GPU idle, host time) "
               + ("is constant" if len(ks) == 1 or held else
                  "is linear in the verified tokens" + (", fitted over each profile's unprofiled overhead (a "
                                                        "host-bound cycle hides part of a step's GPU work)"
                                                        if per_profile else "")))
    out.append(f"M = {acc.requests:.2f} requests per cycle at every step count; each yields min(L, s) accepted "
               "draft tokens + 1")
    out.append("acceptance: " + acc_mod.METHOD_TEXT.get(acc.method, acc.method))
    out.append(rounds_text(rounds))
    out += [t for t in (ctx_mod.trend_text(c.get("context_trend")) for c in costs) if t]
    if per_profile:
        out.append("calibrated each profile: " + "; ".join(
            f"{x['steps']} steps at {x['tokens_per_s']:,.0f} tokens/s WITHOUT the profiler, its cycle "
            f"{x['profiled_cycle_ns'] / 1e3:,.1f} -> {(x['profiled_cycle_ns'] - x['shift_ns']) / 1e3:,.1f} us (overhead "
            f"{x['overhead_ns'] / 1e3:,.1f} us)" for x in per_profile)
                   + ": each run's profiler cost is taken as host/idle time; kernel times are taken as unaffected")
    elif calibration is not None:
        c = calibration
        way = "shorter" if c["shift_ns"] >= 0 else "longer"
        out.append(f"calibrated: the profiled configuration at {c['steps']} steps runs at {c['tokens_per_s']:,.0f} "
                   f"tokens/s WITHOUT the profiler ({calibration_source_text(c.get('source'))}); every predicted cycle is "
                   f"{abs(c['shift_ns']) / 1e3:,.1f} us {way} (overhead {c['overhead_ns'] / 1e3:,.1f} us instead of "
                   f"{(c['overhead_ns'] + c['shift_ns']) / 1e3:,.1f}): the profiler's cost is taken as host/idle "
                   "time, the same in every cycle; kernel times are taken as unaffected")
    elif live:
        out.append("no calibration needed: a live timing log was measured without a profiler (its cycle periods "
                   "are the unprofiled host clock)")
    else:
        if base.get("clock") and base["clock"]["ratio"] is None:
            out.append("NOT calibrated, and the given baseline cannot be set against the profile (no estimate of its "
                       "plain step, or a rough one: a result without the shim's ranges): the predictions are of the "
                       "profiled timing and the speed-up sets two clocks against each other, an uncertain verdict; give "
                       "--calibrate-tps X (your unprofiled tokens/s at the profiled step count)" + launch_excess_text(costs))
        elif base.get("clock"):
            clock = base["clock"]
            out.append(f"NOT calibrated at a speculative step count: the predictions are of the profiled timing put on the "
                       f"given baseline's clock, every cycle x{1 / clock['ratio']:.3f} (the profile's estimated plain step, "
                       f"{clock['estimated_tokens_per_s']:,.0f} tokens/s, against the given {base['tokens_per_s']:,.0f}; "
                       "the difference in the overhead); the speed-up is the profile's own over its estimated plain step, "
                       "as uncertain as that estimate; give --calibrate-tps X (your unprofiled tokens/s at the profiled "
                       "step count) or --calibrate-live LOGDIR for a speculative cycle of the unprofiled clock"
                       + launch_excess_text(costs))
        else:
            out.append("NOT calibrated: predictions are of the profiled timing (profiler overhead included); give "
                       "--calibrate-tps X (your unprofiled tokens/s at the profiled step count) or --calibrate-live "
                       "LOGDIR (a live timing log of the same configuration) to remove it" + launch_excess_text(costs))
    K = acc.profiled_steps
    rule = ("the last estimated rate repeats" if extrapolation == "repeat"
            else "the rates continue the least-squares line through the estimated ones")
    out.append(f"acceptance at draft positions 1..{K} is estimated (conditional rates); beyond position {K} it is "
               f"unobserved (capped at {K}) and extrapolated: {rule}; rows marked 'extrapolated'")
    if base["source"] == "estimated":
        out.append("baseline ESTIMATED (no --baseline report): " + base["method"])
    elif base["source"] == "given":
        out.append(f"baseline given: {base['tokens_per_s']:,.0f} tokens/s, {base['method']}")
    else:
        out.append(f"baseline measured: {base['method']} of {base.get('label', '')}; M tokens per decode step"
                   + ("; it was profiled, so speed-ups against it include the profiler's overhead on the "
                      "baseline side (give --baseline-tps for an unprofiled one)" if calibration is not None
                      and profiled_baseline else ""))
    out.append(f"best: the fewest steps whose predicted tokens/s is within {100 * BEST_TOLERANCE:.0f}% of the highest (a "
               "smaller predicted gain is below the model's resolution; each step adds draft work)")
    out.append("intervals: seeded bootstrap over cycles (costs and acceptance refit together); they cover "
               "sampling noise, not model error")
    return out


def rounds_text(rounds: dict | None) -> str:
    """The assumption line on what the tokens/s is of: steady state, or rounds (and why)."""
    if not rounds:
        return ("tokens/s of the steady state (requests replaced as they finish, as in a server under load); no "
                "lockstep round in the profile at this batch size (--request-tokens N predicts rounds of N-token "
                "requests started together)")
    why = (f"the profile's batch ran in {rounds['rounds']} lockstep round(s) ({rounds['full_cycles']} cycles at the full "
           f"batch, {rounds['tail_cycles']} while it drained)" if rounds.get("source") == "profile"
           else "given (--request-tokens)")
    lengths = " / ".join(f"{n:,}" for n in rounds["request_tokens"])
    return (f"tokens/s of rounds of requests of {lengths} new tokens started together ({why}): a round "
            "ends with its slowest request, so the cycles after the first request finishes yield fewer tokens "
            "(column 'round eff', round_efficiency in the JSON; i.i.d. requests, tail cycles at a full cycle's "
            "cost; no speculation: every request finishes at the same step); --request-tokens steady predicts the "
            "steady state" + (f"; each round also pays {rounds['round_gap_ns'] / 1e6:,.1f} ms besides its cycles ("
                              + (f"the median gap before the rounds the profiled process ran before nsys's capture "
                                 f"window (the shim's clock: without the profiler; "
                                 f"{rounds['round_gap_profiled_ns'] / 1e6:,.1f} ms before the profile's rounds under "
                                 "it)" if rounds.get("round_gap_source") == "profile_clock" else
                                 "the median gap before the profile's rounds: results returned, requests admitted, "
                                 "prefill; host time under the profiler, on the calibrated clock where calibrated")
                              + "), spread over its cycles (round_gap_ns in the JSON's predictions): more of it a "
                              "cycle at more steps, a round having fewer cycles" if rounds.get("round_gap_ns") else ""))


STEADY_SOURCES = ("live_log", "sglang_log", "profile_clock")
"""Calibration sources whose tokens/s is a steady rate (no round's tail): the prediction at K is X x the tail."""


def calibration_source_text(source: dict | None) -> str:
    """Where a calibration's tokens/s came from, in words."""
    if source and source.get("kind") == "sglang_log":
        acc = (f"; SGLang's accept len there {source['accept_len']:.2f}" if source.get("accept_len") is not None
               else "")
        return (f"from SGLang's log {source.get('path')}: the median gen throughput of its {source.get('lines')} "
                f"'Decode batch' lines at {source.get('batch')} running requests{acc}: a steady rate, the rounds' tail "
                "is the model's at every step count")
    if source and source.get("kind") == "profile_clock":
        return (f"from the profile's own clock: {source.get('tokens', 0):,.0f} tokens over "
                f"{source.get('period_ns', 0) / 1e9:,.3f} s of periods in {source.get('cycles')} steady decode cycles "
                f"at batch {source.get('batch')} that the profiled process ran before nsys's capture window opened "
                "(nsys attached, not collecting; the shim's clock marks): a steady rate, the rounds' tail is the "
                "model's at every step count; attached nsys is not free: such clocks read 0-11% below the unprofiled "
                "rate on measured H100 runs, most on short host-bound cycles (--calibrate-tps with a figure measured "
                "without nsys, where you have one)")
    if not source or source.get("kind") != "live_log":
        return "given"
    batch = f", batch {source['batch']}" if source.get("batch") is not None else ""
    return (f"from the live timing log {source.get('path')}: {source.get('tokens', 0):,.0f} tokens over "
            f"{source.get('period_ns', 0) / 1e9:,.3f} s of periods in {source.get('cycles')} steady cycles of rank "
            f"{source.get('rank')} at {source.get('steps')} steps{batch}: a steady rate, the rounds' tail is "
            "the model's at every step count")
