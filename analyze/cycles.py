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
from .intervals import grouped_union_length, sorted_union_length  # noqa: F401
from .phases import OTHER, PhaseConfig

ACCEPT_MARK = re.compile(r"accept(?:ed)?_len(?:gth)?=(?P<n>\d+)(?:\s+reqs=(?P<reqs>\d+))?"
                         r"(?:\s+lens=(?P<lens>\d+(?:,\d+)*))?")


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
                              (index.end_key, end_key))
    has = op_call >= 0
    out[has] = owner[op_call[has]]
    return out


COLUMNS = ["rank", "cycle", "start_ns", "end_ns", "duration_ns", "cpu_start_ns", "cpu_end_ns", "period_ns",
           "busy_ns", "gap_ns", "accepted_tokens", "requests", "accept_lengths", "tokens", "tokens_per_s"]


def _window_pairs(op_rank, op_start, op_end, win_rank, win_lo, win_hi):
    """(op index, window index) for every op overlapping a window of its own rank."""
    op_order = np.lexsort((op_start, op_rank))
    r, s, e = op_rank[op_order], op_start[op_order], op_end[op_order]
    ops_pairs, win_pairs = [], []
    for rank in np.unique(win_rank):
        seg = np.flatnonzero(r == rank)
        if not len(seg):
            continue
        rs, re_ = s[seg], e[seg]
        reach = np.maximum.accumulate(re_)
        wins = np.flatnonzero(win_rank == rank)
        first = np.searchsorted(reach, win_lo[wins], side="right")   # first op reaching past lo
        last = np.searchsorted(rs, win_hi[wins], side="left")        # ops starting before hi
        lens = np.maximum(last - first, 0)
        total = int(lens.sum())
        if not total:
            continue
        idx = np.repeat(first - np.r_[0, np.cumsum(lens)[:-1]], lens) + np.arange(total)
        w = np.repeat(wins, lens)
        keep = re_[idx] > win_lo[w]
        ops_pairs.append(op_order[seg[idx[keep]]])
        win_pairs.append(w[keep])
    if not ops_pairs:
        return np.zeros(0, dtype="int64"), np.zeros(0, dtype="int64")
    return np.concatenate(ops_pairs), np.concatenate(win_pairs)


def cycle_table(gpu_ops: pd.DataFrame, ranges: pd.DataFrame, marks: pd.DataFrame,
                config: PhaseConfig) -> pd.DataFrame:
    """Per rank and cycle. The cycle's GPU window runs from the first start to the last end of the ops
    launched inside its range; everything the rank's GPU ran in that window is split by phase (the
    same exclusive rule as per rank), so ``sum(<phase>_ns) + gap_ns == duration_ns``."""
    phase_cols = [f"{p}_ns" for p in config.names] + [f"{OTHER}_ns"]
    empty = pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS[:9] + phase_cols + COLUMNS[9:]})
    if "cycle_range" not in gpu_ops.columns or "is_cycle" not in ranges.columns:
        return empty
    cyc = ranges[ranges["is_cycle"].astype(bool)]
    if cyc.empty:
        return empty
    cyc = cyc.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    launched = gpu_ops[gpu_ops["cycle_range"] >= 0]
    key = pd.MultiIndex.from_arrays([cyc["input"].astype(str), cyc["range_id"].astype("int64")])
    code = key.get_indexer(pd.MultiIndex.from_arrays([launched["input"].astype(str),
                                                      launched["cycle_range"].astype("int64")])).astype("int64")
    n = len(cyc)
    lo = np.full(n, np.iinfo(np.int64).max, dtype="int64")
    hi = np.full(n, np.iinfo(np.int64).min, dtype="int64")
    ok = code >= 0
    if ok.any():   # sort + reduceat: np.minimum.at is slow on millions of ops
        c = code[ok]
        srt = np.argsort(c, kind="stable")
        c = c[srt]
        run = np.r_[0, np.flatnonzero(c[1:] != c[:-1]) + 1]
        lo[c[run]] = np.minimum.reduceat(launched["start_ns"].to_numpy(dtype="int64")[ok][srt], run)
        hi[c[run]] = np.maximum.reduceat(launched["end_ns"].to_numpy(dtype="int64")[ok][srt], run)
    has_gpu = np.bincount(code[ok], minlength=n) > 0
    cyc, lo, hi = cyc[has_gpu].reset_index(drop=True), lo[has_gpu], hi[has_gpu]
    n = len(cyc)
    cyc["cycle"] = cyc.groupby("rank").cumcount()
    win_rank = cyc["rank"].to_numpy(dtype="int64")

    op_i, win = _window_pairs(gpu_ops["rank"].to_numpy(dtype="int64"), gpu_ops["start_ns"].to_numpy(dtype="int64"),
                              gpu_ops["end_ns"].to_numpy(dtype="int64"), win_rank, lo, hi)
    start = np.clip(gpu_ops["start_ns"].to_numpy(dtype="int64")[op_i], lo[win], hi[win])
    end = np.clip(gpu_ops["end_ns"].to_numpy(dtype="int64")[op_i], lo[win], hi[win])
    phase = gpu_ops["phase"].to_numpy(dtype=object)[op_i]
    srt = np.lexsort((start, win))      # one sort serves every union below
    win, start, end, phase = win[srt], start[srt], end[srt], phase[srt]
    busy = sorted_union_length(win, start, end, n)
    out = pd.DataFrame({"rank": win_rank, "cycle": cyc["cycle"].to_numpy(), "start_ns": lo, "end_ns": hi,
                        "duration_ns": hi - lo, "cpu_start_ns": cyc["start_ns"].to_numpy(),
                        "cpu_end_ns": cyc["end_ns"].to_numpy()})
    nxt = out.groupby("rank")["cpu_start_ns"].shift(-1)
    out["period_ns"] = (nxt - out["cpu_start_ns"]).fillna(out["cpu_end_ns"] - out["cpu_start_ns"]).astype("int64")
    out["busy_ns"] = busy
    covered = np.zeros(len(op_i), dtype=bool)
    cumulative = np.zeros(n, dtype="int64")
    for name in config.names:
        covered |= phase == name
        upto = sorted_union_length(win[covered], start[covered], end[covered], n)
        out[f"{name}_ns"] = upto - cumulative
        cumulative = upto
    out[f"{OTHER}_ns"] = busy - cumulative
    out["gap_ns"] = out["duration_ns"] - busy
    accepted, requests, lengths = _accepted(cyc, marks)
    out["accepted_tokens"] = accepted.to_numpy()
    out["requests"] = requests.to_numpy()
    out["accept_lengths"] = lengths.to_numpy()
    # tokens generated in the cycle: the accepted draft tokens plus one (bonus) token per request
    out["tokens"] = (out["accepted_tokens"] + out["requests"].fillna(1)).astype("Int64")
    # throughput over the cycle's period (its start to the next cycle's start on the host)
    out["tokens_per_s"] = (out["tokens"].astype("Float64") * 1e9 / out["period_ns"].where(out["period_ns"] > 0)) \
        .astype("float64")
    return out[COLUMNS[:9] + phase_cols + COLUMNS[9:]]


def _accepted(cyc: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Accepted draft tokens, requests and per-request accept lengths (comma-separated) per cycle,
    from ``accept_len=N reqs=M [lens=a,b,...]`` marks inside the cycle range (same process, time
    within the range), else the cycle range's integer payload."""
    accepted = pd.Series(np.nan, index=cyc.index, dtype="float64")
    requests = pd.Series(np.nan, index=cyc.index, dtype="float64")
    lengths = pd.Series(None, index=cyc.index, dtype=object)
    if marks is not None and not marks.empty:
        found = marks["text"].astype(str).str.extract(ACCEPT_MARK)
        acc = marks.assign(n=pd.to_numeric(found["n"], errors="coerce"),
                           reqs=pd.to_numeric(found["reqs"], errors="coerce"),
                           lens=found["lens"]).dropna(subset=["n"])
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
            lens = same["lens"].to_numpy(dtype=object)
            if pd.notna(lens).any():
                joined = [",".join(x for x in lens[a:b] if isinstance(x, str)) or None for a, b in zip(lo, hi)]
                lengths.loc[group.index] = joined
    if "int_value" in cyc.columns:
        payload = pd.to_numeric(cyc["int_value"], errors="coerce")
        accepted = accepted.where(accepted.notna(), payload)
    return accepted.astype("Int64"), requests.astype("Int64"), lengths
