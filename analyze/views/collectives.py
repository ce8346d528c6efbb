"""Views of the all-reduce decomposition: per-rank wait and transfer, stragglers (lateness counted
on steady-state evidence only: views/skew.py)."""
from __future__ import annotations

import pandas as pd

from analyze.timeline import collectives as coll_mod
from analyze.views import skew as skew_mod
from analyze.views.registry import get, view


@view("skew", file=2)
def skew(a) -> pd.DataFrame:
    """Per rank: collectives, wait and transfer time, how often it arrived last in a significantly
    skewed steady-state collective (skew.skew_table)."""
    return skew_mod.skew_table(a)


@view("stragglers")
def stragglers(a) -> list[int]:
    """The ranks that arrived last in the most significantly skewed steady-state collectives."""
    return skew_mod.stragglers(a)


@view("nccl_messages")
def nccl_messages(a) -> tuple[pd.DataFrame, dict]:
    """(NCCL ranges with a decoded message size on the analysis' clock, info): the inputs' payloads
    read once per analysis (read/nccl_payloads.inputs_message_sizes) for the NCCL bytes figure and
    advise's all-reduce rule; raises the read errors (nothing kept then)."""
    from analyze.read import nccl_payloads

    return nccl_payloads.inputs_message_sizes([i for i in (getattr(a, "inputs", None) or []) if i.get("path")])


@view("nccl_bytes", file=8, title="NCCL bytes per cycle per rank (steady decode cycles; NCCL's NVTX payloads)")
def nccl_bytes(a) -> pd.DataFrame:
    """Per rank: NCCL collectives and message bytes per steady decode cycle, the smallest and largest
    message (timeline.collectives.bytes_per_cycle); empty where NCCL wrote no payloads (NCCL >= 2.23
    with NVTX payload schemas, nsys 2024.x or later exporting them)."""
    from analyze.read import nccl_payloads

    try:
        sized, _ = get(a, "nccl_messages")
    except nccl_payloads.READ_ERRORS:   # an input no longer readable: the figure is absent, the report goes on
        sized = None
    return coll_mod.bytes_per_cycle(sized, a.ranks, a.cycles)
