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
    """(NCCL ranges with a decoded message size on the analysis' clock, with the ``input`` they came from;
    info): read with each report's other tables in the map step (read/nccl_payloads.read_message_sizes),
    their times shifted by the reducer as every table's; for the NCCL bytes figure and advise's
    all-reduce rule. An analysis made without them (a live log, tables given by hand): none, and why."""
    from analyze.read import nccl_payloads

    sized = getattr(a, "nccl_messages", None)
    info = getattr(a, "nccl_info", None)
    if sized is None:
        return nccl_payloads.empty_frame(input_column=True), \
            {"reason": "no NCCL payloads read (not an analysis of nsys exports)", "events": 0, "undecoded": 0}
    return sized, dict(info or {"reason": None if len(sized) else "no NCCL payloads", "events": 0, "undecoded": 0})


@view("nccl_bytes", file=8, title="NCCL bytes per cycle per rank (steady decode cycles; NCCL's NVTX payloads)")
def nccl_bytes(a) -> pd.DataFrame:
    """Per rank: NCCL collectives and message bytes per steady decode cycle, the smallest and largest
    message (timeline.collectives.bytes_per_cycle); empty where NCCL wrote no payloads (NCCL >= 2.23
    with NVTX payload schemas, nsys 2024.x or later exporting them)."""
    sized, _ = get(a, "nccl_messages")
    return coll_mod.bytes_per_cycle(sized, a.ranks, a.cycles)
