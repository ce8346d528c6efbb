"""Integer codes for columns of Python objects (texts): exactly what ``pd.factorize`` gives, the rows
coded by the object they hold first, then only the distinct objects by value.

The readers hand texts over as object arrays in which equal texts share one Python string
(read/fastread.py decodes each distinct text once), and the columns built from them share theirs
(``names[codes]``). ``pd.factorize`` hashes and compares every row of an object column and checks
each for NA first: 0.3 s per column of 2.5M NVTX ranges, several columns per report. Here the rows
are coded by the object's address (an integer column: pandas' integer hash table, about 0.03 s),
and the few distinct objects by value with ``pd.factorize`` itself, so equal texts held by
different objects, NaN and None come out as pandas codes them, in first-appearance order. A
column of mostly distinct objects (more than one in :data:`DISTINCT_SHARE` rows) is handed to
``pd.factorize`` whole."""
from __future__ import annotations

import ctypes

import numpy as np
import pandas as pd

IDENTITY_MIN_ROWS = 1 << 15   # shorter columns: pd.factorize directly (no gain below)
DISTINCT_SHARE = 16           # more distinct objects than rows / this: pd.factorize directly


def factorize_objects(values: np.ndarray, use_na_sentinel: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, use_na_sentinel=...)`` for a 1-D NumPy array (codes, uniques); object
    arrays of many rows are coded by identity first (the module's docstring)."""
    if not isinstance(values, np.ndarray) or values.dtype != object or values.ndim != 1 \
            or len(values) < IDENTITY_MIN_ROWS:
        return pd.factorize(values, use_na_sentinel=use_na_sentinel)
    row_code, addresses = pd.factorize(_addresses(values))
    if len(addresses) * DISTINCT_SHARE > len(values):
        return pd.factorize(values, use_na_sentinel=use_na_sentinel)
    distinct = np.empty(len(addresses), dtype=object)
    for i, address in enumerate(addresses.tolist()):     # live objects: ``values`` holds each
        distinct[i] = ctypes.cast(address, ctypes.py_object).value
    value_code, uniques = pd.factorize(distinct, use_na_sentinel=use_na_sentinel)
    return value_code[row_code], uniques


class _Pointers:
    """The ``__array_interface__`` of an object array's buffer read as pointer-sized integers."""

    def __init__(self, values: np.ndarray):
        self.__array_interface__ = {"data": (values.ctypes.data, True), "shape": values.shape,
                                    "strides": values.strides, "typestr": np.dtype(np.intp).str,
                                    "version": 3}


def _addresses(values: np.ndarray) -> np.ndarray:
    """The address of the object in each row (a copy: nothing points into ``values`` after)."""
    return np.array(_Pointers(values), dtype=np.intp, copy=True)
