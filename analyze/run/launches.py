"""What every CUDA API call of a report belongs to, before any GPU op is looked at.

From the API calls and the NVTX ranges alone: the calls sorted by (thread, start), the labelled
ranges and their layout over the calls (what the projection reduces over), each call's innermost
phase range and inclusive phase bits, and its decode cycle. Nothing here depends on the GPU ops,
so it is computed while they are still being read, and it serves every chunk of them when a
report is analyzed in pieces (``--memory-budget``).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze.attribute import attribution
from analyze.attribute.phases import PhaseConfig
from analyze.project import projection
from analyze.timeline import cycles


class Launches(NamedTuple):
    ranges: pd.DataFrame                 # NVTX ranges with ``phase`` (attribution.label_ranges)
    calls: pd.DataFrame
    index: projection.CallIndex          # calls sorted by (thread, start)
    layout: tuple                        # projection.range_layout
    painted: attribution.PaintedCalls    # per sorted call: phase range, inclusive bits
    cycle_owner: np.ndarray | None       # per sorted call: enclosing cycle range id (-1), None: no cycles
    is_cycle: np.ndarray                 # per range: an outermost cycle range
    full_name: pd.Series                 # per range: nsys' ``domain:name``


def prepare_launches(calls: pd.DataFrame, ranges: pd.DataFrame, config: PhaseConfig) -> Launches:
    ranges = attribution.label_ranges(ranges, config)
    index = projection.build_call_index(calls, ranges)
    layout = projection.range_layout(index, ranges)
    painted = attribution.paint_phase_calls(ranges, index, config, layout)
    top_cycles = cycles.cycle_ranges(ranges, config)
    cycle_owner = cycles.cycle_of_calls(ranges, index, config, top=top_cycles, layout=layout)
    is_cycle = ranges.index.isin(top_cycles.index)
    return Launches(ranges, calls, index, layout, painted, cycle_owner, is_cycle, ranges["full_name"])


def cycle_of_ops(launches: Launches, op_call: np.ndarray) -> np.ndarray:
    """Per op, the id of the cycle range enclosing its launching call, else -1."""
    if launches.cycle_owner is None:
        return np.full(len(op_call), -1, dtype="int64")
    return np.append(launches.cycle_owner, -1)[op_call].astype("int64", copy=False)
