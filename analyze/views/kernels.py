"""Views of kernels: GPU time per (phase, kernel) summed over ranks, and the top kernels per phase."""
from __future__ import annotations

import pandas as pd

from analyze.views.phases import phase_order
from analyze.views.registry import get, view

COLUMNS = ["phase", "name", "instances", "total_ns", "mean_ns", "share"]
CYCLE_KERNEL_COLUMNS = ["rank", "phase", "name", "instances", "total_ns"]


def cycle_kernels_of(gpu_ops: pd.DataFrame | None) -> pd.DataFrame:
    """(rank, phase, name) -> instances, total_ns over the ops launched inside decode cycles (set-up work,
    weight uploads and warm-up outside cycles left out), from the per-op table; empty without one."""
    if gpu_ops is None or not len(gpu_ops) or "cycle_range" not in gpu_ops.columns:
        return pd.DataFrame({c: pd.Series(dtype="int64" if c in ("rank", "instances", "total_ns") else "object")
                             for c in CYCLE_KERNEL_COLUMNS})
    inside = gpu_ops[gpu_ops["cycle_range"].to_numpy() >= 0]
    dur = inside["end_ns"].to_numpy() - inside["start_ns"].to_numpy()
    frame = pd.DataFrame({"rank": inside["rank"].to_numpy(), "phase": inside["phase"].astype(str).to_numpy(),
                          "name": inside["name"].astype(str).to_numpy(), "d": dur})
    return frame.groupby(["rank", "phase", "name"], sort=False)["d"].agg(instances="size", total_ns="sum") \
        .reset_index()


@view("cycle_kernels", file=7)
def cycle_kernels(a) -> pd.DataFrame:
    """GPU time per (rank, exclusive phase, kernel) of the ops inside decode cycles: what diff divides
    by the cycles (the ``kernels`` table holds every op of the report); empty when the analysis kept
    no per-op table (analysed in chunks)."""
    return cycle_kernels_of(a.gpu_ops if len(a.cycles) else None)


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
