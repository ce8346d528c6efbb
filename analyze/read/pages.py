"""SQLite's file format read directly: a rowid table's B-tree into NumPy columns, vectorised over rows.

The first of fastread's two readers (the stdlib cursor is the other). SQLite turns every row
into values one at a time; here a whole batch of leaf pages is decoded at once, each step one NumPy
operation over every row of the batch: the cell pointers, the record headers' varints, the serial
types and the big-endian integers (one gather of eight bytes per value through a byte-strided
view). NumPy lets go of the GIL in these steps, so the reads of several tables run side by side.

Read-only by construction: the file is opened ``O_RDONLY`` and its pages are copied into a buffer
with ``pread`` (no mapping whose pages would count as this process' memory, no SIGBUS if the file
shrank). Only a report opened ``immutable=1`` is read this way (no journal or WAL beside it: the
file holds every committed row; :func:`fastread.backend_for`).

What it reads (anything else: :class:`Unsupported`, and the caller asks the stdlib cursor, which
reads anything):

* statements ``SELECT item, ... FROM table [WHERE cond AND ...]`` with items a column, ``NULL``, an
  integer, ``(column & ~INT)`` or ``COALESCE(column, ...)``, and conditions ``1``, ``rowid >= INT``,
  ``rowid < INT`` or ``column = INT``;
* rowid tables (not ``WITHOUT ROWID``, no generated columns) whose rows fit their leaf page (no
  overflow pages), in a UTF-8 database;
* columns declared with integer or text affinity whose values are all integers (or NULL) or all
  text (or NULL); a float, a blob or a mix in a column read, text that is not valid UTF-8, a text
  column of over 2 GiB (:data:`TEXT_BYTES_MAX`: one Arrow string array), a missing trailing column
  with a default, a page or cell that does not parse: Unsupported for the whole
  statement (fastread counts it in ``FELL_BACK`` and asks the stdlib cursor).

A batch is a few MiB of leaf pages (:data:`BATCH_BYTES`: its per-row arrays stay in the CPU's
caches); a record header's serial types are read eight bytes at a time, and the columns whose type
is the same in every row of the batch (most: nsys writes its tables row by row with the same
widths) are sized once for the batch. Results go into arrays sized once from the rowid range (the
untouched tail of an over-estimate is never faulted in).

The result is an Arrow table, one
column per item, ``int64`` (NULLs as nulls) or ``string``; rows in rowid order, the order of
SQLite's scan. tests/test_pages.py checks it against SQLite on real exports and crafted files.
File format: https://www.sqlite.org/fileformat2.html (sections 1.3, 1.6, 2.1, 2.2).
"""
from __future__ import annotations

import os
import re
import threading
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from analyze.read.statement import I64_MAX, I64_MIN, ROWID_NAMES, Item, Statement, Unsupported, parse

MAGIC = b"SQLite format 3\x00"
LEAF_TABLE, INTERIOR_TABLE = 0x0D, 0x05
# leaf pages decoded at once: the batch's per-row arrays stay in the CPU's caches (2 MiB was as fast
# on one thread, 32 MiB a third slower); fewer, longer NumPy steps give the GIL back less often when
# another reader thread runs Python (10M kernels, 2 readers: 7.1 s at 2 MiB, 6.7 s at 8 MiB)
BATCH_BYTES = 4 * 2**20

# content size of serial types 0..11 (https://www.sqlite.org/fileformat2.html#record_format)
_FIXED_SIZE = np.array([0, 1, 2, 3, 4, 6, 8, 8, 0, 0, 0, 0], dtype=np.int64)


# statements handed to the next backend, by the exception that said why (tests look at it;
# fastread counts them under the lock: reader threads refuse statements at the same time)
FELL_BACK: Counter = Counter()
FELL_BACK_LOCK = threading.Lock()


# ------------------------------------------------------------------------------------------------
# the file and the table's layout
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Header:
    page_size: int
    usable: int                 # page size less the reserved bytes at each page's end
    pages: int                  # pages in the file


def read_header(fd: int) -> Header:
    head = os.pread(fd, 100, 0)
    if len(head) < 100 or head[:16] != MAGIC:
        raise Unsupported("not an SQLite database")
    ps = int.from_bytes(head[16:18], "big")
    ps = 65536 if ps == 1 else ps
    if ps < 512 or ps & (ps - 1):
        raise Unsupported("odd page size")
    if int.from_bytes(head[56:60], "big") not in (0, 1):       # text encoding: UTF-8 only
        raise Unsupported("text not UTF-8")
    size = os.fstat(fd).st_size
    return Header(ps, ps - head[20], size // ps)


@dataclass(frozen=True)
class Layout:
    """Where a table's rows are and what their records hold."""

    root: int
    columns: tuple              # lower-case names in record order
    affinity: tuple             # "int" | "text" | "other", per column
    defaults: tuple             # the declared default per column (None: NULL)
    alias: int | None           # the INTEGER PRIMARY KEY column (its value is the rowid), if any


def _affinity(decl: str) -> str:
    d = (decl or "").upper()
    if "INT" in d:
        return "int"
    if "CHAR" in d or "CLOB" in d or "TEXT" in d:
        return "text"
    return "other"


def table_layout(conn, table: str) -> Layout:
    """The table's root page and columns, from the schema (through the report's own connection)."""
    row = conn.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND lower(name) = lower(?)",
                       (table,)).fetchone()
    if row is None or not row[0] or not row[1]:
        raise Unsupported("no such table")
    root, sql = int(row[0]), str(row[1]).upper()
    if "WITHOUT ROWID" in sql or re.search(r"\bDESC\b", sql):
        raise Unsupported("not a plain rowid table")
    info = conn.execute(f'PRAGMA table_xinfo("{table}")').fetchall()
    if not info or any(r[6] for r in info):
        raise Unsupported("generated or hidden columns")
    if any(str(r[1]).upper() in ROWID_NAMES for r in info):
        raise Unsupported("a column named like the rowid")      # (`rowid` in a statement would mean it)
    pk = [r for r in info if r[5]]
    alias = pk[0][0] if len(pk) == 1 and str(pk[0][2]).upper() == "INTEGER" else None
    return Layout(root, tuple(str(r[1]).lower() for r in info), tuple(_affinity(r[2]) for r in info),
                  tuple(r[4] for r in info), alias)


def _strided(buf: np.ndarray, dtype: str) -> np.ndarray:
    """``view[i]`` = the ``dtype`` value in the bytes starting at ``buf[i]`` (unaligned, big-endian)."""
    n = len(buf) - np.dtype(dtype).itemsize + 1
    return np.ndarray((n,), dtype=dtype, buffer=buf, offset=0, strides=(1,))


class Pages:
    """Pages of the file copied into one buffer; ``be16/be32/be64`` read big-endian integers at any
    byte offset of it (one gather for a whole array of offsets)."""

    def __init__(self, fd: int, header: Header, capacity: int):
        self.fd, self.header = fd, header
        self.buf = np.zeros(capacity * header.page_size + 16, dtype=np.uint8)   # +16: 8-byte reads past a page end
        self.be16, self.be32, self.be64, self.le64 = (_strided(self.buf, t) for t in (">u2", ">u4", ">u8", "<u8"))

    def u64(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes at each of ``pos`` as big-endian uint64, in a native array (NumPy may reuse a
        byte-swapped temporary's memory for an operation's result without swapping it)."""
        return self.be64[pos].astype(np.uint64)

    def load(self, pages: np.ndarray) -> None:
        """Copy ``pages`` (1-based page numbers) into slots 0..len-1, consecutive pages in one read."""
        ps = self.header.page_size
        if not len(pages):
            return
        if pages.min() < 1 or pages.max() > self.header.pages:
            raise Unsupported("page number outside the file")
        breaks = np.flatnonzero(np.diff(pages) != 1) + 1
        view = memoryview(self.buf)
        for a, b in zip(np.r_[0, breaks], np.r_[breaks, len(pages)]):
            at, want = int(a) * ps, (int(b) - int(a)) * ps
            if not _read_into(self.fd, view[at:at + want], (int(pages[a]) - 1) * ps):
                raise Unsupported("short read")


def _read_into(fd: int, into: memoryview, offset: int) -> bool:
    """Fill ``into`` from ``offset`` of the file (``pread``: no shared file position, so threads may
    read one descriptor); False when the file ends first."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [into], offset) == len(into)
    data = os.pread(fd, len(into), offset)
    into[:len(data)] = data
    return len(data) == len(into)


# ------------------------------------------------------------------------------------------------
# varints and the B-tree
# ------------------------------------------------------------------------------------------------

_U32 = np.uint32


def varint(pg: Pages, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value int64, length in bytes) of the SQLite varints (big-endian, 7 bits a byte, a ninth
    byte of 8 bits) starting at ``pos``: up to 4 bytes from one 4-byte gather, longer ones apart."""
    b0 = pg.buf[pos]
    if not (b0 >= 0x80).any():
        return b0.astype(np.int64), np.ones(len(pos), dtype=np.int64)
    raw = pg.be32[pos].astype(np.uint32)
    c0 = (raw & _U32(0x80000000)) != 0
    c1 = c0 & ((raw & _U32(0x00800000)) != 0)
    c2 = c1 & ((raw & _U32(0x00008000)) != 0)
    c3 = c2 & ((raw & _U32(0x00000080)) != 0)
    length = 1 + c0.astype(np.int64) + c1 + c2
    m = raw & _U32(0x7F7F7F7F)
    v4 = ((m >> _U32(3)) & _U32(0x0FE00000)) | ((m >> _U32(2)) & _U32(0x001FC000)) \
        | ((m >> _U32(1)) & _U32(0x00003F80)) | (m & _U32(0x7F))
    value = (v4 >> (_U32(7) * (_U32(4) - length.astype(np.uint32)))).astype(np.int64)
    long_ = np.flatnonzero(c3)
    if len(long_):                                   # 5 to 9 bytes (rowids and sizes past 2**28)
        value[long_], length[long_] = _long_varint(pg, pos[long_])
    return value, length


def _long_varint(pg: Pages, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    raw = pg.u64(pos)
    v = np.zeros(len(pos), dtype=np.uint64)
    length = np.full(len(pos), 9, dtype=np.int64)
    open_ = np.ones(len(pos), dtype=bool)
    for k in range(8):
        byte = (raw >> np.uint64(56 - 8 * k)) & np.uint64(0xFF)
        v = np.where(open_, (v << np.uint64(7)) | (byte & np.uint64(0x7F)), v)
        ends = open_ & (byte < 0x80)
        length[ends] = k + 1
        open_ &= ~ends
    if open_.any():                                  # the ninth byte gives all 8 bits
        v[open_] = (v[open_] << np.uint64(8)) | pg.buf[pos[open_] + 8].astype(np.uint64)
    return v.view(np.int64), length


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for every count c, concatenated."""
    total = int(counts.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def _page_heads(pg: Pages, pages: np.ndarray) -> np.ndarray:
    """Offsets in the buffer of the B-tree page headers of loaded ``pages`` (page 1's follows the
    100-byte file header)."""
    return np.arange(len(pages), dtype=np.int64) * pg.header.page_size + np.where(pages == 1, 100, 0)


def _kind_of(pg: Pages, page: int) -> int:
    b = os.pread(pg.fd, 1, (page - 1) * pg.header.page_size + (100 if page == 1 else 0))
    if len(b) != 1:
        raise Unsupported("short read")
    return b[0]


def _cells(pg: Pages, pages: np.ndarray, heads: np.ndarray, ptr_array_at: int) -> tuple[np.ndarray, np.ndarray]:
    """(buffer offsets of every cell of the loaded ``pages``, in order; cells per page)."""
    ps, usable = pg.header.page_size, pg.header.usable
    ncell = pg.be16[heads + 3].astype(np.int64)
    ptr_at = np.repeat(heads + ptr_array_at, ncell) + 2 * _ranks(ncell)
    ptr = pg.be16[ptr_at].astype(np.int64)
    if len(ptr) and (ptr.min() < ptr_array_at or ptr.max() >= usable):
        raise Unsupported("cell pointer outside its page")
    return np.repeat(np.arange(len(pages), dtype=np.int64) * ps, ncell) + ptr, ncell


def leaf_pages(pg: Pages, root: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(leaf page numbers in key order; the lowest and highest rowid each can hold) of the table
    B-tree at ``root``, walked a level at a time through the interior pages' child pointers and
    keys (every leaf of a B-tree is at the same depth; each leaf's kind is checked when decoded)."""
    level = np.array([root], dtype=np.int64)
    lo = np.array([I64_MIN], dtype=np.int64)
    hi = np.array([I64_MAX], dtype=np.int64)
    cap = _capacity(pg)
    for _depth in range(40):
        kind = _kind_of(pg, int(level[0]))
        if kind == LEAF_TABLE:
            return level, lo, hi
        if kind != INTERIOR_TABLE:
            raise Unsupported("not a table B-tree")
        children, lows, highs = [], [], []
        for at in range(0, len(level), cap):
            part = level[at:at + cap]
            pg.load(part)
            heads = _page_heads(pg, part)
            if (pg.buf[heads] != INTERIOR_TABLE).any():
                raise Unsupported("B-tree levels of mixed kinds")
            cells, ncell = _cells(pg, part, heads, 12)
            left = pg.be32[cells].astype(np.int64)
            key, _ = varint(pg, cells + 4)
            right = pg.be32[heads + 8].astype(np.int64)
            # per page: its cells' children, then its right-most child; each child holds the rowids
            # above the key before it, up to its own key (the right-most: up to the page's bound)
            n = len(left) + len(part)
            at_right = np.cumsum(ncell + 1) - 1
            is_cell = np.ones(n, dtype=bool)
            is_cell[at_right] = False
            child, upper = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
            child[is_cell], child[at_right] = left, right
            upper[is_cell], upper[at_right] = key, hi[at:at + len(part)]
            lower = np.empty(n, dtype=np.int64)
            lower[1:] = np.minimum(upper[:-1], I64_MAX - 1) + 1
            lower[np.r_[0, at_right[:-1] + 1]] = lo[at:at + len(part)]
            children.append(child)
            lows.append(lower)
            highs.append(upper)
        level, lo, hi = np.concatenate(children), np.concatenate(lows), np.concatenate(highs)
    raise Unsupported("B-tree too deep")


def _capacity(pg: Pages) -> int:
    return (len(pg.buf) - 16) // pg.header.page_size


# ------------------------------------------------------------------------------------------------
# records
# ------------------------------------------------------------------------------------------------

# content bytes of single-byte serial types (12+: blobs and texts of (st - 12) // 2 bytes)
_SIZE8 = np.array([_FIXED_SIZE[s] if s < 12 else (s - 12) // 2 for s in range(256)], dtype=np.int64)
_HIGH_BITS = np.uint64(0x8080808080808080)


class Column:
    """One record column of a batch: its serial types (an array, or one value for every row) and
    where its content starts in the buffer."""

    def __init__(self, st, at: np.ndarray):
        self.st, self.at = st, at


def _header_fast(pg: Pages, types_at: np.ndarray, n_types: int, wanted: list[int]) -> dict[int, Column] | None:
    """The wanted columns' serial types and content offsets (from the content start) when every row
    has at least ``n_types`` serial types of one byte each (all but long texts and blobs): the
    header bytes are read eight at a time, and the columns whose type is the same in every row of
    the batch (most of them) are sized once. None: a row needs the general path.

    Each 8-byte word of the headers is one contiguous array over the rows (word-major), so the
    checks are 1-D reductions: any high bit set (a type of two bytes or more), and which bytes
    differ from the first row's (an OR of the XOR): a column is constant where its byte is 0 there."""
    words = -(-n_types // 8)
    last = n_types - 8 * (words - 1)
    constant = np.zeros(n_types, dtype=bool)
    first = np.zeros(n_types, dtype=np.uint8)
    packed = []
    for w in range(words):
        word = pg.le64[types_at + 8 * w]            # a native copy: le64 is a strided view
        used = np.uint64((1 << (8 * last)) - 1) if w == words - 1 and last < 8 else np.uint64(0xFFFFFFFFFFFFFFFF)
        if int(np.bitwise_or.reduce(word) & _HIGH_BITS & used):
            return None
        differ = int(np.bitwise_or.reduce(word ^ word[0]))      # (rows: at least one, see the caller)
        head = int(word[0])
        for b in range(min(8, n_types - 8 * w)):
            constant[8 * w + b] = (differ >> (8 * b)) & 0xFF == 0
            first[8 * w + b] = (head >> (8 * b)) & 0xFF
        packed.append(word)

    def types_of(j: int) -> np.ndarray:
        return ((packed[j // 8] >> np.uint64(8 * (j % 8))) & np.uint64(0xFF)).astype(np.int64)

    out: dict[int, Column] = {}
    const = 0
    varying = None
    want = set(wanted)
    for j in range(n_types):
        column_types = None if constant[j] else types_of(j)
        if j in want:
            st = int(first[j]) if constant[j] else column_types
            out[j] = Column(st, const if varying is None else varying + const)
        if constant[j]:
            const += int(_SIZE8[first[j]])
        else:
            size = _SIZE8[column_types]
            varying = size if varying is None else varying + size
    return out


def _header_general(pg: Pages, types_at: np.ndarray, body: np.ndarray, n_types: int,
                    wanted: list[int]) -> dict[int, Column]:
    """The same, one serial-type varint per column for all rows at once; a row whose header ends
    before a column has it NULL (-1 here: a column added later, the row written before)."""
    out: dict[int, Column] = {}
    p = types_at.copy()
    off = np.zeros(len(p), dtype=np.int64)
    want = set(wanted)
    for j in range(n_types):
        present = p < body
        st, length = varint(pg, np.where(present, p, body))
        st = np.where(present, st, -1)
        if j in want:
            out[j] = Column(st, off.copy())
        size = np.where(st >= 12, (st - 12) // 2, _FIXED_SIZE[np.clip(st, 0, 11)])
        off += np.where(present, size, 0)
        p += np.where(present, length, 0)
    return out


def _int_values(pg: Pages, col: Column, body: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 values, NULL mask or None) of an integer column; Unsupported for any other type."""
    st = col.st
    pos = body + col.at
    if np.isscalar(st):
        if st in (0, -1):
            return np.zeros(len(body), dtype=np.int64), np.ones(len(body), dtype=bool)
        if st in (8, 9):
            return np.full(len(body), st - 8, dtype=np.int64), None
        if not 1 <= st <= 6:
            raise Unsupported("a value that is not an integer")
        bits = 8 * int(_FIXED_SIZE[st])
        raw = pg.u64(pos) >> np.uint64(64 - bits)
        if bits < 64:
            m = np.uint64(1 << (bits - 1))
            raw = (raw ^ m) - m
        return raw.view(np.int64), None
    if ((st >= 10) | (st == 7)).any():
        raise Unsupported("a value that is not an integer")
    size = _FIXED_SIZE[np.clip(st, 0, 11)]
    bits = np.maximum(8 * size, 8).astype(np.uint64)
    raw = pg.u64(pos) >> (np.uint64(64) - bits)
    m = np.uint64(1) << (bits - np.uint64(1))
    values = ((raw ^ m) - m).view(np.int64)
    special = st <= 0
    special |= st >= 8
    if special.any():
        values = np.where(st == 9, 1, np.where(special, 0, values))
    nulls = st <= 0
    return values, (nulls if nulls.any() else None)


def _text_values(pg: Pages, col: Column, body: np.ndarray):
    """A pyarrow string array of a text column (NULLs as nulls); Unsupported for other types or
    text that is not UTF-8."""
    import pyarrow as pa

    st = np.broadcast_to(np.asarray(col.st, dtype=np.int64), body.shape)
    is_null = st <= 0
    if not ((st >= 13) & (st % 2 == 1) | is_null).all():
        raise Unsupported("a value that is not text")
    length = np.where(is_null, 0, (st - 13) // 2)
    offsets = np.zeros(len(st) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])            # (under a batch's bytes: int32 offsets)
    start = body + col.at
    idx = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    data = pg.buf[idx]
    nulls = int(is_null.sum())
    bitmap = pa.py_buffer(np.packbits(~is_null, bitorder="little")) if nulls else None
    arr = pa.StringArray.from_buffers(len(st), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data), bitmap,
                                      nulls)
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        raise Unsupported("text that is not UTF-8") from None
    return arr


# ------------------------------------------------------------------------------------------------
# a statement's rows
# ------------------------------------------------------------------------------------------------

# a text column's bytes at most: its batches are joined into one Arrow string array (int32 offsets)
TEXT_BYTES_MAX = 2 ** 31 - 1


class _Out:
    """A result column filled batch by batch: integers into one array sized once (an upper bound on
    the rows: the untouched tail is never faulted in) with a NULL mask made at the first NULL, or
    text as Arrow chunks."""

    def __init__(self, capacity: int):
        self.kind = None                  # None (all NULL so far) | "int" | "text"
        self.values = np.empty(capacity, dtype=np.int64)
        self.nulls = None
        self.n = 0
        self.texts = []
        self.text_bytes = 0

    def add_int(self, values: np.ndarray, nulls: np.ndarray | None) -> None:
        if self.kind == "text":
            raise Unsupported("integers and text in one column")
        self.kind = "int"
        at, to = self.n, self.n + len(values)
        if to > len(self.values):
            grown = np.empty(max(to, 2 * len(self.values)), dtype=np.int64)
            grown[:at] = self.values[:at]
            self.values = grown
            if self.nulls is not None:
                self.nulls = np.concatenate([self.nulls[:at], np.zeros(len(grown) - at, dtype=bool)])
        self.values[at:to] = values
        if nulls is not None:
            if self.nulls is None:
                self.nulls = np.zeros(len(self.values), dtype=bool)
            self.nulls[at:to] = nulls
        elif self.nulls is not None:
            self.nulls[at:to] = False
        self.n = to

    def add_text(self, arr) -> None:
        if self.kind == "int":
            raise Unsupported("integers and text in one column")
        self.kind = "text"
        data = arr.buffers()[2]
        self.text_bytes += data.size if data is not None else 0
        if self.text_bytes > TEXT_BYTES_MAX:          # (said before the batches are joined)
            raise Unsupported("a text column over 2 GiB")
        self.texts.append(arr)
        self.n += len(arr)

    def is_text(self, affinity: str) -> bool:
        return self.kind == "text" or (self.kind is None and affinity == "text")

    def ints(self, rows: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(values, NULL mask or None where there is no NULL) of an integer column."""
        nulls = None if self.nulls is None else self.nulls[:rows]
        return self.values[:rows], (nulls if nulls is not None and nulls.any() else None)

    def arrow(self, affinity: str, rows: int):
        import pyarrow as pa

        if self.is_text(affinity):
            chunks = self.texts or [pa.nulls(rows, pa.string())]
            return pa.chunked_array(chunks, type=pa.string()).combine_chunks()
        return int64_array(*self.ints(rows))


def _batch_columns(pg: Pages, pages: np.ndarray, layout: Layout, stmt: Statement, record_cols: list[int]):
    """(rowids, {record column: (values, nulls) or text array}) of the rows of the loaded leaf
    ``pages`` that pass the statement's conditions."""
    heads = _page_heads(pg, pages)
    if (pg.buf[heads] != LEAF_TABLE).any():
        raise Unsupported("B-tree levels of mixed kinds")
    cells, _ = _cells(pg, pages, heads, 8)
    usable, ps = pg.header.usable, pg.header.page_size
    payload, l1 = varint(pg, cells)
    rowid, l2 = varint(pg, cells + l1)
    if len(payload) and payload.max() > usable - 35:
        raise Unsupported("a row on overflow pages")
    head = cells + l1 + l2
    if len(cells) and ((cells % ps) + l1 + l2 + payload).max() > usable:
        raise Unsupported("a cell past its page")
    if stmt.rowid_lo > I64_MIN or stmt.rowid_hi < I64_MAX:
        keep = (rowid >= stmt.rowid_lo) & (rowid <= stmt.rowid_hi)
        if not keep.all():
            head, rowid, payload = head[keep], rowid[keep], payload[keep]
    header_size, l3 = varint(pg, head)
    if len(head) and ((header_size > payload) | (header_size < l3)).any():
        raise Unsupported("a record header past its record")
    body = head + header_size
    types_at = head + l3
    stored = [j for j in record_cols if j != layout.alias]
    n_types = max(stored) + 1 if stored else 0
    cols = {}
    if n_types:
        fast = (header_size - l3).min() >= n_types if len(head) else False
        cols = _header_fast(pg, types_at, n_types, stored) if fast else None
        if cols is None:
            cols = _header_general(pg, types_at, body, n_types, stored)
            for j, c in cols.items():                 # a row written before the column was added
                if (c.st == -1).any() and layout.defaults[j] is not None:
                    raise Unsupported("a missing column with a default")
        # every value inside its record: the last one read ends after every other one
        last = cols[max(stored)]
        if (np.broadcast_to(last.at + _content_sizes(last.st), body.shape) > payload - header_size).any():
            raise Unsupported("a value past its record")
    if stmt.equal:                   # rows where each compared column equals its integer
        keep = np.ones(len(body), dtype=bool)
        for name, v in stmt.equal:
            j = layout.columns.index(name.lower())
            if layout.affinity[j] != "int":
                raise Unsupported("a comparison with text")
            vals, nulls = (rowid, None) if j == layout.alias else _int_values(pg, cols[j], body)
            keep &= vals == v
            if nulls is not None:
                keep &= ~nulls
        if not keep.all():
            body, rowid = body[keep], rowid[keep]
            cols = {j: Column(c.st if np.ndim(c.st) == 0 else c.st[keep], c.at if np.ndim(c.at) == 0 else c.at[keep])
                    for j, c in cols.items()}
    values = {}
    for j in record_cols:
        if j == layout.alias:
            values[j] = ("int", rowid, None)
            continue
        c = cols[j]
        st = np.asarray(c.st)
        if layout.affinity[j] == "text" and ((st >= 13) | (st <= 0)).all():
            values[j] = ("text", _text_values(pg, c, body))
        elif layout.affinity[j] == "int":
            values[j] = ("int",) + _int_values(pg, c, body)
        else:
            raise Unsupported("a column of another type")
    return rowid, values


def _content_sizes(st):
    st = np.asarray(st)
    return np.where(st >= 12, (st - 12) // 2, _FIXED_SIZE[np.clip(st, 0, 11)])


def read_table(conn, stmt: Statement | str, batch_bytes: int = BATCH_BYTES):
    """The rows of ``stmt`` (a read/statement.Statement, or SQL text it parses) on the report ``conn``
    was opened on (an analyze.read.connection connection: its ``path``, and its ``execute`` for the
    schema) as a pyarrow Table, one column per select item; Unsupported for what this reader does not
    read (module doc). The caller makes sure the file holds every row: a report opened ``immutable``
    (no journal or WAL beside it), as fastread.backend_for does."""
    import pyarrow as pa

    if np.little_endian is False:
        raise Unsupported("a big-endian machine")
    stmt = parse(stmt) if isinstance(stmt, str) else stmt
    layout = table_layout(conn, stmt.table)
    # bounds past 64 bits hold every rowid on that side; crossed bounds hold none
    stmt = replace(stmt, rowid_lo=max(stmt.rowid_lo, I64_MIN), rowid_hi=min(stmt.rowid_hi, I64_MAX))
    names = set(layout.columns)
    used = [c.lower() for it in stmt.items for c in it.columns] + [c.lower() for c, _ in stmt.equal]
    if not set(used) <= names:
        raise Unsupported("a column the table lacks")
    record_cols = sorted({layout.columns.index(c) for c in used})
    fd = os.open(conn.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        header = read_header(fd)
        pg = Pages(fd, header, max(1, batch_bytes // header.page_size))
        leaves, lo, hi = leaf_pages(pg, layout.root)
        inside = (hi >= stmt.rowid_lo) & (lo <= stmt.rowid_hi)
        leaves = leaves[inside] if stmt.rowid_lo <= stmt.rowid_hi else leaves[:0]
        capacity = _rows_bound(pg, leaves, stmt)
        outs = {j: _Out(capacity) for j in record_cols}
        rows = 0
        cap = _capacity(pg)
        for at in range(0, len(leaves), cap):
            part = leaves[at:at + cap]
            pg.load(part)
            rowid, values = _batch_columns(pg, part, layout, stmt, record_cols)
            rows += len(rowid)
            for j, v in values.items():
                if v[0] == "text":
                    outs[j].add_text(v[1])
                else:
                    outs[j].add_int(v[1], v[2])
    finally:
        os.close(fd)
    return pa.Table.from_arrays([_item_column(it, layout, outs, rows) for it in stmt.items],
                                names=[f"c{i}" for i in range(len(stmt.items))])


def _rows_bound(pg: Pages, leaves: np.ndarray, stmt: Statement) -> int:
    """An upper bound on the rows the statement reads from ``leaves``: the rowids between the first
    leaf's first and the last leaf's last (unique integers), and at most what the pages can hold."""
    if not len(leaves):
        return 0
    ends = []
    for page, first in ((int(leaves[0]), True), (int(leaves[-1]), False)):
        pg.load(np.array([page], dtype=np.int64))
        heads = _page_heads(pg, np.array([page]))
        if pg.buf[heads[0]] != LEAF_TABLE:
            raise Unsupported("not a table leaf")
        cells, _ = _cells(pg, np.array([page]), heads, 8)
        if not len(cells):
            return len(leaves) * (pg.header.usable // 5)
        cell = cells[:1] if first else cells[-1:]
        _, l1 = varint(pg, cell)
        ends.append(int(varint(pg, cell + l1)[0][0]))
    span = min(stmt.rowid_hi, ends[1]) - max(stmt.rowid_lo, ends[0]) + 1
    return int(max(0, min(span, len(leaves) * (pg.header.usable // 5))))


def _item_column(item: Item, layout: Layout, outs: dict, rows: int):
    """One select item as an Arrow column; ``(c & ~N)`` and ``COALESCE`` computed in NumPy, NULLs
    as SQLite has them (NULL & x is NULL; COALESCE is the first non-NULL)."""
    import pyarrow as pa

    if item.kind == "null":
        return pa.nulls(rows, pa.int64())
    if item.kind == "int":
        return int64_array(np.full(rows, item.value, dtype=np.int64), None)
    cols = [layout.columns.index(c.lower()) for c in item.columns]
    if item.kind == "column":
        return outs[cols[0]].arrow(layout.affinity[cols[0]], rows)
    if any(outs[j].is_text(layout.affinity[j]) for j in cols):
        raise Unsupported("an expression over text")
    values, nulls = outs[cols[0]].ints(rows)
    if item.kind == "mask":
        values = values & np.int64(~item.value)
    else:
        for j in cols[1:]:
            if nulls is None:
                break
            more, more_nulls = outs[j].ints(rows)
            values = np.where(nulls, more, values)
            nulls = None if more_nulls is None else (nulls & more_nulls)
            nulls = nulls if nulls is not None and nulls.any() else None
    return int64_array(values, nulls)


def int64_array(values: np.ndarray, nulls: np.ndarray | None):
    """An Arrow int64 array over ``values`` (no copy) with ``nulls`` as its validity; built from
    buffers: ``pa.array`` would import pandas to check what it was given (0.3 s, in a thread that
    may run while the CLI imports)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.int64)
    if nulls is None:
        return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)], null_count=0)
    bitmap = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(values), [bitmap, pa.py_buffer(values)], null_count=int(nulls.sum()))
