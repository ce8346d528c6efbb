"""Projecting NVTX ranges onto the GPU work launched inside them.

The rules are nsys' own (``nsys stats -r nvtx_gpu_proj_sum``):

* a GPU op (kernel, memcpy, memset) belongs to the CUDA API call with the same correlation id in
  the same process (correlation ids repeat across processes);
* an API call belongs to every NVTX range on the same thread that encloses it
  (``range.start <= call.start`` and ``call.end <= range.end``);
* a range's projection runs from the first start to the last end of its ops; its GPU op count is
  the number of distinct launching calls (a graph launch of eight kernels counts once).

Everything is vectorised: API calls are sorted by (thread, start) on one integer key, every range
becomes a contiguous block of calls, and blocks are reduced level by level (ranges at the same
nesting depth on a thread never overlap, so each level is one ``reduceat`` pass). Ranges that break
proper nesting (start/end ranges crossing each other) go through an exact slow path.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze.codes import factorize_objects, stable_order

PROJECTED_KINDS = ("kernel", "memcpy", "memset")
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


class CallIndex(NamedTuple):
    """API calls sorted by (thread, start), with one integer key per call."""

    order: np.ndarray        # position in the original calls table, in sorted order
    key: np.ndarray          # composite (thread, start) key, sorted
    end_key: np.ndarray      # composite (thread, end) key
    thread_of: dict          # global_tid -> dense thread index
    t0: int
    span: int
    monotone_threads: np.ndarray  # dense thread index -> call ends non-decreasing in start order


def build_call_index(calls: pd.DataFrame, ranges: pd.DataFrame) -> CallIndex:
    # distinct threads and the time range without concatenating the columns (millions of rows)
    uniq = np.unique(np.concatenate([pd.unique(calls["global_tid"].to_numpy(dtype="int64")),
                                     pd.unique(ranges["global_tid"].to_numpy(dtype="int64"))]))
    thread_of = {int(t): i for i, t in enumerate(uniq)}
    cols = [frame[c].to_numpy(dtype="int64") for frame in (calls, ranges) for c in ("start_ns", "end_ns")]
    cols = [c for c in cols if len(c)]
    t0 = min(int(c.min()) for c in cols) if cols else 0
    span = (max(int(c.max()) for c in cols) - t0 + 2) if cols else 2
    del cols
    if span * max(len(uniq), 1) >= 2 ** 62:
        raise ValueError("trace too long for the (thread, time) key: "
                         f"{len(uniq)} threads x {span} ns")
    tidx = np.searchsorted(uniq, calls["global_tid"].to_numpy(dtype="int64"))
    start = calls["start_ns"].to_numpy(dtype="int64")
    key = tidx * span + (start - t0)
    end_key = tidx * span + (calls["end_ns"].to_numpy(dtype="int64") - t0)
    order = _order_by_thread_then_start(tidx, start, key, len(uniq))
    key, end_key, tidx_sorted = key[order], end_key[order], tidx[order]
    monotone = np.ones(len(uniq), dtype=bool)
    if len(key) > 1:
        same = tidx_sorted[1:] == tidx_sorted[:-1]
        bad = same & (end_key[1:] < end_key[:-1])
        monotone[np.unique(tidx_sorted[1:][bad])] = False
    return CallIndex(order, key, end_key, thread_of, t0, span, monotone)


def _order_by_thread_then_start(tidx: np.ndarray, start: np.ndarray, key: np.ndarray, n_threads: int) -> np.ndarray:
    """The stable order of ``key`` = (thread, start). nsys writes the API calls in start order:
    then a stable sort by thread alone gives it (:func:`codes.stable_order`: by radix)."""
    if len(start) > 1 and bool((start[1:] >= start[:-1]).all()):
        return stable_order(tidx, 0, n_threads - 1)
    return np.argsort(key, kind="stable")


def range_keys(index: CallIndex, ranges: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if len(ranges):
        known = np.fromiter(index.thread_of.keys(), dtype="int64", count=len(index.thread_of))
        dense = np.fromiter(index.thread_of.values(), dtype="int64", count=len(index.thread_of))
        order = np.argsort(known)
        tidx = dense[order][np.searchsorted(known[order], ranges["global_tid"].to_numpy(dtype="int64"))]
    else:
        tidx = np.zeros(0, dtype="int64")
    start = tidx * index.span + (ranges["start_ns"].to_numpy(dtype="int64") - index.t0)
    end = tidx * index.span + (ranges["end_ns"].to_numpy(dtype="int64") - index.t0)
    return tidx, start, end


def range_blocks(index: CallIndex, ranges: pd.DataFrame, keys=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every range, the block [lo, hi) of sorted calls it encloses, and an 'exact' flag.

    A block holds the calls that start inside the range; calls that end after the range are cut
    from its tail. That is exact when call ends on the thread are ordered like call starts
    (sequential calls); where they are not, the flag is False and the caller must filter.
    ``keys``: :func:`range_keys` of ``ranges`` when the caller has them.
    """
    tidx, start_key, end_key = range_keys(index, ranges) if keys is None else keys
    # in row order (searches in a radix order by thread went in issue 42: 1.00x on the 1M files, none at 10M)
    lo = np.searchsorted(index.key, start_key, side="left")
    hi = np.searchsorted(index.key, end_key, side="right")
    while True:
        tail = hi > lo
        over = np.zeros(len(hi), dtype=bool)
        over[tail] = index.end_key[hi[tail] - 1] > end_key[tail]
        if not over.any():
            break
        hi[over] -= 1
    exact = index.monotone_threads[tidx] if len(tidx) else np.zeros(0, dtype=bool)
    return lo, hi, exact


def thread_start_order(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((-end, start, thread))``. NVTX ranges come in start order (nsys writes events
    that way), so a stable radix partition by thread is usually already in (start, -end) order
    within each thread: checked, and the full lexsort only when it is not."""
    if len(thread):
        order = stable_order(thread)
        t, s, e = thread[order], start[order], end[order]
        new = t[1:] != t[:-1]
        later = s[1:] > s[:-1]
        tie_ok = (s[1:] == s[:-1]) & (e[1:] <= e[:-1])
        if bool((new | later | tie_ok).all()):
            return order
    return np.lexsort((-end, start, thread))


def subset_blocks(index: CallIndex, ranges: pd.DataFrame, subset: pd.DataFrame, layout=None):
    """(lo, hi, exact, end_key, start_key) of the ranges in ``subset`` (rows of ``ranges``): the
    blocks taken from ``ranges``' :func:`range_layout` when given, else computed; the start keys
    (what :func:`paint_blocks` orders crossing ranges by) from :func:`range_keys`."""
    keys = range_keys(index, subset)
    if layout is None:
        lo, hi, exact = range_blocks(index, subset, keys)
        return lo, hi, exact, keys[2], keys[1]
    pos = ranges.index.get_indexer(subset.index)
    return layout[0][pos], layout[1][pos], layout[2][pos], layout[4][pos], keys[1]


def nesting_levels(thread: np.ndarray, start: np.ndarray, end: np.ndarray,
                   order: np.ndarray | None = None) -> np.ndarray:
    """Depth of every range among the given ranges of its thread (0 = outermost).

    depth = ranges of the thread that started before it (in (start, -end) order) minus those that
    ended strictly before its start. ``order``: :func:`thread_start_order` of the ranges when the
    caller has it.
    """
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype="int64")
    order = thread_start_order(thread, start, end) if order is None else order
    sorted_thread = thread[order]
    first = np.r_[0, np.flatnonzero(sorted_thread[1:] != sorted_thread[:-1]) + 1]
    counts = np.diff(np.r_[first, n])
    # per range, in (thread, start) order: the ranges of its thread that ended strictly before its start
    ended = np.empty(n, dtype="int64")
    base = min(int(start.min()), int(end.min()))          # (Python ints: no wrap-around)
    span = max(int(end.max()), int(start.max())) - base + 2
    lo_thread, hi_thread = int(sorted_thread[0]), int(sorted_thread[-1])
    if 0 <= lo_thread and (hi_thread + 1) * span < 2 ** 62:
        # one search over keys thread * span + time, the queries in (thread, start) order: they
        # ascend and walk the sorted ends once (1.5x faster at 2.5M ranges than in row order)
        end_keys = np.sort(sorted_thread * span + (end[order] - base), kind="stable")   # nearly sorted
        ended[:] = np.searchsorted(end_keys, sorted_thread * span + (start[order] - base), side="left")
        # minus the ends of earlier threads
        ended -= np.repeat(np.searchsorted(end_keys, sorted_thread[first] * span, side="left"), counts)
    else:   # keys would not fit in 64 bits (timestamps far apart, odd thread codes): a thread at a time
        for a, c in zip(first.tolist(), counts.tolist()):
            rows = order[a:a + c]
            ended[a:a + c] = np.searchsorted(np.sort(end[rows]), start[rows], side="left")
    depth = np.empty(n, dtype="int64")
    depth[order] = np.arange(n) - np.repeat(first, counts) - ended     # its position in its thread - ended
    return depth


def range_levels(ranges: pd.DataFrame) -> np.ndarray:
    """:func:`nesting_levels` of every range among the ranges of its thread (any code per thread
    gives the same depths: they are counted within a thread)."""
    thread = pd.factorize(ranges["global_tid"].to_numpy(dtype="int64"))[0].astype("int64")
    return nesting_levels(thread, ranges["start_ns"].to_numpy(dtype="int64"), ranges["end_ns"].to_numpy(dtype="int64"))


def distinct_levels(levels: np.ndarray) -> np.ndarray:
    """``np.unique(levels)``: nesting depths are a few small integers, counted by ``np.bincount``
    (NumPy's unique hashes every element: 80 ms for 2.5M ranges); ``np.unique`` itself where a
    depth is negative (a range that ends before it starts) or the depths are not integers."""
    if not len(levels) or levels.dtype.kind not in "iu" or levels.dtype == np.uint64 or int(levels.min()) < 0 \
            or int(levels.max()) > 1 << 20:
        return np.unique(levels)
    return np.flatnonzero(np.bincount(levels)).astype(levels.dtype, copy=False)


def _level_groups(levels: np.ndarray, lo: np.ndarray, hi: np.ndarray, exact: np.ndarray,
                  start_key: np.ndarray | None = None):
    """Yield (range positions, ok) per level, where ok marks ranges whose blocks are disjoint. The
    ranges of a level come in block order, or with ``start_key`` in start order (blocks are in
    start order too: a block starts at the first call at or after the range's start): an order
    that does not depend on which calls there are, for :func:`paint_blocks`, where the later of
    two crossing ranges wins."""
    if not len(levels):
        return
    # one sort by (level, key) instead of a pass over every range per level: deep nesting (hundreds
    # of thousands of levels on one thread) stays O(n log n), not O(n x depth)
    key = lo if start_key is None else start_key
    order = np.lexsort((key, levels))
    lv = levels[order]
    cuts = np.r_[0, np.flatnonzero(lv[1:] != lv[:-1]) + 1, len(order)]
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
        members = order[a:b]
        ok = exact[members].copy()
        if len(members) > 1:
            clash = lo[members][1:] < hi[members][:-1]
            ok[1:] &= ~clash
            ok[:-1] &= ~clash
        yield members, ok


SLOW_BATCH = 1_000_000   # (range, call) pairs expanded at once on the exact path


def _slow_pairs(members: np.ndarray, lo: np.ndarray, hi: np.ndarray, slow):
    """Batches of (range position per pair, sorted call per pair) for the calls each range truly
    encloses (exact path). ``slow`` is ``(call_end_key, range_end_key)`` (vectorised) or the old
    per-range callable ``slow(i) -> mask``."""
    if callable(slow):
        for i in members:
            calls = np.arange(lo[i], hi[i])[slow(i)]
            yield np.full(len(calls), i, dtype="int64"), calls
        return
    call_end, range_end = slow
    lens = np.maximum(hi[members] - lo[members], 0)
    start = 0
    while start < len(members):
        csum = np.cumsum(lens[start:])
        stop = start + max(1, int(np.searchsorted(csum, SLOW_BATCH, side="right")))
        part, plen = members[start:stop], lens[start:stop]
        total = int(plen.sum())
        if total:
            rid = np.repeat(part, plen)
            calls = np.arange(total) - np.repeat(np.cumsum(plen) - plen, plen) + np.repeat(lo[part], plen)
            keep = call_end[calls] <= range_end[rid]
            yield rid[keep], calls[keep]
        start = stop


def reduce_blocks(lo: np.ndarray, hi: np.ndarray, levels: np.ndarray, exact: np.ndarray,
                  values: np.ndarray, how: str, slow) -> np.ndarray:
    """Reduce ``values`` (per sorted call) over every range's block: how = 'sum' | 'min' | 'max'.

    Ranges needing the exact path (blocks that are not contiguous runs of enclosed calls) are
    filtered by ``slow``: ``(call_end_key, range_end_key)`` arrays (vectorised), or a callable
    ``slow(i)`` returning the boolean mask of calls in block i.
    """
    ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[how]
    neutral = {"sum": 0, "min": INT64_MAX, "max": INT64_MIN}[how]
    out = np.full(len(lo), neutral, dtype="int64")
    ext = np.append(values.astype("int64"), neutral)
    for members, ok in _level_groups(levels, lo, hi, exact):
        good = members[ok]
        if len(good):
            bounds = np.empty(2 * len(good), dtype="int64")
            bounds[0::2], bounds[1::2] = lo[good], hi[good]
            red = ufunc.reduceat(ext, bounds)[0::2]
            nonempty = hi[good] > lo[good]
            out[good[nonempty]] = red[nonempty]
        bad = members[~ok]
        if len(bad):
            for rid, calls in _slow_pairs(bad, lo, hi, slow):
                if not len(rid):
                    continue
                # pairs come grouped by range (in `bad` order): reduce each run
                first = np.r_[0, np.flatnonzero(rid[1:] != rid[:-1]) + 1]
                red = ufunc.reduceat(values[calls].astype("int64"), first)
                out[rid[first]] = red if how == "sum" else ufunc(out[rid[first]], red)
    return out


def paint_blocks(n_calls: int, lo: np.ndarray, hi: np.ndarray, levels: np.ndarray, exact: np.ndarray,
                 labels: np.ndarray, slow, dtype="int64", start_key: np.ndarray | None = None) -> np.ndarray:
    """Label every sorted call with the label of its deepest enclosing range (or -1), in an array
    of ``dtype`` (narrower than int64 when the labels fit). Of two crossing ranges of one level
    that enclose a call, the later one wins: by start with ``start_key`` (range_keys' start keys:
    the same whichever calls were prepared), else by block start."""
    owner = np.full(n_calls, -1, dtype=dtype)
    for members, ok in _level_groups(levels, lo, hi, exact, start_key):   # outermost level first
        good = members[ok]
        if len(good) == 1:              # one range at this depth (deep nesting): a slice, no index arrays
            g = int(good[0])
            if hi[g] > lo[g]:
                owner[lo[g]:hi[g]] = labels[g]
        elif len(good):
            lens = hi[good] - lo[good]
            total = int(lens.sum())
            if total:
                before = np.cumsum(lens) - lens
                offsets = np.repeat(lo[good] - before, lens)
                owner[offsets + np.arange(total)] = np.repeat(labels[good], lens)
        bad = members[~ok]
        if len(bad):
            for rid, calls in _slow_pairs(bad, lo, hi, slow):
                owner[calls] = labels[rid]     # later ranges (in the level's order) win
    return owner


def link_ops(ops: pd.DataFrame, calls: pd.DataFrame, index: CallIndex) -> np.ndarray:
    """Per GPU op, the sorted position of its launching API call (-1 when the call is missing)."""
    if len(ops) == 0:
        return np.zeros(0, dtype="int64")
    sorted_pos = _sorted_positions(index)
    left = pd.DataFrame({"global_pid": ops["global_pid"].to_numpy(dtype="int64"),
                         "correlation_id": ops["correlation_id"].to_numpy(dtype="int64")})
    right = pd.DataFrame({"global_pid": calls["global_pid"].to_numpy(dtype="int64"),
                          "correlation_id": calls["correlation_id"].to_numpy(dtype="int64"),
                          "pos": sorted_pos}).drop_duplicates(["global_pid", "correlation_id"])
    merged = left.merge(right, on=["global_pid", "correlation_id"], how="left", sort=False)
    return merged["pos"].fillna(-1).to_numpy(dtype="int64")


def range_layout(index: CallIndex, ranges: pd.DataFrame, levels: np.ndarray | None = None):
    """What :func:`project_ranges` needs about the ranges, independent of the ops: (lo, hi, exact,
    None, end_key, groups), groups = per nesting level (reduceat bounds of the ranges whose blocks
    are contiguous, those ranges, which of them have calls, the ranges for the exact path).
    Compute once, project several times. Call positions are int32 when the calls fit (millions of
    ranges: half the bytes held for the whole analysis). ``levels``: :func:`range_levels` of
    ``ranges`` when the caller has it (it needs no call)."""
    keys = range_keys(index, ranges)
    lo, hi, exact = range_blocks(index, ranges, keys)
    end_key = keys[2]
    del keys
    levels = range_levels(ranges) if levels is None else levels
    pos_t = "int32" if len(index.key) < 2 ** 31 - 1 else "int64"
    groups = []
    for members, ok in _level_groups(levels, lo, hi, exact):
        good = members[ok]
        bounds = np.empty(2 * len(good), dtype=pos_t)
        bounds[0::2], bounds[1::2] = lo[good], hi[good]
        groups.append((bounds, good.astype(pos_t), hi[good] > lo[good], members[~ok]))
    return lo.astype(pos_t), hi.astype(pos_t), exact, None, end_key, groups


def project_ranges(ranges: pd.DataFrame, index: CallIndex, has: np.ndarray, first: np.ndarray,
                   last: np.ndarray, layout=None) -> pd.DataFrame:
    """Per range: gpu_ops (distinct launching calls), gpu_start_ns, gpu_end_ns (nsys' projection).
    One pass over the nesting levels does the three reductions (count, min start, max end)."""
    lo, hi, exact, levels, end_key, groups = layout if layout is not None else range_layout(index, ranges)
    slow = (index.end_key, end_key)
    n = len(lo)
    n_ops = np.zeros(n, dtype="int64")
    g_start = np.full(n, INT64_MAX, dtype="int64")
    g_end = np.full(n, INT64_MIN, dtype="int64")
    # the per-call values with one neutral slot at the end (reduceat bounds may point there)
    v_has = np.zeros(len(has) + 1, dtype="int64")
    v_has[:-1] = has
    v_first = np.full(len(has) + 1, INT64_MAX, dtype="int64")
    np.copyto(v_first[:-1], first, where=has > 0)
    v_last = np.full(len(has) + 1, INT64_MIN, dtype="int64")
    np.copyto(v_last[:-1], last, where=has > 0)
    for bounds, good, nonempty, bad in groups:
        if len(good):
            keep = good[nonempty]
            n_ops[keep] = np.add.reduceat(v_has, bounds)[0::2][nonempty]
            g_start[keep] = np.minimum.reduceat(v_first, bounds)[0::2][nonempty]
            g_end[keep] = np.maximum.reduceat(v_last, bounds)[0::2][nonempty]
        if len(bad):
            for rid, calls in _slow_pairs(bad, lo, hi, slow):
                if not len(rid):
                    continue
                run = np.r_[0, np.flatnonzero(rid[1:] != rid[:-1]) + 1]
                at = rid[run]
                n_ops[at] += np.add.reduceat(v_has[calls], run)
                g_start[at] = np.minimum(g_start[at], np.minimum.reduceat(v_first[calls], run))
                g_end[at] = np.maximum(g_end[at], np.maximum.reduceat(v_last[calls], run))
    del v_has, v_first, v_last
    none = n_ops == 0
    g_start[none] = -1
    g_end[none] = -1
    return pd.DataFrame({"gpu_ops": n_ops, "gpu_start_ns": g_start, "gpu_end_ns": g_end}, index=ranges.index,
                        copy=False)


def text_codes(texts) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, distinct texts as an object array of str): ``pd.factorize(texts.astype(str))``
    without converting every row to a new string column (pandas 3 copies each text into Arrow)."""
    codes, uniq = factorize_objects(np.asarray(pd.Series(texts, copy=False).to_numpy(dtype=object)),
                                    use_na_sentinel=False)
    return codes, np.array([str(u) for u in uniq], dtype=object)


def full_range_names(ranges: pd.DataFrame) -> pd.Series:
    """nsys' spelling: ``domain:name``, ``:name`` for the default domain (built once per distinct
    pair: millions of ranges share a few names)."""
    if "full_name" in ranges.columns:
        return ranges["full_name"]
    if len(ranges) < 1000:
        return ranges["domain"].astype(str) + ":" + ranges["name"].astype(str)
    ncode, nuniq = text_codes(ranges["name"])
    dcode, duniq = text_codes(ranges["domain"])
    codes, uniq = pd.factorize(ncode.astype("int64") * (len(duniq) + 1) + dcode)
    uniq = np.asarray(uniq, dtype="int64")
    nuniq, duniq = np.asarray(nuniq, dtype=object), np.asarray(duniq, dtype=object)
    names = np.array([f"{d}:{n}" for n, d in zip(nuniq[uniq // (len(duniq) + 1)], duniq[uniq % (len(duniq) + 1)])],
                     dtype=object)
    return pd.Series(names[codes], index=ranges.index, name=None, dtype=object)


SUMMARY_SLICE = 1 << 20    # projected ranges grouped at once (the temporaries scale with it)


def nvtx_projection_summary(ranges: pd.DataFrame, projected: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``nsys stats -r nvtx_gpu_proj_sum``: one per (range name, style). Grouped on integer
    codes of the projected ranges only (millions of ranges, a few names), a slice at a time; the
    groups keep the order in which they first appear (ties in the final sort)."""
    cols = ["range", "style", "instances", "total_projected_ns", "total_range_ns", "gpu_ops"]
    n_ops = projected["gpu_ops"].to_numpy(dtype="int64")
    sel = np.flatnonzero(n_ops > 0)
    if not len(sel):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    full = full_range_names(ranges).to_numpy(dtype=object)
    style = ranges["style"].to_numpy(dtype=object)
    g_start, g_end = (projected[c].to_numpy(dtype="int64") for c in ("gpu_start_ns", "gpu_end_ns"))
    r_start, r_end = (ranges[c].to_numpy(dtype="int64") for c in ("start_ns", "end_ns"))
    code_of: dict[tuple, int] = {}
    sums = np.zeros((4, 0), dtype="int64")      # instances, projected, range time, ops per group
    for a in range(0, len(sel), SUMMARY_SLICE):
        part = sel[a:a + SUMMARY_SLICE]
        rcode, runiq = factorize_objects(full[part], use_na_sentinel=False)
        scode, suniq = factorize_objects(style[part], use_na_sentinel=False)
        local, luniq = pd.factorize(rcode.astype("int64") * len(suniq) + scode)   # first appearance
        del rcode, scode
        luniq = np.asarray(luniq, dtype="int64")
        lookup = np.array([code_of.setdefault((runiq[u // len(suniq)], suniq[u % len(suniq)]), len(code_of))
                           for u in luniq.tolist()], dtype="int64")
        if sums.shape[1] < len(code_of):
            sums = np.concatenate([sums, np.zeros((4, len(code_of) - sums.shape[1]), dtype="int64")], axis=1)
        g = lookup[local]
        del local
        for row, values in enumerate((np.ones(len(part), dtype="int64"), g_end[part] - g_start[part],
                                      r_end[part] - r_start[part], n_ops[part])):
            np.add.at(sums[row], g, values)
    keys = list(code_of)
    summary = pd.DataFrame({
        "range": pd.Series([k[0] for k in keys], dtype=object),
        "style": pd.Series([k[1] for k in keys], dtype=object),
        "instances": sums[0], "total_projected_ns": sums[1], "total_range_ns": sums[2], "gpu_ops": sums[3]})
    summary = summary.sort_values(["total_projected_ns", "range"], ascending=[False, True], kind="stable")
    return summary[cols].reset_index(drop=True)


# presence tables over (process, correlation id) keys (one byte per key) are used up to this size
PRESENCE_MAX_BYTES = 256 << 20
# (issue 42, 2026-12-05: without the tables, real_k1000000 1.36x wall, 1.38x peak; synth, sglang 1M +3-4% wall)
# rows per block when keys are made for millions of calls: small temporaries, reused (an array the
# size of a column is faulted in afresh every time: most of the cost on 4M calls)
KEY_BLOCK_ROWS = 1 << 17


def correlation_key_blocks(pids: pd.Index, pid: np.ndarray, corr: np.ndarray, lo: int, span: int):
    """Per block of KEY_BLOCK_ROWS rows: (its slice, the dense key per row = position of its process
    in ``pids`` x ``span`` + (corr - lo)). Every row's process must be in ``pids`` and its id in
    [lo, lo + span): nsys' correlation ids count up per process, so keys are dense."""
    for a in range(0, len(pid), KEY_BLOCK_ROWS):
        part = slice(a, a + KEY_BLOCK_ROWS)
        yield part, pids.get_indexer(pid[part]) * span + (corr[part] - lo)


def masked_key_blocks(pids: pd.Index, pid: np.ndarray, corr: np.ndarray, lo: int, span: int, missing: int):
    """:func:`correlation_key_blocks` for rows that may lie outside the key space (ops, whose process
    may have no calls or whose id may be outside the calls' range): such a row's key is ``missing``."""
    for a in range(0, len(pid), KEY_BLOCK_ROWS):
        part = slice(a, a + KEY_BLOCK_ROWS)
        p = pids.get_indexer(pid[part])
        rel = corr[part] - lo
        yield part, np.where((p >= 0) & (rel >= 0) & (rel < span), p * span + rel, missing)


def _position_dtype(n: int):
    """int32 for positions among ``n`` calls while they fit (a per-op array held to the end)."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def _lookup_blocks(keys: pd.Index, pos: np.ndarray, blocks, n: int) -> np.ndarray:
    """``pos`` of each block key's position in ``keys``, -1 where it is not there."""
    out = np.empty(n, dtype=pos.dtype)
    for part, key in blocks:
        at = keys.get_indexer(key)
        out[part] = np.where(at >= 0, pos[np.maximum(at, 0)], -1)
    return out


def link_op_arrays(pid: np.ndarray, corr: np.ndarray, calls: pd.DataFrame, index: CallIndex) -> np.ndarray:
    """:func:`link_ops` on arrays: :func:`link_with_keys` against the calls' :func:`call_keys` (ops
    outside the calls' key space link to nothing there), the pandas join where those do not fit."""
    keys = call_keys(calls, index)
    if keys is None:
        return link_ops(pd.DataFrame({"global_pid": pid, "correlation_id": corr}), calls, index)
    return link_with_keys(pid, corr, keys)


def _sorted_positions(index: CallIndex) -> np.ndarray:
    """Per call (row of the calls), its position in (thread, start) order."""
    n = len(index.order)
    sorted_pos = np.empty(n, dtype=_position_dtype(n))
    sorted_pos[index.order] = np.arange(n)
    return sorted_pos


class HashedCallKeys(NamedTuple):
    """The calls' keys where their correlation ids are sparse: one int64 per distinct (process,
    correlation id), process code * ``span`` + (id - ``corr_lo``), looked up by hash."""

    pids: pd.Index          # distinct processes of the calls
    corr_lo: int
    span: int               # correlation id range of the calls
    keys: pd.Index          # distinct call keys
    pos: np.ndarray         # sorted position of the first call of each key


# the calls' keys, made once, for linking ops chunk by chunk (:func:`call_keys`); issue 42: the direct
# per-process id tables beside them gained under 5% in time and peak on every benchmark file (10M
# SGLang: 10.8-11.8 s against 11.1-11.2 s, peaks equal; under --memory-budget 1GB 0.995 against 0.999
# GB): gone
CallKeys = HashedCallKeys


def call_keys(calls: pd.DataFrame, index: CallIndex) -> CallKeys | None:
    """None when there are no calls or the key space does not fit one int64 (:func:`link_ops` links
    those)."""
    c_pid = calls["global_pid"].to_numpy(dtype="int64")
    c_corr = calls["correlation_id"].to_numpy(dtype="int64")
    if not len(c_corr):
        return None
    lo, hi = int(c_corr.min()), int(c_corr.max())
    span = hi - lo + 1
    codes, uniques = pd.factorize(c_pid)
    pids = pd.Index(uniques)
    if span * (len(pids) + 1) >= 2 ** 62:
        return None
    # the calls in process order (a stable sort of narrow codes: a radix sort), each process' ids
    order = stable_order(codes, 0, len(pids) - 1)
    counts = np.bincount(codes, minlength=len(pids))
    del codes
    corr, pos = c_corr[order], _sorted_positions(index)[order]
    del order
    # hashed keys; the calls' order within a process kept, so the first of a key is the first call
    # read with it (np.unique's index sort is stable)
    c_key = np.repeat(np.arange(len(pids), dtype="int64"), counts) * span + (corr - lo)
    uk, first = np.unique(c_key, return_index=True)
    return HashedCallKeys(pids, lo, span, pd.Index(uk), pos[first])


def link_with_keys(pid: np.ndarray, corr: np.ndarray, keys: CallKeys) -> np.ndarray:
    """:func:`link_op_arrays` against precomputed :func:`call_keys` (ops of any chunk)."""
    return _lookup_blocks(keys.keys, keys.pos, masked_key_blocks(keys.pids, pid, corr, keys.corr_lo, keys.span, -1),
                          len(pid))


class CallSpans(NamedTuple):
    """Per sorted call: whether any op it launched was seen (0/1), the first op start, the last op
    end; accumulated over chunks of ops (:func:`update_call_span_pairs`)."""

    has: np.ndarray
    first: np.ndarray
    last: np.ndarray


def empty_call_spans(n_calls: int) -> CallSpans:
    return CallSpans(np.zeros(n_calls, dtype="int8"), np.full(n_calls, INT64_MAX, dtype="int64"),
                     np.full(n_calls, INT64_MIN, dtype="int64"))


def update_call_span_pairs(op_call: np.ndarray, start: np.ndarray, end: np.ndarray, sel: np.ndarray,
                           spans_sel: CallSpans, spans_all: CallSpans) -> None:
    """:func:`update_call_spans` for the ops ``sel`` marks (nsys' projection: kernels, memcpys,
    memsets) and for all ops at once."""
    # unbuffered minimum.at / maximum.at scatters, no sort: ops are not in call order, and sorting
    # them by call costs more than the scatter
    linked = op_call >= 0
    if linked.all():
        pos, s, e, m = op_call, start, end, sel
    else:
        pos, s, e, m = op_call[linked], start[linked], end[linked], sel[linked]
    if not len(pos):
        return
    spans_all.has[pos] = 1
    np.minimum.at(spans_all.first, pos, s)
    np.maximum.at(spans_all.last, pos, e)
    if not m.all():
        pos, s, e = pos[m], s[m], e[m]
    if len(pos):
        spans_sel.has[pos] = 1
        np.minimum.at(spans_sel.first, pos, s)
        np.maximum.at(spans_sel.last, pos, e)
