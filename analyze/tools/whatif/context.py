"""How verify's GPU time moved with the requests' context over a profile.

A decode step attends over every token of its request so far; SGLang's verify runs the target over
the draft tokens with attention over that context, so its GPU time grows as the requests grow (on
the H200, a 64-layer target at batch 1: 3.0 -> 4.75 ms over 560 generated tokens, while a plain
decode step stayed near 3.3 ms over 1,024). A model fitted on one profile holds for that profile's
context lengths: :func:`context_trend` measures the growth so that whatif can say so.

The context position of a cycle: the tokens its requests generated since the batch size last
changed or a cycle was left out (consecutive steady cycles of one request count form a segment: a
server's batch changes when requests start or finish, and a prefill that admits new ones makes a long
cycle), per request: the cumulative (accepted / requests + 1). The slope is the
pooled within-segment least-squares slope of verify's GPU time on that position.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MIN_CYCLES = 20          # fewer cycles in segments of >= 2: no trend is told
NOTABLE_CHANGE = 0.10    # a growth over the profile's context span worth a line in the assumptions


def context_positions(samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(segment id, tokens generated per request before the cycle within its segment) per sample row,
    rows in cycle order (a segment: consecutive cycle numbers with the same request count; a cycle
    left out of the samples, the long one around a prefill that admits new requests or an outlier,
    starts a new segment: requests that follow one another at one batch size are not one sawtooth)."""
    cyc = samples["cycle"].to_numpy(dtype="int64")
    req = pd.to_numeric(samples["requests"], errors="coerce").to_numpy(dtype="float64")
    acc = pd.to_numeric(samples["accepted"], errors="coerce").to_numpy(dtype="float64")
    per_req = np.where(req > 0, acc / np.where(req > 0, req, 1.0), 0.0) + 1.0
    per_req = np.nan_to_num(per_req, nan=1.0)
    new = np.r_[True, (req[1:] != req[:-1]) | (np.diff(cyc) > 1)] if len(cyc) else np.zeros(0, bool)
    seg = np.cumsum(new) - 1
    total = np.cumsum(per_req)
    start = total - per_req               # tokens before each row, over the whole profile
    seg_start = start[new][seg] if len(seg) else start
    return seg, start - seg_start


def context_trend(samples: pd.DataFrame, column: str = "verify_ns") -> dict | None:
    """The growth of ``column`` with the context over the profile's steady cycles: ``slope_ns_per_token``
    (per generated token per request), ``span_tokens`` (the context span of a cycle's segment, mean over cycles), ``mean_ns``,
    ``change`` (slope x span / mean: the relative growth across a segment), ``cycles``; None without
    the columns or with too few cycles."""
    if samples is None or column not in samples.columns or not {"cycle", "requests", "accepted"} <= set(samples.columns):
        return None
    s = samples.sort_values("cycle", kind="stable")
    s = s[s["accepted"].notna()]
    # positions over every cycle with its tokens, then the cycles that hold the figure (a sampled live
    # log times one cycle in N: its untimed cycles still move the context on)
    seg_all, pos_all = context_positions(s) if len(s) else (np.zeros(0, int), np.zeros(0))
    known = s[column].notna().to_numpy()
    if int(known.sum()) < MIN_CYCLES:
        return None
    seg, pos = seg_all[known], pos_all[known]
    y = s[column].to_numpy(dtype="float64", na_value=np.nan)[known]
    frame = pd.DataFrame({"seg": seg, "x": pos, "y": y})
    sizes = frame.groupby("seg")["x"].transform("size").to_numpy()
    frame = frame[sizes >= 2]
    if len(frame) < MIN_CYCLES:
        return None
    xc = frame["x"] - frame.groupby("seg")["x"].transform("mean")
    yc = frame["y"] - frame.groupby("seg")["y"].transform("mean")
    sxx = float((xc * xc).sum())
    if sxx <= 0:
        return None
    slope = float((xc * yc).sum()) / sxx
    g = frame.groupby("seg")["x"]
    span = float(np.average((g.max() - g.min()).to_numpy(), weights=g.size().to_numpy()))   # a cycle's segment's
    mean = float(frame["y"].mean())
    return {"column": column, "slope_ns_per_token": slope, "span_tokens": span, "mean_ns": mean,
            "change": slope * span / mean if mean > 0 else np.nan, "cycles": int(len(frame))}


def trend_text(trend: dict | None) -> str | None:
    """One assumptions line when the growth is notable (:data:`NOTABLE_CHANGE`), else None."""
    if not trend or not np.isfinite(trend.get("change", np.nan)) or abs(trend["change"]) < NOTABLE_CHANGE:
        return None
    phase = trend["column"].removesuffix("_ns")
    return (f"context: {phase}'s GPU time {'grew' if trend['change'] > 0 else 'fell'} "
            f"{100 * abs(trend['change']):.0f}% across the profile's requests ({trend['slope_ns_per_token'] / 1e3:+.2f} us "
            f"per generated token over {trend['span_tokens']:,.0f} tokens, {trend['cycles']} cycles): the prediction "
            f"holds for these context lengths; requests that run longer (or shorter) than the profiled ones verify "
            f"slower (or faster), and a plain decode step need not grow the same way")
