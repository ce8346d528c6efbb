"""Attention per decode cycle: what a plain decode step's target forward runs instead of the verify's.

SGLang's verify runs the target forward in ``target_verify`` mode: its attention backend's extend
(prefill-with-KV-cache) kernel over batch x (steps + 1) query tokens, once per layer. A plain decode
step runs the backend's *decode* kernel over batch query tokens, at the same context. At long
context the two differ by far more than their query tokens: on the real 64-layer H200 profile
(fixtures/real/sglang_v2_l64_s3_b4, triton backend) the verify's ``_fwd_kernel`` takes 40 us a layer
at batch 1, the decode kernels ``_fwd_kernel_stage1/2`` 12 us. So a plain step's GPU time is not the
verify's: the estimate (model.plain_step) swaps the verify's attention kernels for decode attention
at the draft forwards' cost per layer. The draft forwards (SGLang at >= 2 steps) are decode-mode
forwards of the draft model (one layer for EAGLE-3) over the same context, so their attention time
per forward is one layer's decode attention.

Assumptions (said with the estimate): one attention kernel launch per target layer in the verify
(extend kernels: triton ``_fwd_kernel``, FlashInfer's prefill kernel, FA3); a one-layer draft with the
target's head layout. Without draft forwards (1 step, or eager traces without kernels) the swap is
not made.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

ATTENTION_PATTERN = r"_fwd_kernel|attention|attn|flash_fwd|fmha|BatchPrefill|BatchDecode"
"""Kernel names of SGLang's attention backends (triton, FlashInfer, FA3, TRT-LLM MHA), case-insensitive."""

COLUMNS = ("verify_attention_ns", "verify_attention_kernels", "draft_attention_ns")


def is_attention(names: pd.Series) -> np.ndarray:
    return names.astype(str).str.contains(ATTENTION_PATTERN, case=False, regex=True).to_numpy(dtype=bool)


def per_cycle(ops: pd.DataFrame | None, cycles: pd.DataFrame) -> pd.DataFrame:
    """Per cycle of the lowest rank: the verify's attention kernel time and launches, and the draft's
    attention kernel time (ops assigned to the cycle whose GPU period holds their start). Empty
    columns (NaN) without per-op kernels."""
    out = pd.DataFrame({"cycle": cycles["cycle"].drop_duplicates().to_numpy()})
    for col in COLUMNS:
        out[col] = np.nan
    need = {"kind", "name", "phase", "rank", "start_ns", "duration_ns"}
    lo_col, hi_col = "gpu_period_start_ns", "gpu_period_end_ns"
    if ops is None or not len(ops) or not need <= set(ops.columns) or lo_col not in cycles.columns \
            or not len(cycles):
        return out
    rank = cycles["rank"].min()
    c = cycles[(cycles["rank"] == rank) & cycles[lo_col].notna() & cycles[hi_col].notna()].sort_values(lo_col)
    if c.empty:
        return out
    o = ops[(ops["kind"] == "kernel") & (ops["rank"] == rank) & ops["phase"].isin(("verify", "draft"))]
    o = o[is_attention(o["name"])]
    lo, hi = c[lo_col].to_numpy(dtype="int64"), c[hi_col].to_numpy(dtype="int64")
    start = o["start_ns"].to_numpy(dtype="int64")
    i = np.searchsorted(lo, start, side="right") - 1
    inside = (i >= 0) & (start < hi[np.clip(i, 0, None)])
    o = pd.DataFrame({"cycle": c["cycle"].to_numpy()[i[inside]], "phase": o["phase"].to_numpy()[inside],
                      "ns": o["duration_ns"].to_numpy(dtype="float64")[inside]})
    verify = o[o["phase"] == "verify"].groupby("cycle")["ns"].agg(["sum", "size"])
    draft = o[o["phase"] == "draft"].groupby("cycle")["ns"].sum()
    out = out.set_index("cycle")
    out["verify_attention_ns"] = verify["sum"].reindex(out.index).fillna(0.0)
    out["verify_attention_kernels"] = verify["size"].reindex(out.index).fillna(0).astype("float64")
    out["draft_attention_ns"] = draft.reindex(out.index).fillna(0.0)
    return out.reset_index()


def plain_attention(costs: dict) -> dict | None:
    """The plain decode step's attention from a profile's mean costs: the verify's attention launches
    (one a layer) x the draft's decode attention per forward; None where it cannot be told (no draft
    forwards, no attention kernels found)."""
    v, n, d = (costs.get(k, np.nan) for k in COLUMNS)
    forwards = costs.get("draft_forwards", 0)
    if not (np.isfinite(v) and np.isfinite(n) and np.isfinite(d)) or forwards < 1 or n < 1 or d <= 0 or v <= 0:
        return None
    per_layer = d / forwards
    return {"verify_attention_ns": float(v), "layers": float(n), "decode_attention_per_layer_ns": float(per_layer),
            "plain_attention_ns": float(n * per_layer)}
