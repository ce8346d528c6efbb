"""Cross-rank and distribution tables derived from an Analysis (pure DataFrame functions)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER
from analyze.timeline import cycles as cycles_mod


def cross_rank(phases: pd.DataFrame) -> pd.DataFrame:
    """Per phase, exact statistics over ranks of exclusive and busy time: min/median/max/spread."""
    cols = ["phase", "ranks", "exclusive_min_ns", "exclusive_median_ns", "exclusive_max_ns",
            "exclusive_spread_ns", "busy_min_ns", "busy_median_ns", "busy_max_ns", "slowest_rank"]
    if phases.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    rows = []
    for phase, g in phases.groupby("phase", sort=False):
        ex = g["exclusive_ns"].to_numpy(dtype="int64")
        busy = g["busy_ns"].to_numpy(dtype="int64")
        rows.append([phase, len(g), int(ex.min()), float(np.median(ex)), int(ex.max()),
                     int(ex.max() - ex.min()), int(busy.min()), float(np.median(busy)), int(busy.max()),
                     int(g["rank"].to_numpy()[int(np.argmax(ex))])])
    return pd.DataFrame(rows, columns=cols)


def cycle_distribution(cycles: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """p50/p90/p99 over all cycles with GPU work of all ranks (pooled samples, not medians of medians)."""
    cols = ["figure", "cycles", "mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"]
    cycles = cycles_mod.with_gpu(cycles)
    if cycles is None or cycles.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    rows = []
    labels = {"period_ns": "cycle period", "duration_ns": "GPU window"}
    for fig in ["period_ns", "duration_ns"] + [f"{p}_ns" for p in phase_names + [OTHER]] + ["gap_ns"]:
        if fig not in cycles.columns:
            continue
        v = cycles[fig].to_numpy(dtype="float64")
        rows.append([labels.get(fig, fig[:-3]), len(v), float(v.mean()),
                     *np.percentile(v, [50, 90, 99]).tolist(), float(v.max())])
    return pd.DataFrame(rows, columns=cols)


def tokens_summary(cycles: pd.DataFrame) -> dict | None:
    """Tokens per cycle and tokens/s over the measured cycles (the lowest rank's view: every TP rank
    produces the same tokens)."""
    if cycles.empty or cycles["accepted_tokens"].isna().all():
        return None
    first_rank = cycles["rank"].min()
    c = cycles[(cycles["rank"] == first_rank) & cycles["accepted_tokens"].notna()]
    accepted = float(c["accepted_tokens"].astype("float64").sum())
    tokens = float(c["tokens"].astype("float64").sum())
    wall = float(c["period_ns"].sum())
    return {"rank": int(first_rank), "cycles": int(len(c)), "accepted_tokens": accepted, "tokens": tokens,
            "accepted_per_cycle": accepted / len(c) if len(c) else None,
            "tokens_per_cycle": tokens / len(c) if len(c) else None,
            "tokens_per_s": tokens * 1e9 / wall if wall else None}


def nvtx_range_summary(ranges: pd.DataFrame) -> pd.DataFrame:
    """CPU-side NVTX range statistics per (range, style): the rows of ``nsys stats -r nvtx_sum``."""
    cols = ["range", "style", "instances", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns"]
    if ranges.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    names = ranges["domain"].astype(str) + ":" + ranges["name"].astype(str)
    frame = pd.DataFrame({"range": names, "style": ranges["style"], "d": ranges["end_ns"] - ranges["start_ns"]})
    g = frame.groupby(["range", "style"], sort=False)["d"]
    out = g.agg(instances="size", total_ns="sum", mean_ns="mean", median_ns="median", min_ns="min",
                max_ns="max").reset_index()
    return out.sort_values(["total_ns", "range"], ascending=[False, True], kind="stable")[cols].reset_index(drop=True)
