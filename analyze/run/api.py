"""The Python API: ``analyze.load(paths) -> Analysis`` (DataFrames, the numbers the CLI prints).

One mapper per report (:func:`analyze_report`: pure, picklable in and out, so it runs the same in a
process pool or on Dask) and one reducer across reports (:func:`combine`: rank identity across
files, time alignment, collectives).
"""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import memory
from analyze import notes as N
from analyze.attribute import attribution
from analyze.attribute.phases import OTHER, PhaseConfig
from analyze.errors import NoCudaActivity, NvtxOnly, TraceError
from analyze.notes import Note
from analyze.project import projection
from analyze.ranks.identify import identify_ranks
from analyze.read import report
from analyze.read.connection import has_table, open_report
from analyze.read.nsys_export import expand_inputs
from analyze.results import Analysis, ReportResult
from analyze.run import checks, multirank
from analyze.run.launches import cycle_of_ops, prepare_launches
from analyze.run.progress import progress as _progress
from analyze.timeline import collectives as coll_mod
from analyze.timeline import cycles


# reports larger than this take over a second: their analysis shows its stages
STAGES_MIN_BYTES = 50 * 2**20


class _Stages:
    """Progress through one report's analysis, one line per stage on stderr (when ``enabled`` and the
    report is large enough to take over a second): reading, linking, projecting, attributing, cycles."""

    def __init__(self, enabled: bool, path: str):
        import time

        self.clock = time.monotonic
        self.enabled = enabled and os.path.getsize(path) >= STAGES_MIN_BYTES
        self.name, self.t0 = Path(path).name, self.clock()

    def __call__(self, what: str) -> None:
        if self.enabled:
            print(f"analyze-trace: {self.name}: {what} ({self.clock() - self.t0:.1f} s)", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self.enabled:
            print(f"analyze-trace: {self.name}: done ({self.clock() - self.t0:.1f} s)", file=sys.stderr, flush=True)


def analyze_report(path: str, config: PhaseConfig | None = None, *, cache: bool = False,
                   memory_budget: int | None = None, progress: bool = False) -> ReportResult:
    """Map step: read one report and attribute its GPU time, per process (rank).

    GPU ops are handled as NumPy arrays of integer codes (name code into the report's name table,
    phase code, rank code), sorted once by (rank, start); the per-op table is built once, at the
    end. Cycles and the collective ops are computed here too, so the reducer only sees per-rank,
    per-cycle and per-collective rows (plus the op table, for plots and notebooks)."""
    config = config or PhaseConfig()
    stage = _Stages(progress, str(path))
    try:
        return _analyze_report(path, config, cache, memory_budget, stage)
    finally:
        stage.close()


def _analyze_report(path, config: PhaseConfig, cache: bool, memory_budget, stage) -> ReportResult:
    stage("reading")
    read_notes: list[Note] = []    # where the tables came from (cache), see read_tables

    def prepare(calls, ranges):
        return prepare_launches(calls, ranges, config)

    if memory_budget and not cache:
        result = _analyze_in_chunks(str(path), config, memory_budget, stage, prepare, read_notes)
        if result is not None:
            return result
    tables = read_tables(path, cache=cache, memory_budget=memory_budget, notes=read_notes, prepare=prepare)
    ops = tables.gpu_ops
    if ops.empty:
        if tables.ranges.empty and tables.marks.empty:
            raise NoCudaActivity(f"{path}: no GPU activity and no NVTX in this export "
                                        "(was it captured with -t cuda?)")
        raise NvtxOnly(f"{path}: NVTX only, no CUDA activity: profile with -t cuda,nvtx", path)
    path = str(path)
    cols = {c: ops[c].to_numpy() for c in ops.columns if c != "kind"}
    kind = attribution.kind_codes(ops["kind"])
    graph_node = ops["graph_node_id"]
    tables = tables._replace(gpu_ops=None)
    del ops
    pid = cols["global_pid"].astype("int64", copy=False)
    start = cols["start_ns"].astype("int64", copy=False)
    end = cols["end_ns"].astype("int64", copy=False)
    name_code, names = attribution.op_name_codes(kind, cols["name_id"], tables.strings)

    stage("linking ops to API calls")
    launches = tables.prepared if tables.prepared is not None else \
        prepare_launches(tables.calls, tables.ranges, config)
    ranges, calls, index, layout = launches.ranges, launches.calls, launches.index, launches.layout
    op_call = projection.link_op_arrays(pid, cols["correlation_id"].astype("int64", copy=False), calls, index)

    # nsys' projection (kernels, memcpys, memsets) and ours (graph-level launches too) runs in a
    # second thread while this one attributes phases: both are NumPy passes that release the GIL
    stage("projecting NVTX ranges and attributing phases")
    from concurrent.futures import ThreadPoolExecutor

    def project():
        projected = (kind >= 0) & (kind <= 2)          # kernel, memcpy, memset
        spans, spans_all = projection.call_op_span_pairs(op_call, start, end, projected, len(index.key))
        return (projection.project_ranges(ranges, index, *spans, layout),
                projection.project_ranges(ranges, index, *spans_all, layout), spans_all)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-project") as pool:
        projecting = pool.submit(project)
        ranks = identify_ranks(_pid_device_pairs(pid, cols["device_id"]), tables.marks, ranges,
                               tables.processes, path)
        name_phase = attribution.kernel_phase_codes(names, config)
        phase, range_id, inclusive = attribution.op_phase_codes(launches.painted, op_call, name_code,
                                                                name_phase, config)
        outermost = launches.painted.outermost
        rank_values = ranks["rank"].to_numpy(dtype="int64")
        pid_sorted = np.argsort(ranks["global_pid"].to_numpy(dtype="int64"), kind="stable")
        rank_code = pid_sorted[np.searchsorted(ranks["global_pid"].to_numpy(dtype="int64")[pid_sorted], pid)]
        rank_code = rank_code.astype("int32")   # ranks is sorted by rank: code order = rank order
        # one stable sort by (rank, start) serves the unions, the cycles and the collectives
        order = attribution.sort_order(rank_code, start)
        s_code, s_start, s_end = rank_code[order], start[order], end[order]
        is_kernel = kind == 0
        figures = attribution.rank_figures_sorted(
            s_code, s_start, s_end, is_kernel[order], phase[order],
            {k: v[order] for k, v in inclusive.items()} if isinstance(inclusive, dict) else inclusive[order],
            len(ranks), config)
        del inclusive
        nsys_proj, all_proj, (has_all, first_all, last_all) = projecting.result()
    ranges = ranges.assign(gpu_ops=nsys_proj["gpu_ops"], gpu_start_ns=nsys_proj["gpu_start_ns"],
                           gpu_end_ns=nsys_proj["gpu_end_ns"], gpu_ops_all=all_proj["gpu_ops"],
                           gpu_start_all=all_proj["gpu_start_ns"], gpu_end_all=all_proj["gpu_end_ns"])
    ranges["full_name"] = launches.full_name
    nvtx_summary = projection.nvtx_projection_summary(ranges, nsys_proj)
    rank_of_pid = dict(zip(ranks["global_pid"].tolist(), ranks["rank"].tolist()))
    ranges["rank"] = ranges["global_pid"].map(rank_of_pid).fillna(-1).astype("int64")
    ranges["outermost"] = outermost
    phases, totals = attribution.phase_tables(figures, ranges, outermost, ranks, config)
    phase_names = list(config.names) + [OTHER]
    duration = end - start
    kernels = attribution.kernel_table_codes(rank_code, rank_values, phase, phase_names, name_code, names,
                                             duration)
    coll_names = collective_names(names, config)
    collective = coll_names[name_code] if len(names) else np.zeros(len(start), dtype=bool)
    cycle_range = cycle_of_ops(launches, op_call)
    windows = cycles.cycle_windows(launches.cycle_owner, has_all, first_all, last_all)
    del has_all, first_all, last_all
    ranges["is_cycle"] = launches.is_cycle
    op_rank = rank_values[rank_code]
    # the object columns, built once (every element is one of the few distinct strings)
    name_full = names[name_code] if len(names) else np.zeros(0, dtype=object)
    phase_full = np.array(phase_names, dtype=object)[phase]
    coll_ops = coll_mod.collective_ops(op_rank, start, end, phase_full, collective, name_full,
                                       order) if collective.any() else None
    ranges = ranges.rename_axis("range_id").reset_index()
    marks = tables.marks.assign(input=path)
    stage("decode cycles")
    cycle_rows = ranges[ranges["is_cycle"].to_numpy(dtype=bool)].assign(input=path)   # not a copy of all
    cycle_tab = cycles.cycle_table_arrays(op_rank, start, end, phase, cycle_range,
                                          np.zeros(len(start), dtype="int64"), cycle_rows,
                                          np.zeros(len(cycle_rows), dtype="int64"), marks, config, op_order=order,
                                          windows=windows, presorted=(rank_values[s_code], s_start, s_end))
    del order, s_code, s_start, s_end

    gpu_ops = pd.DataFrame({
        "kind": pd.Categorical.from_codes(kind, categories=list(attribution.KIND_NAMES)),
        "global_pid": cols["global_pid"], "device_id": cols["device_id"], "stream_id": cols["stream_id"],
        "correlation_id": cols["correlation_id"], "graph_node_id": graph_node.array,
        "name_id": cols["name_id"], "start_ns": start, "end_ns": end,
        "name": pd.Series(name_full, dtype=object, copy=False),
        "phase": pd.Series(phase_full, dtype=object, copy=False),
        "range_id": range_id, "rank": op_rank, "duration_ns": duration,
        "call_pos": op_call, "input": pd.Categorical.from_codes(np.zeros(len(start), dtype="int8"), [path]),
        "collective": collective, "cycle_range": cycle_range}, copy=False)
    notes = read_notes + checks.all_notes(tables, gpu_ops, op_call, ranges)
    return ReportResult(path, tables.meta, ranks, gpu_ops, ranges, tables.marks, phases, kernels, totals,
                        nvtx_summary, notes, cycles=cycle_tab, collective_ops=coll_ops)


def _analyze_in_chunks(path: str, config: PhaseConfig, memory_budget: int, stage, prepare,
                       notes: list[Note]) -> ReportResult | None:
    """The map step in time-ordered chunks of GPU ops sized to ``memory_budget`` (chunked.py);
    None, with a note, when the report's op tables are not in time order (then the caller reads the
    ops whole, in rowid chunks)."""
    from analyze.run import chunked

    tables = report.read_report(path, prepare=prepare, ops=False,
                                nvtx_chunk_rows=max(MIN_CHUNK_ROWS, int(memory_budget) // (4 * READ_BYTES_PER_OP)))
    if tables.ranges.empty and tables.marks.empty and not report_has_ops(path):
        raise NoCudaActivity(f"{path}: no GPU activity and no NVTX in this export "
                                    "(was it captured with -t cuda?)")
    if not report_has_ops(path):
        raise NvtxOnly(f"{path}: NVTX only, no CUDA activity: profile with -t cuda,nvtx", path)
    fixed = BASE_BYTES + FIXED_BYTES_PER_CALL * len(tables.calls) + FIXED_BYTES_PER_RANGE * len(tables.ranges)
    chunk_rows = max(MIN_CHUNK_ROWS, (int(memory_budget) - fixed) // CHUNK_BYTES_PER_OP)
    floor = BASE_BYTES + FLOOR_BYTES_PER_CALL * len(tables.calls) + FLOOR_BYTES_PER_RANGE * len(tables.ranges)
    floor_note = [] if floor <= int(memory_budget) else [Note(
        N.BELOW_FLOOR, f"--memory-budget {_size(int(memory_budget))} is below this report's floor, about "
        f"{_size(floor)} (its API calls and NVTX ranges are held whole): the GPU ops went in the smallest chunks")]
    try:
        # handed over in a box the callee empties: no frame here keeps the call-side arrays alive
        box = [tables]
        del tables
        result = chunked.analyze_chunked(path, config, box, chunk_rows, stage)
        memory.release()          # the freed working heap, before the reports are combined
        result.notes.extend(floor_note)
        return result
    except chunked.NotTimeOrdered:
        notes.append(Note(N.NOT_TIME_ORDERED, "--memory-budget: the GPU op tables are not in time order, so the "
                          "report was analysed in one piece (only its read was chunked)"))
        return None


def report_has_ops(path: str) -> bool:
    conn = open_report(path, quick_check=False)
    try:
        return any(report.rowid_bounds(conn, p.table)[0] is not None for p in report.plan_gpu_op_reads(conn))
    finally:
        conn.close()


def _pid_device_pairs(pid: np.ndarray, device: np.ndarray) -> pd.DataFrame:
    """Distinct (global_pid, device_id) pairs of the ops (what identify_ranks looks at), in order
    of first appearance."""
    pcode, puniq = pd.factorize(pid)
    dev = np.asarray(device, dtype="int64")
    d_lo = int(dev.min()) if len(dev) else 0
    d_span = (int(dev.max()) - d_lo + 1) if len(dev) else 1
    if d_span * max(len(puniq), 1) <= 1 << 16:     # devices are small ordinals: one scatter, no hashing
        key = pcode.astype("int64") * d_span + (dev - d_lo)
        first = np.full(d_span * max(len(puniq), 1), len(key), dtype="int64")
        first[key[::-1]] = np.arange(len(key) - 1, -1, -1)
        seen = np.flatnonzero(first < len(key))
        key = seen[np.argsort(first[seen], kind="stable")]
        return pd.DataFrame({"global_pid": np.asarray(puniq, dtype="int64")[key // d_span],
                             "device_id": key % d_span + d_lo})
    dcode, duniq = pd.factorize(dev)
    key = pd.unique(pcode.astype("int64") * (len(duniq) + 1) + dcode)      # hashing, no sort
    return pd.DataFrame({"global_pid": np.asarray(puniq, dtype="int64")[key // (len(duniq) + 1)],
                         "device_id": np.asarray(duniq, dtype="int64")[key % (len(duniq) + 1)]})


def collective_names(names: np.ndarray, config: PhaseConfig) -> np.ndarray:
    """Per distinct name, whether it is a collective (kernel patterns of the ``allreduce`` phase)."""
    phase = next((p for p in config.phases if p.name == "allreduce" and p.kernels), None)
    if phase is None:
        return np.zeros(len(names), dtype=bool)
    rx = phase.kernel_regex()
    return np.array([bool(rx.fullmatch(u)) if isinstance(u, str) else False for u in names], dtype=bool)


def load(paths, config: PhaseConfig | None = None, *, jobs: int = 1, progress: bool = False,
         cache: bool = False, memory_budget: int | str | None = "auto",
         scheduler: str | None = None) -> Analysis:
    """Analyze one or more nsys SQLite exports (files or directories) into an :class:`Analysis`.
    ``memory_budget``: bytes (time-ordered chunks, see chunked.py), None (whole), or "auto": whole
    unless a report would not fit in the available memory (:func:`auto_budget`)."""
    config = config or PhaseConfig()
    files = expand_inputs(paths)
    results = map_reports(files, config, jobs=jobs, progress=progress, cache=cache,
                          memory_budget=memory_budget, scheduler=scheduler)
    analysis = multirank.combine(results, config)
    chunked = any(N.has(r.notes, N.CHUNKED) for r in results)
    del results
    if chunked:
        memory.release()       # what combining left on the heap, before plots and tables are drawn
    return analysis


def map_reports(files: list[str], config: PhaseConfig, *, jobs: int = 1, progress: bool = False,
                cache: bool = False, memory_budget: int | str | None = None,
                scheduler: str | None = None) -> list[ReportResult]:
    """Map step over reports: in this process (jobs=1), a process pool (jobs=N) or on a Dask
    cluster (scheduler=ADDRESS, see distributed.py). Results come back in the order of ``files``.
    ``memory_budget="auto"``: each report whole, unless it would not fit in this machine's
    available memory (shared by the reports analysed at once): then in chunks, with a note
    (:func:`auto_budget`)."""
    if scheduler:
        from analyze.run import distributed
        return distributed.map_reports(analyze_report, files, config, scheduler, progress=progress, cache=cache,
                                       memory_budget=None if memory_budget == AUTO else memory_budget)
    at_once = 1 if jobs <= 1 or len(files) <= 1 else min(jobs, len(files))
    budgets, auto_notes = [memory_budget] * len(files), [None] * len(files)
    if memory_budget == AUTO:
        budgets, auto_notes = map(list, zip(*(auto_budget(f, at_once, cache) for f in files))) if files \
            else ([], [])
    if at_once == 1:
        results = [analyze_report(f, config, cache=cache, memory_budget=b, progress=progress)
                   for f, b in zip(_progress(files, progress and len(files) > 1), budgets)]
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(analyze_report, f, config, cache=cache, memory_budget=b)
                       for f, b in zip(files, budgets)]
            results = [f.result() for f in _progress(futures, progress, total=len(files))]
    for result, note in zip(results, auto_notes):
        if note:
            result.notes.append(note)
    return results


AUTO = "auto"
# the whole analysis' peak per GPU op (over the floor of calls and ranges), measured 3.3 GiB at 10M
# kernels and 8.9 GiB at 30M (bench/results.md): the estimate errs on the high side
WHOLE_BYTES_PER_OP = 250
# a report is analysed whole when its estimate is below this share of the available memory; else
# in chunks under a budget of AUTO_BUDGET_SHARE of it
AUTO_FIT_SHARE = 0.8
AUTO_BUDGET_SHARE = 0.5


def estimate_whole_bytes(path: str) -> int | None:
    """What the whole analysis of ``path`` is expected to peak at (row counts from rowid bounds, a
    few seeks), or None when the report cannot be opened (the analysis then says why)."""
    try:
        conn = open_report(path, quick_check=False)
    except (TraceError, OSError, sqlite3.Error):
        return None
    try:
        def rows(table: str) -> int:
            if not has_table(conn, table):
                return 0
            lo, hi = report.rowid_bounds(conn, table)
            return 0 if lo is None else int(hi) - int(lo) + 1
        ops = sum(rows(p.table) for p in report.plan_gpu_op_reads(conn))
        return (BASE_BYTES + WHOLE_BYTES_PER_OP * ops + FLOOR_BYTES_PER_CALL * rows("CUPTI_ACTIVITY_KIND_RUNTIME")
                + FLOOR_BYTES_PER_RANGE * rows("NVTX_EVENTS"))
    except (TraceError, sqlite3.Error):
        return None
    finally:
        conn.close()


def auto_budget(path: str, at_once: int = 1, cache: bool = False) -> tuple[int | None, Note | None]:
    """(memory budget, note) for ``memory_budget="auto"``: (None, None), the whole analysis, when
    the report's estimate fits ``AUTO_FIT_SHARE`` of the available memory (divided among the
    ``at_once`` reports analysed together), else a budget of ``AUTO_BUDGET_SHARE`` of it and the
    note that says so. Whole too when the memory or the estimate is unknown, or with ``cache``."""
    available = memory.available_bytes()
    need = None if cache or available is None else estimate_whole_bytes(path)
    if need is None:
        return None, None
    share = available // max(at_once, 1)
    if need <= AUTO_FIT_SHARE * share:
        return None, None
    budget = max(int(AUTO_BUDGET_SHARE * share), 1)
    per = f" ({at_once} reports at once)" if at_once > 1 else ""
    return budget, Note(N.AUTO_BUDGET, f"the whole analysis would need about {_size(need)} and {_size(share)} of "
                        f"memory is available{per}: analysed as under --memory-budget {_size(budget)} (time-ordered "
                        "chunks; the per-op table gpu_ops is not kept; --memory-budget none analyses it whole)")


# bytes a GPU op costs while it is read (Arrow buffers + NumPy columns + the DataFrame)
READ_BYTES_PER_OP = 200
# chunked analysis: bytes per op of a chunk in flight (the chunk read ahead, its arrays, sorted
# copies and masks); what the calls and ranges keep in memory per row while the chunks go by (the
# range frame itself waits on disk); and the interpreter with its libraries
CHUNK_BYTES_PER_OP = 600
FIXED_BYTES_PER_CALL = 60
FIXED_BYTES_PER_RANGE = 40
BASE_BYTES = 150_000_000
# the peak of a chunked analysis whatever its chunk size, per API call and per NVTX range (the
# preparation holds both whole; the ranges come back as a result table): measured 0.96 GB for
# 2.2M calls and 2.5M ranges (10M kernels), see docs/performance.md
FLOOR_BYTES_PER_CALL = 150
FLOOR_BYTES_PER_RANGE = 200


def _size(n_bytes: int) -> str:
    if n_bytes < 10 ** 6:
        return f"{n_bytes} bytes"
    return f"{n_bytes / 1e6:.0f} MB" if n_bytes < 10 ** 9 else f"{n_bytes / 1e9:.2f} GB"
# smallest read chunk (rows); tests lower it to force many chunk boundaries
MIN_CHUNK_ROWS = 50_000


def read_tables(path: str, *, cache: bool = False, memory_budget: int | None = None,
                notes: list[Note] | None = None, prepare=None) -> report.ReportTables:
    """The report's tables: from the Parquet cache when ``cache`` (cache.py), GPU ops read in rowid
    chunks sized to ``memory_budget`` bytes when given (the same tables either way)."""
    chunk_rows = max(MIN_CHUNK_ROWS, int(memory_budget) // (4 * READ_BYTES_PER_OP)) if memory_budget else None

    def reader(p):
        return report.read_report(p, chunk_rows=chunk_rows, prepare=prepare)

    if not cache:
        return reader(path)
    from analyze.read import cache as cache_mod
    tables, note = cache_mod.load_or_read(path, reader)
    if note and notes is not None:
        notes.append(note)
    return tables
