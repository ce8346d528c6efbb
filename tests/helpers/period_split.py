"""An independent reference for the cycle table's period split (issue 18's columns), from the per-op
table: per cycle, [this cycle's first GPU op, the next cycle's first GPU op) on the rank (the last
cycle: to its own window end), split by exclusive phase (earlier-listed phase wins where ops
overlap, then ``other``) and idle; warm-up = the first cycle of a rank, or a period over 10x the
rank's median (``outlier``). Written plainly (loops over cycles, interval unions in Python), so it
shares no code with the analyzer.

tests/test_decode_breakdown.py checks the pipeline's own columns against it on real traces.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

OTHER = "other"


def _union_length(iv: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def period_split(gpu_ops: pd.DataFrame, cycles: pd.DataFrame, phase_names: list[str]) -> pd.DataFrame:
    """``cycles`` with ``period_<phase>_ns``, ``period_other_ns``, ``period_idle_ns``,
    ``gpu_period_ns``, ``warmup`` (bool) and ``warmup_reason`` added."""
    order = [p for p in phase_names if p != OTHER] + [OTHER]
    code = {p: i for i, p in enumerate(order)}
    out = cycles.copy()
    cols = {f"period_{p}_ns": np.zeros(len(out), dtype="int64") for p in order}
    idle = np.zeros(len(out), dtype="int64")
    period = np.zeros(len(out), dtype="int64")
    for rank, rows in out.groupby("rank", sort=False):
        ops = gpu_ops[gpu_ops["rank"] == rank]
        s_all = ops["start_ns"].to_numpy(dtype="int64")
        e_all = ops["end_ns"].to_numpy(dtype="int64")
        c_all = ops["phase"].map(code).fillna(len(order) - 1).to_numpy(dtype="int64")
        rows = rows.sort_values("start_ns")
        starts = rows["start_ns"].to_numpy(dtype="int64")
        ends = rows["end_ns"].to_numpy(dtype="int64")
        for k, idx in enumerate(rows.index):
            lo = int(starts[k])
            hi = int(starts[k + 1]) if k + 1 < len(starts) else int(ends[k])
            pos = out.index.get_loc(idx)
            period[pos] = hi - lo
            sel = (s_all < hi) & (e_all > lo)
            s, e, c = np.clip(s_all[sel], lo, hi), np.clip(e_all[sel], lo, hi), c_all[sel]
            covered = 0
            for i, p in enumerate(order):
                upto = _union_length(list(zip(s[c <= i].tolist(), e[c <= i].tolist())))
                cols[f"period_{p}_ns"][pos] = upto - covered
                covered = upto
            idle[pos] = (hi - lo) - covered
    for c, v in cols.items():
        out[c] = v
    out["period_idle_ns"] = idle
    out["gpu_period_ns"] = period
    first = out.groupby("rank")["start_ns"].transform("min") == out["start_ns"]
    median = out.groupby("rank")["gpu_period_ns"].transform("median")
    outlier = out["gpu_period_ns"] > 10 * median
    out["warmup"] = (first | outlier).to_numpy()
    out["warmup_reason"] = np.where(first, "first", np.where(outlier, "outlier", None))
    return out
