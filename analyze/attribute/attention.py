"""Which GPU kernels are attention kernels, by name (SGLang's attention backends).

triton: ``_fwd_kernel`` (extend: verify, draft extend, prefill), ``_fwd_kernel_stage1/2`` and, for
grouped-query models, ``_fwd_grouped_kernel_stage1`` (decode); FlashInfer: ``BatchPrefillWith...`` /
``BatchDecodeWith...``; FA3: ``flash_fwd...`` / ``FlashAttnFwdSm90`` (+ ``FlashAttnFwdCombine``);
TRT-LLM: ``fmha...``. Names are the exports' demangled kernel names.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze.codes import factorize_objects

ATTENTION_PATTERN = r"_fwd_(?:grouped_)?kernel|attention|attn|flash_fwd|fmha|BatchPrefill|BatchDecode"
"""Case-insensitive; checked against every kernel name of the real fixtures (only triton's match there)."""


def is_attention(names) -> np.ndarray:
    """Per name: whether it is an attention kernel (:data:`ATTENTION_PATTERN`); None/NaN are not.
    The pattern runs once per distinct name (a profile's 1.4M kernels have ~100: 11 s -> 0.1 s)."""
    values = np.asarray(pd.Series(names, dtype=object).to_numpy(dtype=object))
    if not len(values):
        return np.zeros(0, dtype=bool)
    codes, uniques = factorize_objects(values)
    hit = pd.Series(uniques, dtype=object).str.contains(ATTENTION_PATTERN, case=False, regex=True, na=False)
    hit = np.append(hit.to_numpy(dtype=bool), False)        # the NA sentinel (-1) reads the last: False
    return hit[codes]
