"""Rank identity: the shim's mark, else NCCL's NVTX text, else device, else process order."""
from __future__ import annotations

import pandas as pd
import pytest

from analyze.ranks.identify import RankConflict, identify_ranks

PIDS = [1 << 24, 2 << 24, 3 << 24]


def frames(marks=(), nccl=(), devices=(0, 0, 0)):
    ops = pd.DataFrame({"global_pid": PIDS, "device_id": list(devices)})
    mark_rows = [{"global_pid": p, "domain": "sglang", "text": t} for p, t in marks]
    range_rows = [{"global_pid": p, "domain": "NCCL", "name": t} for p, t in nccl]
    return (ops, pd.DataFrame(mark_rows, columns=["global_pid", "domain", "text"]),
            pd.DataFrame(range_rows, columns=["global_pid", "domain", "name"]),
            pd.DataFrame({"global_pid": PIDS, "pid": [1, 2, 3], "name": ["python"] * 3}))


def test_marks_win():
    ops, marks, ranges, procs = frames(marks=[(PIDS[0], "rank=2 world=3 device=0"),
                                              (PIDS[1], "rank=0 world=3 device=1"),
                                              (PIDS[2], "rank=1 world=3 device=2")],
                                       nccl=[(PIDS[0], "ncclCommInitRank rank 0")])
    r = identify_ranks(ops, marks, ranges, procs, "x")
    assert list(zip(r["pid"], r["rank"], r["source"])) == [(2, 0, "mark"), (3, 1, "mark"), (1, 2, "mark")]
    assert set(r["world"]) == {3}


def test_nccl_text_when_no_marks():
    ops, marks, ranges, procs = frames(nccl=[(PIDS[0], "ncclCommInitRank: comm 0x1 rank 1 nranks 3"),
                                             (PIDS[1], "ncclCommInitRank: comm 0x1 rank 2 nranks 3"),
                                             (PIDS[2], "ncclCommInitRank: comm 0x1 rank 0 nranks 3")])
    r = identify_ranks(ops, marks, ranges, procs, "x")
    assert list(zip(r["pid"], r["rank"], r["source"])) == [(3, 0, "nccl"), (1, 1, "nccl"), (2, 2, "nccl")]


def test_device_then_order():
    ops, marks, ranges, procs = frames(devices=(2, 0, 1))
    r = identify_ranks(ops, marks, ranges, procs, "x")
    assert list(zip(r["pid"], r["rank"], r["source"])) == [(2, 0, "device"), (3, 1, "device"), (1, 2, "device")]
    ops, marks, ranges, procs = frames(devices=(0, 0, 0))
    r = identify_ranks(ops, marks, ranges, procs, "x")
    assert list(zip(r["pid"], r["rank"], r["source"])) == [(1, 0, "order"), (2, 1, "order"), (3, 2, "order")]


def test_two_processes_claiming_one_rank_are_refused():
    ops, marks, ranges, procs = frames(marks=[(PIDS[0], "rank=1 world=2"), (PIDS[1], "rank=1 world=2")])
    with pytest.raises(RankConflict, match="claim rank 1"):
        identify_ranks(ops, marks, ranges, procs, "x")
