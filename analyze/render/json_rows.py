"""A table's rows as JSON text, a column at a time.

``--json`` writes every table one record per line, as ``json.dumps(record, default=plain)`` does
for the record ``outputs.records`` makes of each row (NumPy scalars as Python ones, NaN and NA as
null). Encoding millions of small dicts through ``json.dumps`` cost more than the whole analysis of
the synthetic 1M-kernel trace (139k records: 2.4 s); here each column becomes its JSON fragments in
one pass by its dtype (integers by ``int.__repr__``, floats as the encoder writes them, strings by
the C string encoder), and the records are joined from those fragments. The text is the same byte
for byte (tests/test_properties.py compares it with ``json.dumps`` on mixed, odd and nested
values); values that are neither text, number, bool nor null (a dict or list in a cell) are still
encoded by ``json.dumps`` with the same ``default``.
"""
from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Callable

import numpy as np
import pandas as pd

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


def column_texts(column: pd.Series, plain: Callable) -> list[str]:
    """JSON fragments of one column's values as ``outputs._column_values`` makes them plain:
    integer and bool columns by NumPy, float columns with NaN as null, anything else (objects,
    nullable integers, categoricals, Arrow strings) value by value through ``plain``."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        values = column.to_numpy()
        if dtype.kind in "iu":
            return list(map(int.__repr__, values.tolist()))
        if dtype.kind == "b":
            return ["true" if v else "false" for v in values.tolist()]
        if dtype.kind == "f":
            return ["null" if v != v else float_text(v) for v in values.tolist()]
        values = values.tolist()
    else:
        values = column.tolist()
    return [encode_basestring_ascii(v) if type(v) is str else value_text(plain(v), plain) for v in values]


def json_lines(frame: pd.DataFrame, plain: Callable) -> list[str]:
    """One JSON object per row of ``frame``: ``{"col": value, ...}`` with ``json.dumps``'
    separators, the columns in order, values made plain as ``outputs.records`` does."""
    if not len(frame.columns):          # as outputs.records: no columns, no records
        return []
    keys = [encode_basestring_ascii(str(c)).replace("%", "%%") + ": %s" for c in frame.columns]
    template = "{" + ", ".join(keys) + "}"
    texts = [column_texts(frame[c], plain) for c in frame.columns]
    return [template % row for row in zip(*texts)]
