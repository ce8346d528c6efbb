"""Putting ranks recorded in separate reports on one clock.

Step 1, session start: every report records the UTC time of its t=0
(TARGET_INFO_SESSION_START_TIME), so ``t_ref = t + (utc_i - utc_ref)``, good to NTP accuracy (ms).
Step 2, collectives: the n-th all-reduce ends at the same instant on every rank. We try integer
shifts k of rank i's collective sequence against the reference's, keep the shifts whose end-time
differences agree (smallest spread), and among those the one closest to the UTC estimate (the
pattern repeats every cycle, so UTC decides between cycles). The median difference is the
refinement, the largest deviation from it the residual.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MAX_SHIFT = 64


def collective_ends(ops: pd.DataFrame | None) -> np.ndarray:
    """Sorted end times of the collectives: from a GPU-op table (``collective`` column) or from
    the map step's collective ops (collectives.COLLECTIVE_OP_COLUMNS; None when there are none)."""
    if ops is None:
        return np.zeros(0, dtype="int64")
    if "prev_phase" in ops.columns:
        return np.sort(ops["end_ns"].to_numpy(dtype="int64"))
    coll = ops[ops["collective"]] if "collective" in ops.columns else ops.iloc[0:0]
    return np.sort(coll["end_ns"].to_numpy(dtype="int64"))


def refine_offset(ref_ends: np.ndarray, ends: np.ndarray, utc_delta: int) -> tuple[int, int, int] | None:
    """(offset, residual, shift) aligning ``ends + offset`` to ``ref_ends``; None without collectives."""
    if len(ref_ends) == 0 or len(ends) == 0:
        return None
    best = None
    for k in range(-min(MAX_SHIFT, len(ends) - 1), min(MAX_SHIFT, len(ref_ends) - 1) + 1):
        # pair ref_ends[n + k] with ends[n]
        n0 = max(0, -k)
        n1 = min(len(ends), len(ref_ends) - k)
        if n1 - n0 < max(1, min(len(ends), len(ref_ends)) // 2):
            continue
        delta = ref_ends[n0 + k:n1 + k] - ends[n0:n1]
        med = int(np.median(delta))
        spread = int(np.abs(delta - med).max())
        score = (spread, abs(med - utc_delta))
        if best is None or score < best[0]:
            best = (score, med, spread, k)
    if best is None:
        return None
    return best[1], best[2], best[3]


def align(results) -> pd.DataFrame:
    """Offsets (ns) that put every report on the clock of the first one (lowest rank)."""
    cols = ["input", "utc_start_ns", "utc_offset_ns", "offset_ns", "residual_ns", "method"]
    if len(results) <= 1:
        return pd.DataFrame([[r.path, r.meta.get("utc_start_ns"), 0, 0, 0, "single report"] for r in results],
                            columns=cols)
    order = sorted(results, key=lambda r: int(r.ranks["rank"].min()) if len(r.ranks) else 1 << 30)
    ref = order[0]
    ref_utc = ref.meta.get("utc_start_ns")
    ref_ends = collective_ends(_coll(ref))
    rows = [[ref.path, ref_utc, 0, 0, 0, "reference"]]
    for res in order[1:]:
        utc = res.meta.get("utc_start_ns")
        utc_delta = int(utc - ref_utc) if utc is not None and ref_utc is not None else 0
        refined = refine_offset(ref_ends, collective_ends(_coll(res)), utc_delta)
        if refined is None:
            method = "session start (UTC)" if utc is not None and ref_utc is not None else "none"
            rows.append([res.path, utc, utc_delta, utc_delta, None, method])
        else:
            offset, residual, _ = refined
            rows.append([res.path, utc, utc_delta, offset, residual, "collectives"])
    return pd.DataFrame(rows, columns=cols)


def _coll(res):
    found = getattr(res, "collective_ops", None)
    if found is not None or getattr(res, "cycles", None) is not None:
        return found          # map-step collectives (None: the report has none)
    return res.gpu_ops
