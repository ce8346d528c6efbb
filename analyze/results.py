"""The result types: what one report yields (:class:`ReportResult`, the map step's output) and what
an analysis of one or more reports holds (:class:`Analysis`, the reducer's output). Kept apart from
the code that builds them so that every stage and renderer imports them without importing the
drivers (run/)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

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
    # chunked only (no per-op table): the report's GPU ops, spilled (opstore.SpilledOps); None: gpu_ops holds them
    ops: object = None
    # NCCL ranges with a decoded message size (read/nccl_payloads.COLUMNS); the read's info is meta["nccl_payloads"]
    nccl_messages: pd.DataFrame | None = None


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
    # the one store of the GPU ops (opstore.Ops: gpu_ops, and the spilled ops of reports analysed in
    # chunks); read it through opstore.of(analysis), which also serves an Analysis made without one
    ops: object = None
    # NCCL ranges with a decoded message size (read/nccl_payloads.COLUMNS + input) and the reads' info
    # (reason, events, undecoded); None: not read (a live log, tables given by hand)
    nccl_messages: pd.DataFrame | None = None
    nccl_info: dict | None = None
    # the derived tables computed so far (analyze.views.get): each computed once per analysis
    view_cache: dict = field(default_factory=dict, repr=False, compare=False)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)


class TableInfo(NamedTuple):
    """One table of the results: ``name`` (its attribute on :class:`ReportResult` and
    :class:`Analysis`, and its name in ``--json``/``--csv``/``--parquet``), ``written`` (its position
    among the written tables; None: not written), ``time_columns`` (on a report's own clock: the
    reducer adds the report's clock offset), ``optional_time_columns`` (the same where a negative
    value means none: left alone), ``public_columns`` (the columns written; None: all)."""

    name: str
    written: int | None
    time_columns: tuple = ()
    optional_time_columns: tuple = ()
    public_columns: tuple | None = None


TABLES = (
    TableInfo("ranks", 1, public_columns=("rank", "pid", "global_pid", "device_ids", "source", "world", "input",
                                          "offset_ns", "spec_config")),
    TableInfo("phases", 2, public_columns=("rank", "phase", "instances", "cpu_ns", "projected_ns", "busy_ns",
                                           "exclusive_ns", "kernel_ns")),
    TableInfo("kernels", 3, public_columns=("rank", "phase", "name", "instances", "total_ns", "mean_ns", "median_ns",
                                            "p99_ns", "share")),
    TableInfo("totals", 4, optional_time_columns=("window_start_ns", "window_end_ns"),
              public_columns=("rank", "kernel_ns", "busy_ns", "exclusive_attributed_ns", "unattributed_ns",
                              "window_start_ns", "window_end_ns", "idle_ns", "gpu_ops", "outside_cycles_busy_ns")),
    TableInfo("nvtx_projection", 5, public_columns=("range", "style", "instances", "total_projected_ns",
                                                    "total_range_ns", "gpu_ops", "input")),
    TableInfo("cycles", 6, time_columns=("start_ns", "end_ns", "cpu_start_ns", "cpu_end_ns"),
              optional_time_columns=("gpu_period_start_ns", "gpu_period_end_ns")),
    TableInfo("collectives", 7),
    TableInfo("alignment", 8),
    TableInfo("gpu_ops", None, time_columns=("start_ns", "end_ns")),
    TableInfo("ranges", None, time_columns=("start_ns", "end_ns"),
              optional_time_columns=("gpu_start_ns", "gpu_end_ns", "gpu_start_all", "gpu_end_all")),
    TableInfo("marks", None, time_columns=("time_ns",)),
    TableInfo("collective_ops", None, time_columns=("start_ns", "end_ns")),
    TableInfo("nccl_messages", None, time_columns=("start_ns", "end_ns")),
)
"""The results' tables (the one list: the reducer's clock offsets, the written tables and their
columns read it)."""


def written_tables() -> tuple[TableInfo, ...]:
    """The tables ``--json``/``--csv``/``--parquet`` write, in order."""
    return tuple(sorted((t for t in TABLES if t.written is not None), key=lambda t: t.written))
