"""A table's rows as JSON text, a column at a time.

``--json`` writes every table one record per line, as ``json.dumps(record, default=plain)`` does
for the record ``outputs.records`` makes of each row (NumPy scalars as Python ones, NaN and NA as
null). Encoding millions of small dicts through ``json.dumps`` cost more than the whole analysis of
the synthetic 1M-kernel trace (139k records: 2.4 s). Here each row is one ``%`` of a template that
holds the keys: integer columns go in as Python ints (``%d``), finite float columns as floats
(``%r``), the rest as JSON text made a column at a time (strings by the C string encoder, each
distinct one once where that is safe). The text is the same byte for byte (tests/test_properties.py
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


def column_cells(column: pd.Series, plain: Callable) -> tuple[str, list]:
    """One column's values as ``outputs._column_values`` makes them plain, as (the ``%`` conversion
    that writes each as JSON, the values it is given): integers as Python ints (``%d``, which
    writes them as ``int.__repr__``), floats as Python floats (``%r``) where the column has no NaN or
    infinity, anything else as JSON text (``%s``): bools, floats with NaN as null, and value by value
    through ``plain`` objects, nullable integers, categoricals and Arrow strings."""
    dtype = column.dtype
    if isinstance(dtype, np.dtype):
        values = column.to_numpy()
        if dtype.kind in "iu":
            return "%d", values.tolist()
        if dtype.kind == "b":
            return "%s", ["true" if v else "false" for v in values.tolist()]
        if dtype.kind == "f":
            if np.isfinite(values).all():
                return "%r", values.tolist()
            return "%s", ["null" if v != v else float_text(v) for v in values.tolist()]
        if dtype.kind == "O" and pd.api.types.infer_dtype(values, skipna=True) == "string":
            return "%s", _coded_texts(*pd.factorize(values), plain)
        return "%s", [_cell_text(v, plain) for v in values.tolist()]
    if isinstance(dtype, pd.CategoricalDtype):
        return "%s", _coded_texts(column.cat.codes.to_numpy(), column.cat.categories, plain)
    if dtype.kind in "iub" or isinstance(dtype, pd.StringDtype):
        return "%s", _coded_texts(*pd.factorize(column.array), plain)
    return "%s", [_cell_text(v, plain) for v in column.tolist()]


def _cell_text(value, plain: Callable) -> str:
    return encode_basestring_ascii(value) if type(value) is str else value_text(plain(value), plain)


def _coded_texts(codes: np.ndarray, uniques, plain: Callable) -> list[str]:
    """Per row, the text of its distinct value (``codes`` into ``uniques``, -1: missing, which
    ``plain`` makes null): each distinct value encoded once. Only for values whose equality is
    identity of their text (strings, integers, bools, categories): pandas' hashing would merge 1,
    1.0 and True, or 0.0 and -0.0."""
    texts = [_cell_text(v, plain) for v in list(uniques)] + ["null"]
    return np.asarray(texts, dtype=object)[codes].tolist()


def key_text(name) -> str:
    """A column name as ``json.dumps`` writes it as a key (a number or None as its text)."""
    return json.dumps({name: 0})[1:-len(": 0}")]


def json_lines(frame: pd.DataFrame, plain: Callable) -> list[str]:
    """One JSON object per row of ``frame``: ``{"col": value, ...}`` with ``json.dumps``'
    separators, the columns in order, values made plain as ``outputs.records`` does: one ``%`` of a
    template holding the keys per row."""
    if not len(frame.columns):          # as outputs.records: no columns, no records
        return []
    cells = [column_cells(frame[c], plain) for c in frame.columns]
    template = "{" + ", ".join(key_text(c).replace("%", "%%") + ": " + conversion
                               for c, (conversion, _) in zip(frame.columns, cells)) + "}"
    return [template % row for row in zip(*(values for _, values in cells))]
