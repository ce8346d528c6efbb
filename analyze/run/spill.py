"""Where the map step keeps what it needs of every GPU op until the report's last chunk is in.

The per-cycle split (the cycles' GPU windows and periods are known only after the last op) and the
per-kernel median and p99 need every op of a rank; the map step keeps, per chunk, a few bytes per
op (rank group, start, end, phase code, name code) and reads them back chunk by chunk when it
finishes. :class:`OpStore` holds them in memory (a report analysed whole: no copy, the arrays the
chunk was sorted into) or in a temporary directory (under ``--memory-budget``: bounded memory),
with the same interface; so are the frames the map step sets aside meanwhile (the NVTX ranges).
"""
from __future__ import annotations

import pickle
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

# what is kept per op, in (group, start) order within a chunk
OP_COLUMNS = ("g", "s", "e", "ph", "nc")


class OpStore:
    """Per-chunk op columns and set-aside frames, in memory (``on_disk=False``) or in a
    temporary directory removed by :meth:`close`."""

    def __init__(self, on_disk: bool):
        self.dir = Path(tempfile.mkdtemp(prefix="specprof-chunks-")) if on_disk else None
        self._chunks: list[dict[str, np.ndarray]] = []
        self._frames: dict[str, pd.DataFrame] = {}
        self.sizes: list[int] = []

    def __len__(self) -> int:
        return len(self.sizes)

    def put(self, **columns: np.ndarray) -> None:
        """One chunk's columns (:data:`OP_COLUMNS`, equal lengths)."""
        k = len(self.sizes)
        self.sizes.append(len(columns["s"]))
        if self.dir is None:
            self._chunks.append(columns)
            return
        for name, values in columns.items():
            np.save(self.dir / f"{k}.{name}.npy", values)

    def get(self, k: int, name: str) -> np.ndarray:
        if self.dir is None:
            return self._chunks[k][name]
        return np.load(self.dir / f"{k}.{name}.npy")

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
        self._chunks, self._frames = [], {}
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
