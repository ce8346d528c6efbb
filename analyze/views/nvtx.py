"""Views of the NVTX ranges on the CPU side."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.codes import factorize_objects
from analyze.project.projection import full_range_names, text_codes
from analyze.views.registry import view


@view("nvtx_sum", file=3)
def nvtx_sum(a) -> pd.DataFrame:
    """The rows of ``nsys stats -r nvtx_sum`` (:func:`nvtx_range_summary` of the analysis' ranges)."""
    return nvtx_range_summary(a.ranges)


def nvtx_range_summary(ranges: pd.DataFrame) -> pd.DataFrame:
    """CPU-side NVTX range statistics per (range, style): the rows of ``nsys stats -r nvtx_sum``."""
    cols = ["range", "style", "instances", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns"]
    if ranges.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    # grouped by integer codes of (name, style), not by millions of texts; each distinct name is
    # ``domain:name`` as ``astype(str)`` spells it (full_range_names), a style that is missing
    # leaves its rows out as grouping by it did
    range_code, range_names = text_codes(full_range_names(ranges))
    style_code, styles = factorize_objects(ranges["style"].to_numpy(dtype=object))
    n_styles = max(len(styles), 1)
    key = range_code.astype("int64") * n_styles + style_code
    d = ranges["end_ns"].to_numpy(dtype="int64") - ranges["start_ns"].to_numpy(dtype="int64")
    styled = style_code >= 0
    if not styled.all():
        key, d = key[styled], d[styled]
    g = pd.Series(d, copy=False).groupby(key, sort=False)
    out = g.agg(["size", "sum", "mean", "median", "min", "max"])
    out.columns = cols[2:]
    group = out.index.to_numpy(dtype="int64")
    # as Index objects, the dtype grouping by the texts gave their levels (pandas 3: str)
    out.insert(0, "style", pd.Index(np.asarray(styles, dtype=object)[group % n_styles]))
    out.insert(0, "range", pd.Index(range_names[group // n_styles]))
    out = out.reset_index(drop=True)
    return out.sort_values(["total_ns", "range"], ascending=[False, True], kind="stable")[cols].reset_index(drop=True)
