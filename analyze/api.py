"""The Python API: ``analyze.load(paths) -> Analysis`` (DataFrames, the numbers the CLI prints).

One mapper per report (:func:`analyze_report`: pure, picklable in and out, so it runs the same in a
process pool or on Dask) and one reducer across reports (:func:`combine`: rank identity across
files, time alignment, collectives).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import attribution, checks, cycles, projection, report, safety
from .phases import PhaseConfig
from .ranks import identify_ranks

TABLES = ("ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives")


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
    notes: list[str] = field(default_factory=list)


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
    notes: list[str] = field(default_factory=list)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, name)


def analyze_report(path: str, config: PhaseConfig | None = None, *, cache: bool = False,
                   memory_budget: int | None = None) -> ReportResult:
    """Map step: read one report and attribute its GPU time, per process (rank)."""
    config = config or PhaseConfig()
    read_notes: list[str] = []     # where the tables came from (cache), see read_tables
    tables = read_tables(path, cache=cache, memory_budget=memory_budget, notes=read_notes)
    ops = tables.gpu_ops
    if ops.empty:
        if tables.ranges.empty and tables.marks.empty:
            raise safety.NoCudaActivity(f"{path}: no GPU activity and no NVTX in this export "
                                        "(was it captured with -t cuda?)")
        raise safety.NoCudaActivity(f"{path}: NVTX only, no CUDA activity: profile with -t cuda,nvtx")
    ops = ops.assign(name=pd.Series(attribution.op_names(ops, tables.strings), index=ops.index, dtype=object))
    ranges = attribution.label_ranges(tables.ranges, config)
    calls = tables.calls
    index = projection.build_call_index(calls, ranges)
    op_call = projection.link_ops(ops, calls, index)

    # nsys' projection (kernels, memcpys, memsets) and ours (graph-level launches too)
    has, first, last = projection.call_op_spans(ops, op_call, len(index.key))
    nsys_proj = projection.project_ranges(ranges, index, has, first, last)
    has_all, first_all, last_all = projection.call_op_spans(ops, op_call, len(index.key),
                                                             kinds=("kernel", "memcpy", "memset", "graph"))
    all_proj = projection.project_ranges(ranges, index, has_all, first_all, last_all)
    ranges = ranges.assign(gpu_ops=nsys_proj["gpu_ops"], gpu_start_ns=nsys_proj["gpu_start_ns"],
                           gpu_end_ns=nsys_proj["gpu_end_ns"], gpu_ops_all=all_proj["gpu_ops"],
                           gpu_start_all=all_proj["gpu_start_ns"], gpu_end_all=all_proj["gpu_end_ns"])
    ranges["full_name"] = projection.full_range_names(ranges)
    nvtx_summary = projection.nvtx_projection_summary(ranges, nsys_proj)

    ranks = identify_ranks(ops, tables.marks, ranges, tables.processes, str(path))
    ops, inclusive, outermost = attribution.assign_phases(ops, op_call, ranges, index, config)
    rank_of_pid = dict(zip(ranks["global_pid"].tolist(), ranks["rank"].tolist()))
    ops["rank"] = ops["global_pid"].map(rank_of_pid).astype("int64")
    ranges["rank"] = ranges["global_pid"].map(rank_of_pid).fillna(-1).astype("int64")
    ranges["outermost"] = outermost
    phases, totals = attribution.phase_table(ops, inclusive, ranges, outermost, ranks, config)
    kernels = attribution.kernel_table(ops)
    ops = ops.assign(duration_ns=ops["end_ns"] - ops["start_ns"], call_pos=op_call, input=str(path),
                     collective=collective_mask(ops["name"], config),
                     cycle_range=cycles.cycle_of_ops(op_call, ranges, index, config))
    ranges["is_cycle"] = ranges.index.isin(cycles.cycle_ranges(ranges, config).index)
    notes = read_notes + checks.all_notes(tables, ops, op_call, ranges)
    ranges = ranges.rename_axis("range_id").reset_index()
    return ReportResult(str(path), tables.meta, ranks, ops, ranges, tables.marks, phases, kernels, totals,
                        nvtx_summary, notes)


def collective_mask(names: pd.Series, config: PhaseConfig) -> np.ndarray:
    """Ops that are collectives: names matching the kernel patterns of the ``allreduce`` phase."""
    phase = next((p for p in config.phases if p.name == "allreduce" and p.kernels), None)
    if phase is None:
        return np.zeros(len(names), dtype=bool)
    rx = phase.kernel_regex()
    inverse, uniq = attribution.name_codes(names)      # match each distinct name once
    return np.array([bool(rx.fullmatch(u)) for u in uniq] + [False], dtype=bool)[inverse]


def expand_inputs(paths, *, export: bool = True) -> list[str]:
    """Files as given; a directory stands for the reports inside it. A ``.nsys-rep``/``.qdrep``
    (given, or the only reports of a directory) is exported to SQLite with ``nsys export`` when nsys
    is on PATH (progress on stderr; the export lands beside it and is reused next time); without
    nsys, NsysRepGiven names the command to run."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        try:
            found = safety.find_reports(p)
        except safety.NsysRepGiven:
            if not export or not Path(p).is_dir():
                raise
            found = sorted(q for q in Path(p).iterdir() if q.name.endswith(safety.NSYS_REP_SUFFIXES))
        for f in found:
            if export and str(f).endswith(safety.NSYS_REP_SUFFIXES):
                f = safety.export_nsys_rep(f, progress=sys.stderr.isatty())
            out.append(str(f))
    return out


def load(paths, config: PhaseConfig | None = None, *, jobs: int = 1, progress: bool = False,
         cache: bool = False, memory_budget: int | None = None, scheduler: str | None = None) -> Analysis:
    """Analyze one or more nsys SQLite exports (files or directories) into an :class:`Analysis`."""
    from . import multirank  # late import: multirank builds on this module's types

    config = config or PhaseConfig()
    files = expand_inputs(paths)
    results = map_reports(files, config, jobs=jobs, progress=progress, cache=cache,
                          memory_budget=memory_budget, scheduler=scheduler)
    return multirank.combine(results, config)


def map_reports(files: list[str], config: PhaseConfig, *, jobs: int = 1, progress: bool = False,
                cache: bool = False, memory_budget: int | None = None,
                scheduler: str | None = None) -> list[ReportResult]:
    """Map step over reports: in this process (jobs=1), a process pool (jobs=N) or on a Dask
    cluster (scheduler=ADDRESS, see distributed.py). Results come back in the order of ``files``."""
    if scheduler:
        from . import distributed
        return distributed.map_reports(files, config, scheduler, progress=progress, cache=cache,
                                       memory_budget=memory_budget)
    if jobs <= 1 or len(files) <= 1:
        return [analyze_report(f, config, cache=cache, memory_budget=memory_budget)
                for f in _progress(files, progress)]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(analyze_report, f, config, cache=cache, memory_budget=memory_budget)
                   for f in files]
        return [f.result() for f in _progress(futures, progress, total=len(files))]


def _progress(items, enabled: bool, total: int | None = None):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return items
    return tqdm(items, total=total, desc="reports", unit="report", file=None, leave=False, delay=1.0)


# bytes a GPU op costs while it is read (Arrow buffers + NumPy columns + the DataFrame)
READ_BYTES_PER_OP = 200


def read_tables(path: str, *, cache: bool = False, memory_budget: int | None = None,
                notes: list[str] | None = None) -> report.ReportTables:
    """The report's tables: from the Parquet cache when ``cache`` (cache.py), GPU ops read in rowid
    chunks sized to ``memory_budget`` bytes when given (the same tables either way)."""
    chunk_rows = max(50_000, int(memory_budget) // (4 * READ_BYTES_PER_OP)) if memory_budget else None

    def reader(p):
        return report.read_report(p, chunk_rows=chunk_rows)

    if not cache:
        return reader(path)
    from . import cache as cache_mod
    tables, note = cache_mod.load_or_read(path, reader)
    if note and notes is not None:
        notes.append(note)
    return tables
