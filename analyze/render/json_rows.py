"""A table's rows as JSON text, a column at a time.

``--json`` writes every table one record per line, as ``json.dumps(record, default=plain)`` does
for the record ``outputs.records`` makes of each row (NumPy scalars as Python ones, NaN and NA as
null). Encoding millions of small dicts through ``json.dumps`` cost more than the whole analysis of
the synthetic 1M-kernel trace (139k records: 2.4 s). Here every column becomes an Arrow array of
JSON texts (integers by Arrow's cast, floats by ``float.__repr__``, strings by the C string
encoder, each distinct one once where that is safe) and Arrow joins each row's keys and texts (and
a slice's rows) without a Python step per cell. The text is the same byte for byte (tests/test_properties.py
compares it with ``json.dumps`` on mixed, odd and nested values); values that are neither text,
number, bool nor null (a dict or list in a cell) are still encoded by ``json.dumps`` with the same
``default``.
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_INF = float("inf")


def float_text(value: float) -> str:
    """A float as ``json.dumps`` writes it (``allow_nan``: NaN, Infinity, -Infinity)."""
    if value != value:
        return "NaN"
    if value == _INF:
        return "Infinity"
    if value == -_INF:
        return "-Infinity"
    return float.__repr__(value)


def value_text(value, default: Callable) -> str:
    """One plain value as ``json.dumps(value, default=default)`` writes it."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return float_text(value)
    return json.dumps(value, default=default)


def column_texts(column: pd.Series, plain: Callable) -> pa.Array:
    """One column's values, made plain as ``outputs._column_values`` makes them, as JSON text: an
    Arrow string array without nulls. Integers by Arrow's cast (the decimal text ``int.__repr__``
    writes), bools as true/false, floats as ``float.__repr__`` (NaN as null, infinities as the
    encoder writes them), strings, nullable integers and bools, categoricals and Arrow strings each
    distinct value once, an object column of missing values alone as null, anything else value by
    value through ``plain``."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        values = column.to_numpy()
        if dtype.kind in "iu":
            return pc.cast(pa.array(values), pa.string())
        if dtype.kind == "b":
            return pc.if_else(pa.array(values), "true", "false")
        if dtype.kind == "f":
            floats = values.tolist()
            if np.isfinite(values).all():
                return _texts(list(map(float.__repr__, floats)))
            return _texts(["null" if v != v else float_text(v) for v in floats])
        if dtype.kind == "O":
            inferred = pd.api.types.infer_dtype(values, skipna=True)
            if inferred == "string":
                return _coded_texts(*pd.factorize(values), plain)
            if inferred == "empty" and set(map(type, values)) <= _MISSING_TYPES:    # every cell null
                return _coded_texts(np.full(len(values), -1), [], plain)
        return _texts([_cell_text(v, plain) for v in values.tolist()])
    if isinstance(dtype, pd.CategoricalDtype):
        return _coded_texts(column.cat.codes.to_numpy(), column.cat.categories, plain)
    if dtype.kind in "iub" or isinstance(dtype, pd.StringDtype):
        return _coded_texts(*pd.factorize(column.array), plain)
    return _texts([_cell_text(v, plain) for v in column.tolist()])


# the types of the missing values ``plain`` makes None (float NaN of any width, None, pd.NA, pd.NaT):
# an object column of these alone is null in every row
_MISSING_TYPES = {type(None), float, np.float64, np.float32, np.float16, type(pd.NA), type(pd.NaT)}


def _texts(texts: list[str]) -> pa.Array:
    return pa.array(texts, type=pa.string())


def _cell_text(value, plain: Callable) -> str:
    return encode_basestring_ascii(value) if type(value) is str else value_text(plain(value), plain)


def _coded_texts(codes: np.ndarray, uniques, plain: Callable) -> pa.Array:
    """Per row, the text of its distinct value (``codes`` into ``uniques``, -1: missing, which
    ``plain`` makes null): each distinct value encoded once. Only for values whose equality is
    identity of their text (strings, integers, bools, categories): pandas' hashing would merge 1,
    1.0 and True, or 0.0 and -0.0."""
    texts = [_cell_text(v, plain) for v in list(uniques)] + ["null"]
    codes = np.asarray(codes)
    return _texts(texts).take(pa.array(np.where(codes < 0, len(texts) - 1, codes)))


def key_text(name) -> str:
    """A column name as ``json.dumps`` writes it as a key (a number or None as its text)."""
    return json.dumps({name: 0})[1:-len(": 0}")]


def row_texts(frame: pd.DataFrame, plain: Callable) -> pa.Array | None:
    """One JSON object per row of ``frame`` (an Arrow string array; None without columns):
    ``{"col": value, ...}`` with ``json.dumps``' separators, the columns in order, values made plain
    as ``outputs.records`` does, each row the keys and its columns' texts joined by Arrow."""
    if not len(frame.columns):          # as outputs.records: no columns, no records
        return None
    parts: list = []
    for i, name in enumerate(frame.columns):
        parts += [("{" if i == 0 else ", ") + key_text(name) + ": ", column_texts(frame[name], plain)]
    return pc.binary_join_element_wise(*parts, "}", "")


def json_text(frame: pd.DataFrame, plain: Callable, separator: str) -> str:
    """:func:`row_texts` joined by ``separator``, as one string made by Arrow (no Python string
    per row)."""
    rows = row_texts(frame, plain)
    if rows is None or not len(rows):
        return ""
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array([0, len(rows)], type=pa.int32()), rows), separator)
    return joined[0].as_py()
