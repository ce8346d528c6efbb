"""Where the map step keeps what it needs of every GPU op until the report's last chunk is in.

The per-cycle split (the cycles' GPU windows and periods are known only after the last op) and the
per-kernel median and p99 need every op of a rank; the map step keeps, per chunk, a few bytes per
op (rank group, start, end, phase code, name code) and reads them back chunk by chunk when it
finishes, in (group, start) order or, for order-free sums, in any one order shared by the chunk's
columns. :class:`OpStore` holds them in memory (a report analysed whole: no copy, the chunk's own
arrays and the permutation that sorts them, each sorted column made when asked for) or sorted in a
temporary directory (under ``--memory-budget``: bounded memory), with the same interface; so are
the frames the map step sets aside meanwhile (the NVTX ranges).
"""
from __future__ import annotations

import pickle
import shutil
import tempfile
import threading
from pathlib import Path

import numpy as np
import pandas as pd

# what is kept per op (read back in (group, start) order within a chunk, or unordered: see OpStore)
OP_COLUMNS = ("g", "s", "e", "ph", "nc")
ORDER = "order"          # in memory: the permutation that sorts a chunk's columns

_HEADER_LOCK = threading.Lock()
"""np.load parses a file's header with ``ast.literal_eval``; CPython 3.11.7 parsing in two threads at once raised
``SystemError: AST constructor recursion depth mismatch`` (a fresh clone's test run, 2026-12-06: the cycle table's
threads reading spilled runs). The header is opened under this lock (a memory map: no data read), the rows copied
outside it."""


def _open(path: Path) -> np.ndarray:
    with _HEADER_LOCK:
        return np.load(path, mmap_mode="r")


class OpStore:
    """Per-chunk op columns and set-aside frames, in memory (``on_disk=False``) or in a
    temporary directory removed by :meth:`close`."""

    def __init__(self, on_disk: bool):
        self.dir = Path(tempfile.mkdtemp(prefix="specprof-chunks-")) if on_disk else None
        self._chunks: list[dict[str, np.ndarray]] = []
        self._runs: list[list[tuple[int, int, int]]] = []
        self._frames: dict[str, pd.DataFrame] = {}
        self.sizes: list[int] = []

    def __len__(self) -> int:
        return len(self.sizes)

    def put(self, columns: dict[str, np.ndarray], order: np.ndarray, runs: list[tuple[int, int, int]]) -> None:
        """One chunk: its columns (:data:`OP_COLUMNS`, equal lengths, in the order read), the
        permutation ``order`` that sorts them by (group, start) and the runs of one group in that
        order ((group, first, stop), intervals.group_segments)."""
        k = len(self.sizes)
        self.sizes.append(len(columns["s"]))
        self._runs.append(runs)
        if self.dir is None:
            self._chunks.append({**columns, ORDER: order})
            return
        for name, values in columns.items():
            np.save(self.dir / f"{k}.{name}.npy", values[order])

    def get(self, k: int, name: str) -> np.ndarray:
        """Column ``name`` of chunk ``k`` in (group, start) order."""
        if self.dir is None:
            chunk = self._chunks[k]
            return chunk[name][chunk[ORDER]]
        return np.array(_open(self.dir / f"{k}.{name}.npy"))

    def get_unordered(self, k: int, name: str) -> np.ndarray:
        """Column ``name`` of chunk ``k`` in an order every column of the chunk shares (for sums and
        sorts that do not depend on it; no copy in memory)."""
        if self.dir is None:
            return self._chunks[k][name]
        return np.array(_open(self.dir / f"{k}.{name}.npy"))

    def runs(self, k: int) -> list[tuple[int, int, int]]:
        """(group, first, stop) of chunk ``k``'s runs of one group in (group, start) order."""
        return self._runs[k]

    def runs_by_rank(self, k: int, rank_of_group: np.ndarray) -> dict[int, list[tuple[int, int]]]:
        """Chunk ``k``'s runs as {rank: [(first, stop), ...]} (``rank_of_group``: per group, its rank;
        a rank of several processes has several runs), the ranks in order of their first run."""
        out: dict[int, list[tuple[int, int]]] = {}
        for group, first, stop in self._runs[k]:
            out.setdefault(int(rank_of_group[group]), []).append((first, stop))
        return out

    def get_run(self, k: int, name: str, first: int, stop: int) -> np.ndarray:
        """Rows ``first:stop`` of column ``name`` of chunk ``k`` in (group, start) order."""
        if self.dir is None:
            chunk = self._chunks[k]
            return chunk[name][chunk[ORDER][first:stop]]
        return np.array(_open(self.dir / f"{k}.{name}.npy")[first:stop])

    def put_frame(self, name: str, frame: pd.DataFrame) -> None:
        """Set ``frame`` aside (pickled on disk: its object columns hold a few distinct strings,
        each written once by pickle's memo)."""
        if self.dir is None:
            self._frames[name] = frame
            return
        with open(self.dir / f"{name}.pkl", "wb") as f:
            pickle.dump(frame, f, protocol=pickle.HIGHEST_PROTOCOL)

    def take_frame(self, name: str) -> pd.DataFrame:
        if self.dir is None:
            return self._frames.pop(name)
        with open(self.dir / f"{name}.pkl", "rb") as f:
            return pickle.load(f)      # our own file, written by put_frame in this run

    def close(self) -> None:
        self._chunks, self._runs, self._frames = [], [], {}
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
