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
``pd.factorize`` whole.

Ordering rows by such codes (a process', thread's, rank's or phase's) is :func:`stable_order`: the
codes cast to the narrowest integer type that holds them, because NumPy's stable sort of 8- and
16-bit integers is a radix sort (one linear pass; 4M codes: 0.02 s against 0.1 s as int64)."""
from __future__ import annotations

import ctypes

import numpy as np
import pandas as pd

IDENTITY_MIN_ROWS = 1 << 15   # shorter columns: pd.factorize directly (no gain below)
DISTINCT_SHARE = 16           # more distinct objects than rows / this: pd.factorize directly
# (issue 42, 2026-12-05: pd.factorize instead: synth 10M 1.061x wall (pairs 0.59-1.40), 1.00x peak; 1M 1.00-1.04x)


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


NARROW_CODE_TYPES = (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32)


def code_dtype(lo: int, hi: int) -> np.dtype:
    """The narrowest integer type holding every code in [lo, hi] (int64 beyond 32 bits)."""
    for dtype in NARROW_CODE_TYPES:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def stable_order(codes: np.ndarray, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """``np.argsort(codes, kind="stable")`` for integer ``codes`` within [lo, hi] (their min and max
    when not given): the codes cast to :func:`code_dtype` first, so that up to 65,536 distinct codes
    sort by radix. Equal codes keep their order, as in the argsort of the codes themselves."""
    if not len(codes):
        return np.zeros(0, dtype=np.intp)
    if lo is None or hi is None:
        lo, hi = int(codes.min()), int(codes.max())
    return np.argsort(codes.astype(code_dtype(lo, hi), copy=False), kind="stable")


class _Pointers:
    """The ``__array_interface__`` of an object array's buffer read as pointer-sized integers."""

    def __init__(self, values: np.ndarray):
        self.__array_interface__ = {"data": (values.ctypes.data, True), "shape": values.shape,
                                    "strides": values.strides, "typestr": np.dtype(np.intp).str,
                                    "version": 3}


def _addresses(values: np.ndarray) -> np.ndarray:
    """The address of the object in each row (a copy: nothing points into ``values`` after)."""
    return np.array(_Pointers(values), dtype=np.intp, copy=True)
