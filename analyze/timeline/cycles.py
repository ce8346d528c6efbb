"""The decode-cycle timeline: per cycle and rank, where its GPU time went.

A cycle is an outermost NVTX range named like ``decode_cycle`` (config ``cycle_ranges``). GPU ops
belong to the cycle whose range encloses their launching call. Per cycle: exclusive GPU time per
phase (same rule as per rank), ``gap_ns`` = GPU idle between the cycle's first and last op (time
the GPU waited for the CPU: launch-bound time), accepted tokens from the shim's ``accept_len=N``
marks, tokens per second over the cycle's wall time. A mark with ``cycle=K`` belongs to the cycle
range of the same process whose int64 payload is K (SGLang's v2 workers resolve accept lengths
after the cycle's range closed); a mark without it to the cycle range that contains it
(nvtx_annotate.protocol).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from analyze.attribute.intervals import sorted_union_length
from analyze.attribute.phases import OTHER, PhaseConfig
from analyze.project import projection as proj
from nvtx_annotate.protocol import ACCEPT_MARK_RE as ACCEPT_MARK  # accept_len=N reqs=M [cycle=K] [lens=...]


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


def cycle_of_calls(ranges: pd.DataFrame, index: proj.CallIndex, config: PhaseConfig,
                   top: pd.DataFrame | None = None, layout=None) -> np.ndarray | None:
    """Per sorted API call, the id (row label in ``ranges``) of the cycle range enclosing it, else
    -1; None when there are no cycle ranges (``top``: :func:`cycle_ranges` when the caller has it)."""
    top = cycle_ranges(ranges, config) if top is None else top
    if top.empty:
        return None
    lo, hi, exact, end_key = proj.subset_blocks(index, ranges, top, layout)
    labels = top.index.to_numpy(dtype="int64")
    label_t = "int32" if labels.max() < 2 ** 31 - 1 else "int64"     # held per call: narrow when it fits
    return proj.paint_blocks(len(index.key), lo, hi, np.zeros(len(top), dtype="int64"), exact,
                             labels, (index.end_key, end_key), dtype=label_t)


def cycle_of_ops(op_call: np.ndarray, ranges: pd.DataFrame, index: proj.CallIndex,
                 config: PhaseConfig, owner: np.ndarray | None = None) -> np.ndarray:
    """Per op, the id (row label in ``ranges``) of the cycle range enclosing its call, else -1
    (``owner``: :func:`cycle_of_calls` when the caller has it)."""
    if owner is None:
        owner = cycle_of_calls(ranges, index, config)
    out = np.full(len(op_call), -1, dtype="int64")
    if owner is None:
        return out
    has = op_call >= 0
    out[has] = owner[op_call[has]]
    return out


def cycle_windows(owner: np.ndarray | None, has: np.ndarray, first: np.ndarray,
                  last: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cycle range id, first op start, last op end) of every cycle that launched GPU work, from
    the per-call spans (projection.call_op_span_arrays over all op kinds): the same window as the
    min/max over the cycle's ops, on the calls (a few per op) instead of the ops."""
    if owner is None:
        z = np.zeros(0, dtype="int64")
        return z, z, z
    sel = np.flatnonzero((owner >= 0) & (has > 0))
    o = owner[sel]
    srt = np.argsort(o, kind="stable")
    o = o[srt]
    if not len(o):
        z = np.zeros(0, dtype="int64")
        return z, z, z
    run = np.r_[0, np.flatnonzero(o[1:] != o[:-1]) + 1]
    return (o[run].astype("int64"), np.minimum.reduceat(first[sel][srt], run),
            np.maximum.reduceat(last[sel][srt], run))


def default_window_cycles(cycles: pd.DataFrame) -> list[int]:
    """The cycles a timeline shows by default: two consecutive cycles starting at the one of median
    duration (its longest rank), cycle 0 left out of the median (usually warm-up)."""
    if cycles is None or cycles.empty:
        return []
    numbers = sorted(int(c) for c in cycles["cycle"].unique())
    per_cycle = cycles.groupby("cycle")["duration_ns"].max()
    steady = per_cycle.iloc[1:] if len(per_cycle) > 2 else per_cycle
    median = steady.median()
    first = int((steady - median).abs().idxmin())
    return [c for c in numbers if first <= c < first + 2]


COLUMNS = ["rank", "cycle", "start_ns", "end_ns", "duration_ns", "cpu_start_ns", "cpu_end_ns", "period_ns",
           "busy_ns", "gap_ns", "accepted_tokens", "requests", "accept_lengths", "tokens", "tokens_per_s"]


def _window_pairs(op_rank, op_start, op_end, win_rank, win_lo, win_hi, op_order=None, presorted=None):
    """(op index, window index) for every op overlapping a window of its own rank (``op_order``:
    the ops' stable order by (rank, start) when the caller has it; ``presorted``: the ops' (rank,
    start, end) already in that order)."""
    pieces = list(_window_pairs_by_rank(op_rank, op_start, op_end, win_rank, win_lo, win_hi, op_order,
                                        presorted))
    if not pieces:
        return np.zeros(0, dtype="int64"), np.zeros(0, dtype="int64")
    return (np.concatenate([op_order_i for op_order_i, _, _ in pieces]),
            np.concatenate([w for _, w, _ in pieces]))


def _window_pairs_by_rank(op_rank, op_start, op_end, win_rank, win_lo, win_hi, op_order=None, presorted=None):
    """Per rank with windows: (op index, window index, sorted position) of the ops overlapping
    a window of that rank, by window, ops in start order within a window."""
    if op_order is None:
        op_order = np.lexsort((op_start, op_rank))
    if presorted is not None:
        r, s, e = presorted
    else:
        r, s, e = op_rank[op_order], op_start[op_order], op_end[op_order]
    bounds = np.r_[0, np.flatnonzero(r[1:] != r[:-1]) + 1, len(r)] if len(r) else np.zeros(1, dtype="int64")
    seg_of = {int(r[a]): (int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])}
    for rank in np.unique(win_rank):
        if int(rank) not in seg_of:
            continue
        a, b = seg_of[int(rank)]
        rs, re_ = s[a:b], e[a:b]
        reach = np.maximum.accumulate(re_)
        wins = np.flatnonzero(win_rank == rank)
        first = np.searchsorted(reach, win_lo[wins], side="right")   # first op reaching past lo
        last = np.searchsorted(rs, win_hi[wins], side="left")        # ops starting before hi
        del reach
        lens = np.maximum(last - first, 0)
        total = int(lens.sum())
        if not total:
            continue
        idx = np.repeat(first - np.r_[0, np.cumsum(lens)[:-1]], lens) + np.arange(total)
        w = np.repeat(wins, lens)
        keep = re_[idx] > win_lo[w]
        pos = a + idx[keep]
        yield op_order[pos], w[keep], pos


def _sorted_pairs(win: np.ndarray, start: np.ndarray) -> bool:
    """Whether (win, start) pairs are already in lexicographic order."""
    dw = np.diff(win)
    if (dw < 0).any():
        return False
    return bool(((dw > 0) | (start[1:] >= start[:-1])).all())


def _empty(config: PhaseConfig) -> pd.DataFrame:
    phase_cols = [f"{p}_ns" for p in config.names] + [f"{OTHER}_ns"]
    return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS[:9] + phase_cols + COLUMNS[9:]})


def cycle_table_arrays(op_rank: np.ndarray, op_start: np.ndarray, op_end: np.ndarray, op_phase: np.ndarray,
                       op_cycle: np.ndarray, op_input: np.ndarray, ranges: pd.DataFrame,
                       range_input: np.ndarray, marks: pd.DataFrame, config: PhaseConfig,
                       op_order: np.ndarray | None = None, windows=None, presorted=None) -> pd.DataFrame:
    """Per rank and cycle, on arrays. The cycle's GPU window runs from the first start to the last end
    of the ops launched inside its range; everything the rank's GPU ran in that window is split by
    phase (the same exclusive rule as per rank), so ``sum(<phase>_ns) + gap_ns == duration_ns``.
    ``op_phase`` codes into ``config.names + [other]``,
    ``op_cycle`` the cycle range id (-1 none), ``op_input`` / ``range_input`` which report (codes),
    ``op_order`` the ops' stable order by (rank, start) when known."""
    if "is_cycle" not in ranges.columns:
        return _empty(config)
    is_cyc = ranges["is_cycle"].to_numpy(dtype=bool)
    if not is_cyc.any():
        return _empty(config)
    cyc = ranges[is_cyc].assign(_input=range_input[is_cyc])
    cyc = cyc.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    n = len(cyc)
    lo = np.full(n, np.iinfo(np.int64).max, dtype="int64")
    hi = np.full(n, np.iinfo(np.int64).min, dtype="int64")
    if windows is not None:     # one report, windows from the per-call spans (cycle_windows)
        w_id, w_lo, w_hi = windows
        at = pd.Index(w_id).get_indexer(cyc["range_id"].to_numpy(dtype="int64"))
        has_gpu = at >= 0
        lo[has_gpu], hi[has_gpu] = w_lo[at[has_gpu]], w_hi[at[has_gpu]]
    else:
        launched = np.flatnonzero(op_cycle >= 0)
        # cycle of every launched op: (report, range id) -> row of cyc
        rid_span = int(max(int(cyc["range_id"].max()), int(op_cycle.max()) if len(op_cycle) else 0)) + 2
        cyc_key = cyc["_input"].to_numpy(dtype="int64") * rid_span + cyc["range_id"].to_numpy(dtype="int64")
        op_key = op_input[launched] * rid_span + op_cycle[launched]
        code = pd.Index(cyc_key).get_indexer(op_key).astype("int64")
        ok = code >= 0
        if ok.any():   # sort + reduceat: np.minimum.at is slow on millions of ops
            c = code[ok]
            srt = np.argsort(c, kind="stable")
            c = c[srt]
            run = np.r_[0, np.flatnonzero(c[1:] != c[:-1]) + 1]
            lo[c[run]] = np.minimum.reduceat(op_start[launched][ok][srt], run)
            hi[c[run]] = np.maximum.reduceat(op_end[launched][ok][srt], run)
        has_gpu = np.bincount(code[ok], minlength=n) > 0
    cyc, lo, hi = cyc[has_gpu].reset_index(drop=True), lo[has_gpu], hi[has_gpu]
    n = len(cyc)
    cyc["cycle"] = cyc.groupby("rank").cumcount()
    win_rank = cyc["rank"].to_numpy(dtype="int64")

    # per rank (bounded temporaries): every op overlapping a window, clipped to it, split by phase
    n_ph = len(config.names)
    busy = np.zeros(n, dtype="int64")
    upto_all = np.zeros((n_ph, n), dtype="int64")
    for op_i, win, pos in _window_pairs_by_rank(op_rank, op_start, op_end, win_rank, lo, hi, op_order, presorted):
        if presorted is not None:
            start = np.clip(presorted[1][pos], lo[win], hi[win])
            end = np.clip(presorted[2][pos], lo[win], hi[win])
        else:
            start = np.clip(op_start[op_i], lo[win], hi[win])
            end = np.clip(op_end[op_i], lo[win], hi[win])
        phase = op_phase[op_i]
        del op_i, pos
        # pairs come by window, ops in start order (clipping keeps it): sort only when they do not
        if len(win) > 1 and not _sorted_pairs(win, start):
            srt = np.lexsort((start, win))      # one sort serves every union below
            win, start, end, phase = win[srt], start[srt], end[srt], phase[srt]
        busy += sorted_union_length(win, start, end, n)
        covered = np.zeros(len(win), dtype=bool)
        for i in range(n_ph):
            covered |= phase == i
            upto_all[i] += sorted_union_length(win[covered], start[covered], end[covered], n)
    return cycle_frame(cyc, lo, hi, busy, upto_all, marks, config)


def cycle_windows_table(ranges: pd.DataFrame, range_input: np.ndarray, windows):
    """(cycle ranges that launched GPU work, sorted by (rank, start) and numbered per rank, their
    GPU window starts, ends) from :func:`cycle_windows`' output; None when there are no cycles."""
    if "is_cycle" not in ranges.columns:
        return None
    is_cyc = ranges["is_cycle"].to_numpy(dtype=bool)
    if not is_cyc.any():
        return None
    cyc = ranges[is_cyc].assign(_input=range_input[is_cyc])
    cyc = cyc.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    w_id, w_lo, w_hi = windows
    at = pd.Index(w_id).get_indexer(cyc["range_id"].to_numpy(dtype="int64"))
    has_gpu = at >= 0
    cyc = cyc[has_gpu].reset_index(drop=True)
    cyc["cycle"] = cyc.groupby("rank").cumcount()
    return cyc, w_lo[at[has_gpu]], w_hi[at[has_gpu]]


def cycle_frame(cyc: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, busy: np.ndarray, upto_all: np.ndarray,
                marks: pd.DataFrame, config: PhaseConfig) -> pd.DataFrame:
    """The cycle table from its windows and unions: ``busy`` per window, ``upto_all[i]`` the union
    of the ops of phases 0..i per window (clipped to the window)."""
    phase_cols = [f"{p}_ns" for p in config.names] + [f"{OTHER}_ns"]
    win_rank = cyc["rank"].to_numpy(dtype="int64")
    n = len(cyc)
    out = pd.DataFrame({"rank": win_rank, "cycle": cyc["cycle"].to_numpy(), "start_ns": lo, "end_ns": hi,
                        "duration_ns": hi - lo, "cpu_start_ns": cyc["start_ns"].to_numpy(),
                        "cpu_end_ns": cyc["end_ns"].to_numpy()})
    nxt = out.groupby("rank")["cpu_start_ns"].shift(-1)
    out["period_ns"] = (nxt - out["cpu_start_ns"]).fillna(out["cpu_end_ns"] - out["cpu_start_ns"]).astype("int64")
    out["busy_ns"] = busy
    cumulative = np.zeros(n, dtype="int64")
    for i, name in enumerate(config.names):
        upto = upto_all[i]
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


def _accept_marks(marks: pd.DataFrame) -> pd.DataFrame:
    """The marks that carry ``accept_len=N``, with ``n``, ``reqs``, ``cycle`` (NaN: none) and
    ``lens`` parsed (each distinct text once, one compiled regex, no per-row pandas work)."""
    codes, texts = pd.factorize(np.asarray(marks["text"].to_numpy(dtype=object)), use_na_sentinel=False)
    n_of = np.full(len(texts) + 1, np.nan)
    reqs_of = np.full(len(texts) + 1, np.nan)
    cycle_of = np.full(len(texts) + 1, np.nan)
    lens_of = np.full(len(texts) + 1, None, dtype=object)
    for i, text in enumerate(texts):
        m = ACCEPT_MARK.search(text) if isinstance(text, str) else None
        if m:
            n_of[i] = float(m["n"])
            reqs_of[i] = float(m["reqs"]) if m["reqs"] is not None else np.nan
            cycle_of[i] = float(m["cycle"]) if m["cycle"] is not None else np.nan
            lens_of[i] = m["lens"]
    keep = ~np.isnan(n_of[codes])
    sel = marks[keep]
    return sel.assign(n=n_of[codes][keep], reqs=reqs_of[codes][keep], cycle=cycle_of[codes][keep],
                      lens=pd.Series(lens_of[codes][keep], index=sel.index, dtype=object))


def _accepted(cyc: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.Series, pd.Series, pd.Series]:
    """Accepted draft tokens, requests and per-request accept lengths (comma-separated) per cycle
    from ``accept_len=N reqs=M [cycle=K] [lens=a,b,...]`` marks of the same process: by ``cycle=K``
    the cycle range whose payload is K, else the cycle range containing the mark in time. A cycle
    with both kinds sums them. Marks naming a cycle outside the trace (a capture window that opened
    or closed mid-run) belong to no cycle."""
    accepted = pd.Series(np.nan, index=cyc.index, dtype="float64")
    requests = pd.Series(np.nan, index=cyc.index, dtype="float64")
    lengths = pd.Series(None, index=cyc.index, dtype=object)
    if marks is None or marks.empty:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    acc = _accept_marks(marks)
    if acc.empty:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    numbered = acc["cycle"].notna().to_numpy()
    by_number = _matched_by_number(cyc, acc[numbered])
    contained = _matched_by_time(cyc, acc[~numbered])
    pieces = [p for p in (contained, by_number) if p is not None and not p.empty]
    if not pieces:
        return accepted.astype("Int64"), requests.astype("Int64"), lengths
    hit = pd.concat(pieces).sort_values(["_row", "time_ns"], kind="stable")
    g = hit.groupby("_row", sort=True)
    n = g["n"].sum()
    reqs = g["reqs"].sum(min_count=1)
    accepted.loc[n.index] = n.to_numpy()
    requests.loc[reqs.index] = reqs.to_numpy()
    if hit["lens"].notna().any():
        joined = g["lens"].agg(lambda s: ",".join(x for x in s if isinstance(x, str)) or None)
        lengths.loc[joined.index] = joined.to_numpy()
    return accepted.astype("Int64"), requests.astype("Int64"), lengths


def _matched_by_number(cyc: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame | None:
    """``cycle=K`` marks joined to the cycle range of the same process and input with payload K
    (column ``_row``: the cycle's row label)."""
    if acc.empty or "int_value" not in cyc.columns:
        return None
    payload = pd.to_numeric(cyc["int_value"], errors="coerce")
    keyed = pd.DataFrame({"global_pid": cyc["global_pid"].to_numpy(), "input": cyc["input"].to_numpy(),
                          "cycle": payload.to_numpy(dtype="float64"), "_row": cyc.index.to_numpy()})
    keyed = keyed[keyed["cycle"].notna()].drop_duplicates(["global_pid", "input", "cycle"], keep="first")
    if keyed.empty:
        return None
    return acc.merge(keyed, on=["global_pid", "input", "cycle"], how="inner")


def concat_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)])`` (every ``hi >= lo``) without a
    Python step per range: one repeat and one arange."""
    lens = (np.asarray(hi, dtype="int64") - np.asarray(lo, dtype="int64"))
    before = np.cumsum(lens) - lens
    return np.repeat(np.asarray(lo, dtype="int64") - before, lens) + np.arange(int(lens.sum()), dtype="int64")


def _matched_by_time(cyc: pd.DataFrame, acc: pd.DataFrame) -> pd.DataFrame | None:
    """Marks without a cycle number joined to the cycle range containing them (same process and
    input, start <= time <= end)."""
    if acc.empty:
        return None
    out = []
    for (pid, inp), group in cyc.groupby(["global_pid", "input"]):
        same = acc[(acc["global_pid"] == pid) & (acc["input"] == inp)]
        if same.empty:
            continue
        same = same.sort_values("time_ns", kind="stable")
        t = same["time_ns"].to_numpy(dtype="int64")
        lo = np.searchsorted(t, group["start_ns"].to_numpy(dtype="int64"), side="left")
        hi = np.searchsorted(t, group["end_ns"].to_numpy(dtype="int64"), side="right")
        rows = np.repeat(group.index.to_numpy(), hi - lo)
        out.append(same.iloc[concat_ranges(lo, hi)].assign(_row=rows))
    return pd.concat(out) if out else None
