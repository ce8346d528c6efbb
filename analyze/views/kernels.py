"""Views of kernels: GPU time per (phase, kernel) summed over ranks, and the top kernels per phase."""
from __future__ import annotations

import pandas as pd

from analyze.views.phases import phase_order
from analyze.views.registry import get, view

COLUMNS = ["phase", "name", "instances", "total_ns", "mean_ns", "share"]


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
