"""The decode-cycle timeline: per cycle and rank, where its GPU time went.

A cycle is an outermost NVTX range named like ``decode_cycle`` (config ``cycle_ranges``). GPU ops
belong to the cycle whose range encloses their launching call. Per cycle: exclusive GPU time per
phase (same rule as per rank), ``gap_ns`` = GPU idle between the cycle's first and last op (time
the GPU waited for the CPU: launch-bound time), accepted tokens from the shim's ``accept_len=N``
marks (or an integer payload on the cycle range), tokens per second over the cycle's wall time.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from . import projection as proj
from .intervals import grouped_union_length
from .phases import OTHER, PhaseConfig

ACCEPT_MARK = re.compile(r"accept(?:ed)?_len(?:gth)?=(?P<n>\d+)(?:\s+reqs=(?P<reqs>\d+))?")


def cycle_ranges(ranges: pd.DataFrame, config: PhaseConfig) -> pd.DataFrame:
    """Outermost cycle ranges (a cycle pushed in two domains counts once)."""
    sel = ranges[ranges["name"].isin(config.cycle_ranges)]
    if sel.empty:
        return sel
    tid = sel["global_tid"].to_numpy(dtype="int64")
    _, tidx = np.unique(tid, return_inverse=True)
    levels = proj.nesting_levels(tidx.astype("int64"), sel["start_ns"].to_numpy(dtype="int64"),
                                 sel["end_ns"].to_numpy(dtype="int64"))
    return sel[levels == 0]


def cycle_of_ops(op_call: np.ndarray, ranges: pd.DataFrame, index: proj.CallIndex,
                 config: PhaseConfig) -> np.ndarray:
    """Per op, the id (row label in ``ranges``) of the cycle range enclosing its call, else -1."""
    top = cycle_ranges(ranges, config)
    out = np.full(len(op_call), -1, dtype="int64")
    if top.empty:
        return out
    lo, hi, exact = proj.range_blocks(index, top)
    _, _, end_key = proj.range_keys(index, top)
    owner = proj.paint_blocks(len(index.key), lo, hi, np.zeros(len(top), dtype="int64"), exact,
                              top.index.to_numpy(dtype="int64"),
                              lambda i: index.end_key[lo[i]:hi[i]] <= end_key[i])
    has = op_call >= 0
    out[has] = owner[op_call[has]]
    return out


COLUMNS = ["rank", "cycle", "start_ns", "end_ns", "duration_ns", "gpu_start_ns", "gpu_end_ns", "busy_ns",
           "gap_ns", "accepted_tokens", "requests", "tokens", "tokens_per_s"]


def cycle_table(gpu_ops: pd.DataFrame, ranges: pd.DataFrame, marks: pd.DataFrame,
                config: PhaseConfig) -> pd.DataFrame:
    phase_cols = [f"{p}_ns" for p in config.names] + [f"{OTHER}_ns"]
    if "cycle_range" not in gpu_ops.columns or ranges.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS + phase_cols})
    cyc = ranges[ranges.get("is_cycle", False) == True] if "is_cycle" in ranges.columns else ranges.iloc[0:0]  # noqa: E712
    if cyc.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS + phase_cols})
    cyc = cyc.sort_values(["rank", "start_ns"]).reset_index(drop=True)
    cyc["cycle"] = cyc.groupby("rank").cumcount()
    key = dict(zip(zip(cyc["input"], cyc["range_id"]), cyc.index))
    ops = gpu_ops[gpu_ops["cycle_range"] >= 0]
    code = np.array([key.get((i, r), -1) for i, r in zip(ops["input"], ops["cycle_range"])], dtype="int64")
    ops = ops[code >= 0]
    code = code[code >= 0]
    n = len(cyc)
    start = ops["start_ns"].to_numpy(dtype="int64")
    end = ops["end_ns"].to_numpy(dtype="int64")
    busy = grouped_union_length(code, start, end, n)
    out = pd.DataFrame({"rank": cyc["rank"].to_numpy(), "cycle": cyc["cycle"].to_numpy(),
                        "start_ns": cyc["start_ns"].to_numpy(), "end_ns": cyc["end_ns"].to_numpy()})
    out["duration_ns"] = out["end_ns"] - out["start_ns"]
    g_start = np.full(n, -1, dtype="int64")
    g_end = np.full(n, -1, dtype="int64")
    if len(code):
        first = np.full(n, np.iinfo(np.int64).max, dtype="int64")
        last = np.full(n, np.iinfo(np.int64).min, dtype="int64")
        np.minimum.at(first, code, start)
        np.maximum.at(last, code, end)
        seen = np.bincount(code, minlength=n) > 0
        g_start[seen], g_end[seen] = first[seen], last[seen]
    out["gpu_start_ns"], out["gpu_end_ns"], out["busy_ns"] = g_start, g_end, busy
    out["gap_ns"] = np.where(g_end >= 0, g_end - g_start - busy, 0)
    phase = ops["phase"].to_numpy(dtype=object)
    covered = np.zeros(len(ops), dtype=bool)
    cumulative = np.zeros(n, dtype="int64")
    for name in config.names:
        covered |= phase == name
        upto = grouped_union_length(code[covered], start[covered], end[covered], n)
        out[f"{name}_ns"] = upto - cumulative
        cumulative = upto
    out[f"{OTHER}_ns"] = busy - cumulative
    accepted, requests = _accepted(cyc, marks)
    out["accepted_tokens"] = accepted.to_numpy()
    out["requests"] = requests.to_numpy()
    # tokens generated in the cycle: the accepted draft tokens plus one (bonus) token per request
    out["tokens"] = (out["accepted_tokens"] + out["requests"].fillna(1)).astype("Int64")
    out["tokens_per_s"] = (out["tokens"].astype("Float64") * 1e9 / out["duration_ns"].where(out["duration_ns"] > 0)) \
        .astype("float64")
    return out[COLUMNS[:8] + phase_cols + COLUMNS[8:]]


def _accepted(cyc: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Accepted draft tokens and requests per cycle, from ``accept_len=N reqs=M`` marks inside the
    cycle range (same process, time within the range), else the cycle range's integer payload."""
    accepted = pd.Series(np.nan, index=cyc.index, dtype="float64")
    requests = pd.Series(np.nan, index=cyc.index, dtype="float64")
    if marks is not None and not marks.empty:
        found = marks["text"].astype(str).str.extract(ACCEPT_MARK)
        acc = marks.assign(n=pd.to_numeric(found["n"], errors="coerce"),
                           reqs=pd.to_numeric(found["reqs"], errors="coerce")).dropna(subset=["n"])
        for (pid, inp), group in cyc.groupby(["global_pid", "input"]):
            same = acc[(acc["global_pid"] == pid) & (acc["input"] == inp)]
            if same.empty:
                continue
            same = same.sort_values("time_ns", kind="stable")
            t = same["time_ns"].to_numpy(dtype="int64")
            n_sum = np.r_[0.0, np.cumsum(same["n"].to_numpy(dtype="float64"))]
            has_reqs = same["reqs"].notna().to_numpy()
            r_sum = np.r_[0.0, np.cumsum(same["reqs"].fillna(0).to_numpy(dtype="float64"))]
            r_cnt = np.r_[0, np.cumsum(has_reqs)]
            lo = np.searchsorted(t, group["start_ns"].to_numpy(dtype="int64"), side="left")
            hi = np.searchsorted(t, group["end_ns"].to_numpy(dtype="int64"), side="right")
            accepted.loc[group.index] = np.where(hi > lo, n_sum[hi] - n_sum[lo], np.nan)
            requests.loc[group.index] = np.where(r_cnt[hi] > r_cnt[lo], r_sum[hi] - r_sum[lo], np.nan)
    if "int_value" in cyc.columns:
        payload = pd.to_numeric(cyc["int_value"], errors="coerce")
        accepted = accepted.where(accepted.notna(), payload)
    return accepted.astype("Int64"), requests.astype("Int64")
