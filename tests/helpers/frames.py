"""``pandas.testing.assert_frame_equal`` without its element-by-element walk of categorical columns.

pandas compares a categorical column value by value in Python (each value boxed from its categories: the analysis'
ops and ranges tables hold several such columns of up to a million rows; 4M boxed values, about a minute of the
default test run). Where both columns have the same categories in the same order (and ordered alike), equal values
are equal codes: :func:`assert_frame_equal` compares those columns' codes instead, and everything else (every
other column, the index, the columns, the dtypes) as pandas does, with the same arguments. Any other categorical
column (other categories, floats among them) is left to pandas.
"""
from __future__ import annotations

import pandas as pd


def _same_categories(a: pd.Series, b: pd.Series) -> bool:
    da, db = a.dtype, b.dtype
    return (isinstance(da, pd.CategoricalDtype) and isinstance(db, pd.CategoricalDtype)
            and da == db and da.ordered == db.ordered and da.categories.dtype == db.categories.dtype
            and da.categories.dtype.kind != "f" and da.categories.equals(db.categories))


def _coded(left: pd.DataFrame, right: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The two frames with each categorical column of the same categories replaced by its codes (position by
    position: names and order stay)."""
    if left.shape != right.shape or not left.columns.equals(right.columns):
        return left, right
    cols = [i for i in range(left.shape[1]) if _same_categories(left.iloc[:, i], right.iloc[:, i])]
    if not cols:
        return left, right
    left, right = left.copy(deep=False), right.copy(deep=False)
    for i in cols:
        left.isetitem(i, left.iloc[:, i].cat.codes)
        right.isetitem(i, right.iloc[:, i].cat.codes)
    return left, right


def assert_frame_equal(left, right, **kwargs) -> None:
    """``pd.testing.assert_frame_equal(left, right, **kwargs)``, categorical columns of the same categories compared
    by their codes (a difference there is reported as codes)."""
    if isinstance(left, pd.DataFrame) and isinstance(right, pd.DataFrame):
        left, right = _coded(left, right)       # only columns whose dtypes are equal: the dtype check stands
    pd.testing.assert_frame_equal(left, right, **kwargs)
