"""Attention per decode cycle: what a plain decode step's target forward runs instead of the verify's.

SGLang's verify runs the target forward in ``target_verify`` mode: its attention backend's extend
(prefill-with-KV-cache) kernel over batch x (steps + 1) query tokens, in every layer. A plain decode
step runs the backend's *decode* kernel over batch query tokens, at the same context. At long
context the two differ by far more than their query tokens: on the real 64-layer H200 profile
(fixtures/real/sglang_v2_l64_s3_b4, triton backend) the verify's ``_fwd_kernel`` takes 40 us a layer
at batch 1, the decode kernels ``_fwd_kernel_stage1/2`` 12 us. So a plain step's GPU time is not the
verify's: the estimate (model.plain_step) swaps the verify's attention kernels for decode attention
at the draft forwards' cost per layer. The draft forwards (SGLang at >= 2 steps) are decode-mode
forwards of the draft model (one layer for EAGLE-3) over the same context, so their attention time
per forward is one layer's decode attention; the draft extend is an extend-mode forward of that one
layer, so its attention launches per cycle are the launches a layer (1 for triton, 2 for FA3's
forward + combine) that turn the verify's launches into its layers.

Assumptions (said with the estimate): a one-layer draft with the target's head layout; draft top-k 1
(top-k > 1 drafts topk queries a request: not swapped). Not swapped, and said why: at 1 step (no draft
forward), without per-op kernels (a live log, a JSON result, graph-level CUDA-graph traces), or when no
attention kernel is found (attribute/attention.py names them).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.attribute.attention import is_attention

COLUMNS = ("verify_attention_ns", "verify_attention_launches", "draft_attention_ns", "extend_attention_launches")
"""Per-cycle columns :func:`per_cycle` adds to whatif's samples (model.profile_samples)."""


def per_cycle(ops: pd.DataFrame | None, cycles: pd.DataFrame) -> pd.DataFrame:
    """Per cycle of the lowest rank: the verify's attention kernel time and launches, the draft's
    attention kernel time, the draft extend's attention launches (ops assigned to the cycle whose
    GPU period holds their start). NaN for cycles of other ranks only and without per-op kernels."""
    out = pd.DataFrame({"cycle": cycles["cycle"].drop_duplicates().to_numpy()})
    for col in COLUMNS:
        out[col] = np.nan
    need = {"kind", "name", "phase", "rank", "start_ns", "end_ns"}
    lo_col, hi_col = "gpu_period_start_ns", "gpu_period_end_ns"
    if ops is None or not len(ops) or not need <= set(ops.columns) or lo_col not in cycles.columns \
            or not len(cycles):
        return out
    rank = cycles["rank"].min()
    c = cycles[(cycles["rank"] == rank) & cycles[lo_col].notna() & cycles[hi_col].notna()].sort_values(lo_col)
    if c.empty:
        return out
    # the rows picked by masks over single columns, then only the three columns read taken (a boolean
    # index of the whole per-op table copies its every column: 0.19 -> 0.05 s on the 1.4M-op grid profile)
    rows = np.flatnonzero(((ops["kind"] == "kernel") & (ops["rank"] == rank)
                           & ops["phase"].isin(("verify", "draft", "draft_extend"))).to_numpy())
    rows = rows[np.asarray(is_attention(ops["name"].take(rows)), dtype=bool)]
    phase = ops["phase"].to_numpy()[rows]
    lo, hi = c[lo_col].to_numpy(dtype="int64"), c[hi_col].to_numpy(dtype="int64")
    start = ops["start_ns"].to_numpy(dtype="int64")[rows]
    i = np.searchsorted(lo, start, side="right") - 1
    inside = (i >= 0) & (start < hi[np.clip(i, 0, None)])
    o = pd.DataFrame({"cycle": c["cycle"].to_numpy()[i[inside]], "phase": phase[inside],
                      "ns": (ops["end_ns"].to_numpy(dtype="int64")[rows] - start)[inside].astype("float64")})
    own = pd.Index(c["cycle"].drop_duplicates())

    def per(phase, how):
        g = o[o["phase"] == phase].groupby("cycle")["ns"]
        return (g.sum() if how == "sum" else g.size().astype("float64")).reindex(own).fillna(0.0)

    out = out.set_index("cycle")
    out.loc[own, "verify_attention_ns"] = per("verify", "sum")
    out.loc[own, "verify_attention_launches"] = per("verify", "size")
    out.loc[own, "draft_attention_ns"] = per("draft", "sum")
    out.loc[own, "extend_attention_launches"] = per("draft_extend", "size")
    return out.reset_index()


def plain_attention(costs: dict) -> tuple[dict | None, str]:
    """(the plain decode step's attention, or None; why not) from a profile's mean costs: the target's
    layers (verify attention launches / the draft extend's launches a layer, 1 without a draft extend)
    x the draft's decode attention per forward."""
    v, n, d, per_layer = (costs.get(k, np.nan) for k in COLUMNS)
    forwards = costs.get("draft_forwards", 0)
    topk = costs.get("draft_topk")
    if not (np.isfinite(v) and np.isfinite(n) and np.isfinite(d)):
        return None, "no per-op kernels"
    if forwards < 1:
        return None, "no draft forward at this step count"
    if topk is not None and topk > 1:
        return None, f"draft top-k {topk}: its decode attention is not one query a request"
    if n <= 0 or v <= 0 or d <= 0:
        return None, "no attention kernel found in the verify or the draft"
    launches = per_layer if np.isfinite(per_layer) and per_layer >= 1 else 1.0
    layers = n / launches
    decode = d / forwards
    return {"verify_attention_ns": float(v), "verify_attention_launches": float(n), "layers": float(layers),
            "decode_attention_per_layer_ns": float(decode), "plain_attention_ns": float(layers * decode)}, ""
