"""Which process is which tensor-parallel rank.

Sources, in order of trust: the shim's mark ``rank=R world=W device=D``; NCCL's own NVTX
(``ncclCommInitRank`` ranges / payload text naming a rank); the process's CUDA device when every
process has its own; else the order of process ids. The chosen source is kept per rank.
"""
from __future__ import annotations

import re

import pandas as pd

from analyze.errors import RankConflict
from nvtx_annotate.protocol import RANK_MARK_RE as RANK_MARK  # the shim's `rank=R world=W device=D`

NCCL_RANK = re.compile(r"\brank[\s=:]+(\d+)", re.IGNORECASE)


def _marked_ranks(marks: pd.DataFrame) -> dict[int, tuple[int, int | None]]:
    found: dict[int, tuple[int, int | None]] = {}
    for pid, text in zip(marks["global_pid"].tolist(), marks["text"].tolist()):
        m = RANK_MARK.search(str(text))
        if m and pid not in found:
            found[int(pid)] = (int(m.group(1)), int(m.group(2)) if m.group(2) else None)
    return found


def _nccl_ranks(ranges: pd.DataFrame, marks: pd.DataFrame) -> dict[int, int]:
    found: dict[int, int] = {}
    for frame, col in ((ranges, "name"), (marks, "text")):
        if frame.empty:
            continue
        nccl = frame[frame["domain"].astype(str).str.upper().str.startswith("NCCL")]
        for pid, text in zip(nccl["global_pid"].tolist(), nccl[col].tolist()):
            m = NCCL_RANK.search(str(text))
            if m and pid not in found:
                found[int(pid)] = int(m.group(1))
    return found


def identify_ranks(gpu_ops: pd.DataFrame, marks: pd.DataFrame, ranges: pd.DataFrame,
                   processes: pd.DataFrame, path: str) -> pd.DataFrame:
    """One row per process that launched GPU work: rank, pid, global_pid, device_ids, source, world."""
    cols = ["rank", "pid", "global_pid", "device_ids", "source", "world", "input"]
    if gpu_ops.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    pairs = gpu_ops[["global_pid", "device_id"]].drop_duplicates()
    devices = pairs.groupby("global_pid")["device_id"].agg(lambda s: sorted(set(int(x) for x in s)))
    pids = sorted(int(p) for p in devices.index)
    marked = _marked_ranks(marks)
    nccl = _nccl_ranks(ranges, marks)
    pid_of = dict(zip(processes["global_pid"].tolist(), processes["pid"].tolist())) if len(processes) else {}
    distinct_devices = len({tuple(devices[p]) for p in pids}) == len(pids) and all(len(devices[p]) == 1 for p in pids)

    rows = []
    for p in pids:
        if p in marked:
            rank, world, source = marked[p][0], marked[p][1], "mark"
        elif p in nccl:
            rank, world, source = nccl[p], None, "nccl"
        elif distinct_devices and len(pids) > 1:
            rank, world, source = devices[p][0], None, "device"
        else:
            rank, world, source = None, None, "order"
        pid = pid_of.get(p, (p >> 24) & 0xFFFFFF)
        rows.append([rank, int(pid), p, ",".join(map(str, devices[p])), source, world, path])
    frame = pd.DataFrame(rows, columns=cols)
    taken = set(int(r) for r in frame["rank"].dropna())
    next_free = 0
    for i in frame.index[frame["rank"].isna()]:
        while next_free in taken:
            next_free += 1
        frame.at[i, "rank"] = next_free
        taken.add(next_free)
    frame["rank"] = frame["rank"].astype("int64")
    dup = frame[frame["rank"].duplicated(keep=False)]
    if len(dup):
        raise RankConflict(f"{path}: processes {', '.join(map(str, dup['pid']))} all claim rank "
                           f"{int(dup['rank'].iloc[0])} ({dup['source'].iloc[0]})")
    return frame.sort_values("rank").reset_index(drop=True)
