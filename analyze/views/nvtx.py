"""Views of the NVTX ranges on the CPU side."""
from __future__ import annotations

import pandas as pd

from analyze.views.registry import view


@view("nvtx_sum")
def nvtx_sum(a) -> pd.DataFrame:
    """The rows of ``nsys stats -r nvtx_sum`` (:func:`nvtx_range_summary` of the analysis' ranges)."""
    return nvtx_range_summary(a.ranges)


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
