"""Integer id columns held narrow: int32 whenever every value fits, int64 otherwise.

Device, stream and string ids, and rows of a report's own tables, fit in int32 in any real export;
holding them as int32 halves what they take (the per-op table of a 10M-op report: 40 MiB a column
instead of 80). A value never changes: a column with one value outside int32 stays int64.
"""
from __future__ import annotations

import numpy as np

ID_DTYPE = np.int32
_INFO = np.iinfo(ID_DTYPE)


def fits(values: np.ndarray) -> bool:
    """Whether every value of the integer array ``values`` fits in :data:`ID_DTYPE` (an empty one does)."""
    values = np.asarray(values)
    if not len(values) or values.dtype == ID_DTYPE:
        return True
    return bool(values.min() >= _INFO.min and values.max() <= _INFO.max)


def narrow_ids(values: np.ndarray) -> np.ndarray:
    """Integer ids as int32 when every one fits in it, else as they are (int64). Values never change."""
    values = np.asarray(values)
    return values.astype(ID_DTYPE, copy=False) if fits(values) else values
