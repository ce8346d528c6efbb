"""The one store of an analysis' GPU ops, and its one query.

A report analysed whole keeps its per-op table in memory (``gpu_ops``: :class:`FrameOps` reads it).
A report analysed in chunks (``--memory-budget``) keeps no per-op table: its map step writes the
columns of :data:`COLUMNS` to a Parquet file, a row group per chunk and rank, as it finishes
(:func:`spill`; :class:`SpilledOps` reads it, a row group at a time: bounded memory). An analysis
of several reports holds one store per report (:class:`CombinedOps`). Every store answers the same
question, :meth:`Ops.scan` / :meth:`Ops.query`: some of :data:`COLUMNS`, of some ranks, of the ops
overlapping a time window, of the ops launched inside decode cycles; the times on the analysis'
clock (a report's clock offset added, as the reducer adds it to its tables). What reads GPU ops
after the map step (the timeline plot, advise's launch gaps, whatif) reads them through it, whichever
way the report was analysed: :func:`of` gives an analysis' store.
"""
from __future__ import annotations

import os
import tempfile
import weakref
from typing import Callable, Iterable, Iterator

import numpy as np
import pandas as pd

COLUMNS = ("rank", "kind", "start_ns", "end_ns", "phase", "name", "cycle_range", "graph_node")
"""What a query may ask for: the per-op table's columns of these names, and ``graph_node`` (the op is a
node of a CUDA graph: its ``graph_node_id`` is set)."""

# the Parquet file's columns (codes; the store keeps what they code): start, end, phase, name, kind,
# cycle range, graph node, in (rank, start) order within a row group of one rank
_FILE_COLUMNS = {"start_ns": "start_ns", "end_ns": "end_ns", "phase": "phase_code", "name": "name_code",
                 "kind": "kind_code", "cycle_range": "cycle_range", "graph_node": "graph_node"}


def _empty(columns: list[str], kinds: Iterable[str]) -> pd.DataFrame:
    types = {"rank": "int64", "start_ns": "int64", "end_ns": "int64", "cycle_range": "int64", "graph_node": bool,
             "phase": object, "name": object}
    out = {c: pd.Series(dtype=types[c]) for c in columns if c != "kind"}
    if "kind" in columns:
        out["kind"] = pd.Categorical([], categories=list(kinds))
    return pd.DataFrame(out)[list(columns)]


def _check(columns) -> list[str]:
    columns = list(columns)
    unknown = [c for c in columns if c not in COLUMNS]
    if unknown:
        raise KeyError(f"the op store has no column {', '.join(unknown)} (it has {', '.join(COLUMNS)})")
    return columns


class Ops:
    """A store of GPU ops. Subclasses give :meth:`scan`, :meth:`__len__` and :meth:`extent`."""

    kinds: tuple = ()

    def scan(self, columns, *, ranks=None, window: tuple[int, int] | None = None,
             in_cycles: bool = False) -> Iterator[pd.DataFrame]:
        """Frames of ``columns`` (of :data:`COLUMNS`), each the ops of one rank in start order, the
        ranks in ascending order and a rank's frames in time order (a chunked report: one frame per
        chunk). ``ranks``: only these; ``window`` (start, end) ns: only the ops overlapping it (end >
        start of the window and start < its end); ``in_cycles``: only the ops launched inside a
        decode cycle range (``cycle_range`` >= 0)."""
        raise NotImplementedError

    def query(self, columns, *, ranks=None, window: tuple[int, int] | None = None, in_cycles: bool = False,
              where: Callable[[pd.DataFrame], np.ndarray] | None = None) -> pd.DataFrame:
        """:meth:`scan`'s frames in one, in (rank, start) order, with ``where`` (a function of a frame
        giving a row mask, called per frame: what it needs among ``columns``) applied frame by frame."""
        columns = _check(columns)
        parts = []
        for frame in self.scan(columns, ranks=ranks, window=window, in_cycles=in_cycles):
            if where is not None:
                frame = frame[np.asarray(where(frame), dtype=bool)]
            if len(frame):
                parts.append(frame)
        if not parts:
            return _empty(columns, self.kinds)
        return parts[0].reset_index(drop=True) if len(parts) == 1 else pd.concat(parts, ignore_index=True)

    def __len__(self) -> int:
        raise NotImplementedError

    def extent(self) -> tuple[int, int] | None:
        """(first start, last end) ns of the ops; None without ops."""
        raise NotImplementedError

    @property
    def frame(self) -> pd.DataFrame | None:
        """The whole per-op table where it is held in memory (a report analysed whole), else None."""
        return None


FRAME_PART_ROWS = 1 << 18
""":class:`FrameOps` scans a rank's rows in parts of this many (what a query's ``where`` sees at once)."""


class FrameOps(Ops):
    """The per-op table of reports analysed whole (``gpu_ops``: its times on the analysis' clock)."""

    def __init__(self, ops: pd.DataFrame | None):
        self.ops = ops if ops is not None else pd.DataFrame()
        kind = self.ops["kind"] if "kind" in self.ops.columns else None
        self.kinds = tuple(kind.cat.categories) if kind is not None and isinstance(kind.dtype, pd.CategoricalDtype) \
            else ()

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def frame(self) -> pd.DataFrame | None:
        return self.ops

    def extent(self) -> tuple[int, int] | None:
        if not len(self.ops):
            return None
        return int(self.ops["start_ns"].min()), int(self.ops["end_ns"].max())

    def scan(self, columns, *, ranks=None, window=None, in_cycles=False) -> Iterator[pd.DataFrame]:
        columns = _check(columns)
        ops = self.ops
        if not len(ops):
            return
        keep = np.ones(len(ops), dtype=bool)
        if ranks is not None:
            ranks = list(ranks)
            rank = ops["rank"].to_numpy()
            keep &= (rank == ranks[0]) if len(ranks) == 1 else np.isin(rank, np.asarray(ranks, dtype="int64"))
        if window is not None:
            keep &= (ops["end_ns"].to_numpy() > window[0]) & (ops["start_ns"].to_numpy() < window[1])
        if in_cycles:
            keep &= ops["cycle_range"].to_numpy() >= 0
        rows = np.flatnonzero(keep)
        rank = ops["rank"].to_numpy()[rows].astype("int64")
        order = np.lexsort((ops["start_ns"].to_numpy()[rows], rank))          # (rank, start), ties as read
        rows, rank = rows[order], rank[order]
        bounds = np.r_[0, np.flatnonzero(np.diff(rank)) + 1, len(rows)]
        for a, b in zip(bounds[:-1], bounds[1:]):
            for lo in range(int(a), int(b), FRAME_PART_ROWS):     # a rank in parts: bounded temporaries
                yield self._take(rows[lo:min(lo + FRAME_PART_ROWS, int(b))], columns)

    def _take(self, rows: np.ndarray, columns: list[str]) -> pd.DataFrame:
        out = {}
        for c in columns:
            if c == "graph_node":
                out[c] = self.ops["graph_node_id"].notna().to_numpy()[rows] if "graph_node_id" in self.ops.columns \
                    else np.zeros(len(rows), dtype=bool)
            elif c in ("rank", "start_ns", "end_ns", "cycle_range"):
                out[c] = self.ops[c].to_numpy().astype("int64", copy=False)[rows]
            else:
                out[c] = self.ops[c].take(rows).reset_index(drop=True)
        return pd.DataFrame(out)[columns]


class SpilledOps(Ops):
    """The ops of a report analysed in chunks, in a Parquet file this object owns (removed when it
    goes; pickled, the file's bytes travel with it: a process pool's or a Dask worker's store is
    readable where the result arrives). ``index``: one row per row group (rank, rows, first start,
    last end); ``phases``, ``names``, ``kinds``: what the file's codes stand for; ``offset_ns``: the
    report's clock offset (added to every time read)."""

    def __init__(self, path: str, index: pd.DataFrame, phases, names, kinds, offset_ns: int = 0):
        self.path, self.index = path, index
        self.phases = np.asarray(list(phases), dtype=object)
        self.names = np.asarray(names, dtype=object)
        self.kinds = tuple(kinds)
        self.offset_ns = int(offset_ns)
        # removed when this object goes, by the process that made it only (a forked child exiting
        # normally runs the finalizers it inherited: it must not take its parent's file)
        self._remove = weakref.finalize(self, _remove_file, path, os.getpid())

    def __len__(self) -> int:
        return int(self.index["rows"].sum()) if len(self.index) else 0

    def extent(self) -> tuple[int, int] | None:
        if not len(self.index):
            return None
        return int(self.index["first_start_ns"].min()) + self.offset_ns, \
            int(self.index["last_end_ns"].max()) + self.offset_ns

    def __getstate__(self) -> dict:
        with open(self.path, "rb") as f:
            data = f.read()
        return {"data": data, "index": self.index, "phases": self.phases, "names": self.names, "kinds": self.kinds,
                "offset_ns": self.offset_ns}

    def __setstate__(self, state: dict) -> None:
        path = _spill_path()
        with open(path, "wb") as f:
            f.write(state["data"])
        self.__init__(path, state["index"], state["phases"], state["names"], state["kinds"], state["offset_ns"])

    def scan(self, columns, *, ranks=None, window=None, in_cycles=False) -> Iterator[pd.DataFrame]:
        import pyarrow.parquet as pq

        columns = _check(columns)
        idx = self.index.assign(group=np.arange(len(self.index)))
        if ranks is not None:
            idx = idx[idx["rank"].isin([int(r) for r in ranks])]
        off = self.offset_ns
        if window is not None:        # the row groups that may hold an op overlapping it
            idx = idx[(idx["last_end_ns"] + off > window[0]) & (idx["first_start_ns"] + off < window[1])]
        if not len(idx):
            return
        read = sorted({_FILE_COLUMNS[c] for c in columns if c != "rank"} | {"start_ns"}
                      | ({"end_ns"} if window is not None else set())
                      | ({"cycle_range"} if in_cycles else set()))
        with pq.ParquetFile(self.path) as f:
            for group, rank, rows in idx.sort_values(["rank", "group"])[["group", "rank", "rows"]].itertuples(index=False):
                t = f.read_row_group(int(group), columns=read)
                col = {name: t.column(name).to_numpy() for name in read}
                keep = np.ones(int(rows), dtype=bool)
                if window is not None:
                    keep &= (col["end_ns"] + off > window[0]) & (col["start_ns"] + off < window[1])
                if in_cycles:
                    keep &= col["cycle_range"] >= 0
                if not keep.all():
                    col = {k: v[keep] for k, v in col.items()}
                n = int(keep.sum())
                if n:
                    yield self._frame(col, int(rank), n, columns)

    def _frame(self, col: dict, rank: int, n: int, columns: list[str]) -> pd.DataFrame:
        out = {}
        for c in columns:
            if c == "rank":
                out[c] = np.full(n, rank, dtype="int64")
            elif c in ("start_ns", "end_ns"):
                out[c] = col[c].astype("int64") + self.offset_ns
            elif c == "cycle_range":
                out[c] = col[c].astype("int64")
            elif c == "graph_node":
                out[c] = col[c].astype(bool)
            elif c == "phase":
                out[c] = pd.Series(self.phases[col["phase_code"]], dtype=object)
            elif c == "name":
                out[c] = pd.Series(self.names[col["name_code"]] if len(self.names) else np.full(n, None, dtype=object),
                                   dtype=object)
            elif c == "kind":
                out[c] = pd.Categorical.from_codes(col["kind_code"].astype("int8"), categories=list(self.kinds))
        return pd.DataFrame(out)[columns]


class CombinedOps(Ops):
    """The stores of several reports (each a rank or more of its own) as one."""

    def __init__(self, parts: list[Ops]):
        self.parts = [p for p in parts if p is not None and len(p)]
        kinds = [p.kinds for p in self.parts if p.kinds]
        self.kinds = kinds[0] if kinds else ()

    def __len__(self) -> int:
        return sum(len(p) for p in self.parts)

    @property
    def frame(self) -> pd.DataFrame | None:
        frames = [p.frame for p in self.parts]
        if len(frames) == 1 and frames[0] is not None:
            return frames[0]
        return None

    def extent(self) -> tuple[int, int] | None:
        ext = [e for e in (p.extent() for p in self.parts) if e is not None]
        return (min(e[0] for e in ext), max(e[1] for e in ext)) if ext else None

    def scan(self, columns, *, ranks=None, window=None, in_cycles=False) -> Iterator[pd.DataFrame]:
        # a rank lives in one report: the reports' frames merged by rank (each report's in rank order)
        columns = _check(columns)
        asked = columns if "rank" in columns else columns + ["rank"]
        streams = [p.scan(asked, ranks=ranks, window=window, in_cycles=in_cycles) for p in self.parts]
        heads = [next(s, None) for s in streams]
        while any(h is not None for h in heads):
            i = min((k for k, h in enumerate(heads) if h is not None), key=lambda k: int(heads[k]["rank"].iloc[0]))
            yield heads[i][columns]
            heads[i] = next(streams[i], None)


def combined(parts: list[Ops]) -> Ops:
    """One store of the parts (a part alone, or the one part with ops, is its own store)."""
    parts = [p for p in parts if p is not None]
    held = [p for p in parts if len(p)]
    if len(held) == 1 or len(parts) == 1:
        return (held or parts)[0]
    return CombinedOps(parts)


def of(analysis) -> Ops:
    """The op store of an analysis (or a report's result): the one the reducer made, else its per-op
    table's (an analysis built from tables alone: a live log, a JSON result, a test)."""
    store = getattr(analysis, "ops", None)
    if store is not None:
        return store
    return FrameOps(getattr(analysis, "gpu_ops", None))


# --------------------------------------------------------------------------------- writing
SPILL_GROUP_ROWS = 1 << 24
"""The most rows of a row group of a spilled store (pyarrow's writer cuts row groups at 64 Mi rows)."""


def _spill_path() -> str:
    fd, path = tempfile.mkstemp(prefix="specprof-ops-", suffix=".parquet")
    os.close(fd)
    return path


def _remove_file(path: str, owner: int | None = None) -> None:
    if owner is not None and os.getpid() != owner:
        return
    try:
        os.remove(path)
    except OSError:
        pass


def spill(parts: Iterable[tuple[int, dict]], phases, names, kinds) -> SpilledOps:
    """A :class:`SpilledOps` of ``parts``: (rank, {start_ns, end_ns, phase_code, name_code, kind_code,
    cycle_range, graph_node: arrays of one length}) of one rank each, in start order, a rank's parts
    in time order; a row group each, written as they come (one part in memory at a time)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("start_ns", pa.int64()), ("end_ns", pa.int64()), ("phase_code", pa.int16()),
                        ("name_code", pa.int32()), ("kind_code", pa.int8()), ("cycle_range", pa.int64()),
                        ("graph_node", pa.bool_())])
    path = _spill_path()
    rows = []
    try:
        # zstd, no dictionaries and no statistics (the index keeps what a query prunes by): 1M SGLang ops
        # 0.55 -> 0.1 s to write, about 10 bytes an op
        with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=False, write_statistics=False) as writer:
            for rank, cols in parts:
                n = len(cols["start_ns"])
                # a row group each, at most SPILL_GROUP_ROWS (Parquet writers cut larger ones in two,
                # which the index, a row a group, would not know)
                for a in range(0, n, SPILL_GROUP_ROWS):
                    part = {f.name: np.asarray(cols[f.name])[a:a + SPILL_GROUP_ROWS] for f in schema}
                    m = len(part["start_ns"])
                    writer.write_table(pa.table({f.name: pa.array(part[f.name].astype(f.type.to_pandas_dtype(),
                                                                                        copy=False))
                                                 for f in schema}, schema=schema), row_group_size=m)
                    rows.append((int(rank), m, int(np.min(part["start_ns"])), int(np.max(part["end_ns"]))))
    except BaseException:
        _remove_file(path)
        raise
    index = pd.DataFrame(rows, columns=["rank", "rows", "first_start_ns", "last_end_ns"]).astype("int64")
    return SpilledOps(path, index, phases, names, kinds)
