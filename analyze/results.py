"""The result types: what one report yields (:class:`ReportResult`, the map step's output) and what
an analysis of one or more reports holds (:class:`Analysis`, the reducer's output). Kept apart from
the code that builds them so that every stage and renderer imports them without importing the
drivers (run/)."""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analyze.notes import Note


@dataclass
class ReportResult:
    """What one report yields before reports are combined (times on the report's own clock)."""

    path: str
    meta: dict
    ranks: pd.DataFrame
    gpu_ops: pd.DataFrame
    ranges: pd.DataFrame
    marks: pd.DataFrame
    phases: pd.DataFrame
    kernels: pd.DataFrame
    totals: pd.DataFrame
    nvtx_projection: pd.DataFrame
    notes: list[Note] = field(default_factory=list)
    cycles: pd.DataFrame | None = None          # per (rank, cycle), cycles.cycle_frame
    collective_ops: pd.DataFrame | None = None  # collectives.COLLECTIVE_OP_COLUMNS (None: no collectives)
    window_ops: pd.DataFrame | None = None      # chunked only: the ops of the default timeline window
    # chunked only: the ops' timeline.launch_gaps.GapStats (typed object: results come before timeline)
    launch_gaps: object = None
    whatif_ops: pd.DataFrame | None = None      # chunked only: the per-op rows whatif reads (mapstep)


@dataclass
class Analysis:
    """All tables of an analysis; every figure the CLI prints comes from one of these."""

    inputs: list[dict]
    ranks: pd.DataFrame
    gpu_ops: pd.DataFrame
    ranges: pd.DataFrame
    phases: pd.DataFrame
    kernels: pd.DataFrame
    totals: pd.DataFrame
    nvtx_projection: pd.DataFrame
    cycles: pd.DataFrame
    collectives: pd.DataFrame
    alignment: pd.DataFrame
    phase_names: list[str]
    notes: list[Note] = field(default_factory=list)
    # when gpu_ops was not kept (a chunked analysis of one report): the ops (rank, start_ns, end_ns,
    # phase, name) of the cycles plots.cycle_timeline draws by default (cycles.default_window_cycles)
    window_ops: pd.DataFrame | None = None
    # the launch gaps (timeline.launch_gaps.GapStats) of the reports analysed without a per-op table
    # (chunked), added up; advise adds those of gpu_ops' to them. None when every report kept its ops
    launch_gaps: object = None
    # the per-op table's rows whatif reads (the lowest rank's draft ops and each cycle range's first
    # op) of the reports analysed without a per-op table; None when every report kept its ops
    whatif_ops: pd.DataFrame | None = None
    # the derived tables computed so far (analyze.views.get): each computed once per analysis
    view_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)
