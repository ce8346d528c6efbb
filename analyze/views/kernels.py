"""Views of kernels: GPU time per (phase, kernel) summed over ranks, and the top kernels per phase."""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze import opstore
from analyze.codes import factorize_objects
from analyze.views.phases import phase_order
from analyze.views.registry import get, view

COLUMNS = ["phase", "name", "instances", "total_ns", "mean_ns", "share"]
CYCLE_KERNEL_COLUMNS = ["rank", "phase", "name", "instances", "total_ns"]


BLOCK_ROWS = 1 << 20
""":func:`cycle_kernels_of` codes the per-op table this many rows at a time (SGLang 10M ops: the view
2.4 s and +300 MB at the peak -> 0.8 s and +0; docs/performance.md, round 28)."""


def cycle_kernels_of(gpu_ops: pd.DataFrame | None) -> pd.DataFrame:
    """(rank, phase, name) -> instances, total_ns over the ops launched inside decode cycles (set-up work,
    weight uploads and warm-up outside cycles left out), from the per-op table; empty without one. Groups
    in order of first appearance in the table, counted :data:`BLOCK_ROWS` rows at a time (the blocks'
    groups summed in block order: the same groups in the same order as one pass)."""
    if gpu_ops is None or not len(gpu_ops) or "cycle_range" not in gpu_ops.columns:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("rank", "instances", "total_ns") else "object")
                             for c in CYCLE_KERNEL_COLUMNS})
    if len(gpu_ops) <= BLOCK_ROWS:
        return _cycle_kernels_block(gpu_ops)
    return _summed([_cycle_kernels_block(gpu_ops.iloc[a:a + BLOCK_ROWS]) for a in range(0, len(gpu_ops), BLOCK_ROWS)])


def _summed(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Partial cycle-kernel tables summed by (rank, phase, name), groups in order of first appearance."""
    held = [p for p in parts if len(p)]
    if len(held) <= 1:
        return held[0] if held else parts[0]
    merged = pd.concat(held, ignore_index=True)
    return merged.groupby(["rank", "phase", "name"], sort=False, dropna=False) \
        .agg(instances=("instances", "sum"), total_ns=("total_ns", "sum")).reset_index()


def _cycle_kernels_block(gpu_ops: pd.DataFrame) -> pd.DataFrame:
    """:func:`cycle_kernels_of` of one block of rows."""
    rows = np.flatnonzero(gpu_ops["cycle_range"].to_numpy() >= 0)
    if not len(rows):          # no op inside a cycle: the table's columns, typed, without a row
        return pd.DataFrame({"rank": gpu_ops["rank"].iloc[:0].to_numpy(), "phase": np.empty(0, dtype=object),
                             "name": np.empty(0, dtype=object), "instances": np.empty(0, dtype="int64"),
                             "total_ns": np.empty(0, dtype=gpu_ops["end_ns"].dtype)})
    # integer codes, then one sort: what ``groupby(["rank", "phase", "name"], sort=False)`` of the texts
    # gives (groups in order of first appearance, texts as ``astype(str)`` makes them), without a
    # string per row (10M ops: 20 s and 8.7 GB peak -> under a second)
    coded = [_text_codes(gpu_ops[c].to_numpy()[rows]) for c in ("phase", "name")]
    if any(c is None for c in coded):        # a value that is no text: pandas' own groupby decides
        return _cycle_kernels_by_groupby(gpu_ops.iloc[rows])
    (phase_code, phases), (name_code, names) = coded
    rank_code, ranks = pd.factorize(gpu_ops["rank"].to_numpy()[rows])
    key = (rank_code.astype("int64") * len(phases) + phase_code) * len(names) + name_code
    group, keys = pd.factorize(key)
    order = np.argsort(group, kind="stable")
    counts = np.bincount(group, minlength=len(keys))
    dur = (gpu_ops["end_ns"].to_numpy() - gpu_ops["start_ns"].to_numpy())[rows][order]
    totals = np.add.reduceat(dur, np.r_[0, np.cumsum(counts)[:-1]]) if len(dur) else np.zeros(0, dtype=dur.dtype)
    keys = np.asarray(keys, dtype="int64")
    name_of, rest = keys % len(names), keys // len(names)
    return pd.DataFrame({"rank": np.asarray(ranks)[rest // len(phases)], "phase": phases[rest % len(phases)],
                         "name": names[name_of], "instances": counts.astype("int64"), "total_ns": totals})


def _text_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(codes of ``values``, the distinct texts in order of first appearance) where every value is a
    ``str`` (what the groupby over ``astype(str)`` keys by: equal texts one group); None where some
    value is not (None, NaN, a number, bytes: ``astype(str)`` and the groupby of NA keys differ
    between pandas versions, and values that compare equal can print differently)."""
    code, uniques = factorize_objects(values, use_na_sentinel=False)
    if not all(type(u) is str for u in uniques):
        return None
    return code, np.asarray(uniques, dtype=object)


def _cycle_kernels_by_groupby(ops: pd.DataFrame) -> pd.DataFrame:
    """:func:`cycle_kernels_of` by pandas' groupby over the texts (its columns and types when empty)."""
    dur = ops["end_ns"].to_numpy() - ops["start_ns"].to_numpy()
    frame = pd.DataFrame({"rank": ops["rank"].to_numpy(), "phase": ops["phase"].astype(str).to_numpy(),
                          "name": ops["name"].astype(str).to_numpy(), "d": dur})
    return frame.groupby(["rank", "phase", "name"], sort=False)["d"].agg(instances="size", total_ns="sum") \
        .reset_index()


CYCLE_KERNEL_OP_COLUMNS = ["rank", "phase", "name", "start_ns", "end_ns", "cycle_range"]
"""The op store's columns :func:`cycle_kernels_of_store` reads."""


def cycle_kernels_of_store(store) -> pd.DataFrame:
    """:func:`cycle_kernels_of` over an op store (analyze.opstore): the per-op table at once where the
    store holds one (a report analysed whole: groups in order of first appearance in it), else the
    ops inside cycles a rank and a part at a time (reports analysed in chunks: bounded memory), each
    part's groups summed into the groups of the parts before (first appearance in (rank, start)
    order). The same rows and figures either way; only their order can differ."""
    frame = store.frame
    if frame is not None or not len(store):
        return cycle_kernels_of(frame)
    return _summed([cycle_kernels_of(p) for p in store.scan(CYCLE_KERNEL_OP_COLUMNS, in_cycles=True)]
                   or [cycle_kernels_of(None)])


@view("cycle_kernels", file=7)
def cycle_kernels(a) -> pd.DataFrame:
    """GPU time per (rank, exclusive phase, kernel) of the ops inside decode cycles: what diff divides
    by the cycles (the ``kernels`` table holds every op of the report), from the analysis' op store
    (a report analysed in chunks too)."""
    return cycle_kernels_of_store(opstore.of(a)) if len(a.cycles) else cycle_kernels_of(None)


@view("kernel_totals")
def kernel_totals(a, rank: int | None = None) -> pd.DataFrame:
    """Per (exclusive phase, kernel name): instances and GPU time summed over ranks (or of one
    ``rank``), the mean per instance, and the ``share`` of the phase's kernel time."""
    k = a.kernels
    if k is None or k.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in COLUMNS})
    if rank is not None:
        k = k[k["rank"] == rank]
    g = k.groupby(["phase", "name"], sort=False).agg(instances=("instances", "sum"),
                                                    total_ns=("total_ns", "sum")).reset_index()
    g["mean_ns"] = g["total_ns"] / g["instances"].clip(lower=1)
    phase_total = g.groupby("phase")["total_ns"].transform("sum")
    g["share"] = (g["total_ns"] / phase_total.where(phase_total > 0)).fillna(0.0)
    return g[COLUMNS]


@view("top_kernels")
def top_kernels(a, top: int = 5, rank: int | None = None, phases: tuple | None = None) -> pd.DataFrame:
    """The ``top`` kernels of every phase by GPU time (:func:`kernel_totals`), the phases in
    :func:`phase_order` (or those of ``phases``, in that order), kernels by time, most first."""
    g = get(a, "kernel_totals", rank=rank)
    wanted = list(phases) if phases is not None else phase_order(a)
    parts = [g[g["phase"] == p].sort_values("total_ns", ascending=False, kind="stable").head(top) for p in wanted]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else g.iloc[0:0].reset_index(drop=True)
