"""A read of one export table as data: which table, which select items, which rows.

The readers take a :class:`Statement` (read/report.py builds them, never SQL text): the page reader
(pages.py) reads it as it is, the stdlib cursor runs its text (:meth:`Statement.sql`). What an item
may be is what both read alike: a column, ``NULL``, an integer, ``(column & ~INT)`` (the process of a
thread id) or ``COALESCE(column, ...)``; rows: a rowid range and ``column = INT`` conditions.
:func:`parse` reads such a statement back from SQL text (for callers that hold text: tests, tools);
anything else is :class:`Unsupported` (the stdlib cursor then runs the text itself).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np

I64_MIN, I64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


class Unsupported(Exception):
    """Something the page reader does not read (the caller asks the stdlib cursor)."""


@dataclass(frozen=True)
class Item:
    """One select item: ``kind`` column | null | int | mask | coalesce, with its column names."""

    kind: str
    columns: tuple = ()
    value: int = 0

    def sql(self) -> str:
        if self.kind == "column":
            return self.columns[0]
        if self.kind == "null":
            return "NULL"
        if self.kind == "int":
            return str(int(self.value))
        if self.kind == "mask":
            return f"({self.columns[0]} & ~{int(self.value)})"
        return "COALESCE(" + ", ".join(self.columns) + ")"


@dataclass(frozen=True)
class Statement:
    table: str
    items: tuple
    rowid_lo: int = I64_MIN     # rows with lo <= rowid <= hi (both inclusive: rowid 2**63-1 is a rowid)
    rowid_hi: int = I64_MAX
    equal: tuple = ()           # ((column, value), ...): rows where column = value

    def rowids(self, lo: int | None, hi: int | None) -> "Statement":
        """The rows with ``lo <= rowid < hi`` of these (None: no bound on that side)."""
        return replace(self, rowid_lo=self.rowid_lo if lo is None else max(self.rowid_lo, int(lo)),
                       rowid_hi=self.rowid_hi if hi is None else min(self.rowid_hi, int(hi) - 1))

    def where(self, column: str, value: int) -> "Statement":
        """The rows of these where ``column = value``."""
        return replace(self, equal=self.equal + ((column, int(value)),))

    def sql(self) -> str:
        """The statement as SQL text (the stdlib cursor's)."""
        conds = [f"{c} = {int(v)}" for c, v in self.equal]
        if self.rowid_lo > I64_MIN:
            conds.append(f"rowid >= {int(self.rowid_lo)}")
        if self.rowid_hi < I64_MAX:
            conds.append(f"rowid < {int(self.rowid_hi) + 1}")
        return (f"SELECT {', '.join(it.sql() for it in self.items)} FROM {self.table}"
                + (f" WHERE {' AND '.join(conds)}" if conds else ""))


def column(name: str) -> Item:
    return Item("column", (name,))


NULL = Item("null")


def const(value: int) -> Item:
    return Item("int", value=int(value))


def mask(name: str, bits: int) -> Item:
    """``(name & ~bits)``: e.g. a thread id's process part."""
    return Item("mask", (name,), int(bits))


def coalesce(*names: str) -> Item:
    """The first of ``names`` that is not NULL (one name: that column)."""
    return Item("coalesce", tuple(names)) if len(names) > 1 else column(names[0])


def present(columns, *names: str, default: Item = NULL) -> Item:
    """The first of ``names`` that the table has (``columns``), else ``default``."""
    have = set(columns)
    for name in names:
        if name in have:
            return column(name)
    return default


def select(table: str, items) -> Statement:
    return Statement(table, tuple(items))


# ------------------------------------------------------------------------------------------------
# from SQL text
# ------------------------------------------------------------------------------------------------

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SELECT = re.compile(rf"\s*SELECT\s+(.*?)\s+FROM\s+({_IDENT})(?:\s+WHERE\s+(.*?))?\s*;?\s*$", re.S | re.I)
ROWID_NAMES = ("ROWID", "_ROWID_", "OID")
_ITEM_COLUMN = re.compile(rf"({_IDENT})$")
_ITEM_INT = re.compile(r"(-?\d+)$")
_ITEM_MASK = re.compile(rf"\(\s*({_IDENT})\s*&\s*~\s*(\d+)\s*\)$")
_ITEM_COALESCE = re.compile(rf"COALESCE\s*\(\s*({_IDENT}(?:\s*,\s*{_IDENT})+)\s*\)$", re.I)   # 2+ arguments
_COND_TRUE = re.compile(r"1$")
_COND_ROWID = re.compile(r"rowid\s*(>=|<)\s*(-?\d+)$", re.I)
_COND_EQ = re.compile(rf"({_IDENT})\s*=\s*(-?\d+)$")


def split_items(text: str) -> list[str]:
    """The items of a select list, commas inside parentheses kept: 'a, f(b, c)' -> ['a', 'f(b, c)']."""
    items, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    items.append(cur.strip())
    return items


def parse(sql: str) -> Statement:
    """The statement SQL text states; Unsupported for anything outside this grammar."""
    m = _SELECT.match(sql)
    if not m:
        raise Unsupported("not SELECT ... FROM table [WHERE ...]")
    items = []
    for text in split_items(m.group(1)):
        if text.upper() == "NULL":
            items.append(NULL)
        elif (c := _ITEM_INT.match(text)):
            items.append(const(int(c.group(1))))
        elif text.upper() not in ROWID_NAMES and (c := _ITEM_COLUMN.match(text)):
            items.append(column(c.group(1)))
        elif (c := _ITEM_MASK.match(text)):
            items.append(mask(c.group(1), int(c.group(2))))
        elif (c := _ITEM_COALESCE.match(text)):
            items.append(Item("coalesce", tuple(x.strip() for x in c.group(1).split(","))))
        else:
            raise Unsupported(f"select item {text!r}")
    where = m.group(3)
    if where is not None and not where.strip():
        raise Unsupported("an empty WHERE")
    lo, hi, equal = I64_MIN, I64_MAX, []
    for cond in re.split(r"\s+AND\s+", where or "1", flags=re.I):
        cond = cond.strip()
        if _COND_TRUE.match(cond):
            continue
        if (c := _COND_ROWID.match(cond)):
            v = int(c.group(2))
            lo, hi = (max(lo, v), hi) if c.group(1) == ">=" else (lo, min(hi, v - 1))
        elif (c := _COND_EQ.match(cond)) and c.group(1).upper() not in ROWID_NAMES:
            equal.append((c.group(1), int(c.group(2))))
        else:
            raise Unsupported(f"condition {cond!r}")
    return Statement(m.group(2), tuple(items), lo, hi, tuple(equal))
