"""The Python API: ``analyze.load(paths) -> Analysis`` (DataFrames, the numbers the CLI prints).

One map task per report (:func:`map_one`: the memory policy, then the map step of mapstep.py;
pure, picklable in and out, so it runs the same inline, in a process pool or on Dask,
executors.py) and one reducer across reports (:func:`multirank.combine`: rank identity across
files, time alignment, collectives). The memory policy, the same on every path (cache and Dask
included): a report is analysed whole unless a budget is given or, with ``"auto"``, its estimate
would not fit the memory available where it runs; then in time-ordered chunks.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from analyze import memory
from analyze import notes as N
from analyze.attribute.phases import PhaseConfig
from analyze.notes import Note
from analyze.read import report, runset, source
from analyze.results import Analysis, ReportResult
from analyze.run import multirank
from analyze.run.executors import executor
from analyze.run.launches import prepare_launches
from analyze.run.mapstep import ReportMap, chunk_of_frame, chunked_note
from analyze.run.spill import OpStore


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


def analyze_report(report_or_source, config: PhaseConfig | None = None, *, cache: bool = False,
                   memory_budget: int | None = None, progress: bool = False) -> ReportResult:
    """:func:`_analyze_report` of a report (a path, or its open :class:`~analyze.read.source.ReportSource`);
    an SQLite error anywhere in it (a page that fails to read deep inside a damaged file shows up only
    when that page is queried) is the corrupt-input error (exit 6)."""
    from analyze.read.connection import reading

    with source.opened(report_or_source) as src, reading(src.path):
        return _analyze_report(src, config, cache=cache, memory_budget=memory_budget, progress=progress)


def _analyze_report(src: source.ReportSource, config: PhaseConfig | None = None, *, cache: bool = False,
                    memory_budget: int | None = None, progress: bool = False) -> ReportResult:
    """The map step of one report (times on the report's own clock): whole (``memory_budget``
    None: the per-op table ``gpu_ops`` is kept), or in time-ordered chunks sized to
    ``memory_budget`` bytes (the same tables, ``gpu_ops`` not kept, a note). ``cache``: the
    extracted tables from / to the Parquet cache (read/cache.py), whole or in chunks alike."""
    config = config or PhaseConfig()
    src.require_gpu_activity()        # else the error that says why (nsys' own words)
    stage = _Stages(progress, src.path)
    notes: list[Note] = []          # where the tables came from (cache), how the budget was used
    try:
        if memory_budget:
            result = _map_in_chunks(src, config, int(memory_budget), cache, stage, notes)
            if result is not None:
                return result
        return _map_whole(src, config, cache, memory_budget, stage, notes)
    finally:
        stage.close()


def _map_whole(src: source.ReportSource, config: PhaseConfig, cache: bool, memory_budget, stage,
               notes: list[Note]) -> ReportResult:
    """The map step over every op of the report at once (the one-chunk case; the per-op table kept)."""
    stage("reading")
    path = src.path
    tables = read_tables(src, cache=cache, memory_budget=memory_budget, notes=notes)
    if tables.gpu_ops.empty:                  # the read left every op out (read/validate.py)
        src.require_gpu_activity(usable_ops=0)
    # the launches, prepared once the ops are known (so only the calls that launched something)
    tables = tables._replace(prepared=prepare_launches(tables.calls, tables.ranges, config, ops=tables.gpu_ops,
                                                       strings=tables.strings))
    chunk = chunk_of_frame(tables.gpu_ops)
    box = [tables._replace(gpu_ops=None)]
    del tables
    step = ReportMap(path, config, box, keep_ops=True, store=OpStore(on_disk=False), stage=stage, detail=True)
    step.update(chunk)
    n_ops = len(chunk.start_ns)
    del chunk
    result = step.finish()
    del step
    if n_ops >= memory.TRIM_AFTER_OPS:
        memory.release()
    result.notes[:0] = notes
    return result


def _map_in_chunks(src: source.ReportSource, config: PhaseConfig, memory_budget: int, cache: bool, stage,
                   notes: list[Note]) -> ReportResult | None:
    """The map step over time-ordered chunks of GPU ops sized to ``memory_budget`` (chunks.py), from
    the export or from its cache entry; None, with a note, when the report's op tables are not in
    time order (then the caller reads the ops whole, in rowid chunks)."""
    from analyze.read import cache as cache_mod
    from analyze.run import chunks

    stage("reading")
    path = src.path

    def prepare(calls, ranges, op_keys=None, strings=None):
        return prepare_launches(calls, ranges, config, op_keys=op_keys, strings=strings)

    entry, where = cache_mod.find_entry(path) if cache else (None, None)
    fill = None
    if entry is not None:
        tables = cache_mod.load_tables(path, entry, ops=False)
        cached = cache_mod.CachedOps(entry)
        keys = cached.keys() if cached.total_rows() else None      # the launching calls only (read_report)
        tables = tables._replace(prepared=prepare(tables.calls, tables.ranges, op_keys=keys, strings=tables.strings))
        notes += [where] if where else []
    else:
        tables = src.tables(ops=False, op_keys=True,
                            nvtx_chunk_rows=max(MIN_CHUNK_ROWS, memory_budget // (4 * READ_BYTES_PER_OP)))
        tables = tables._replace(prepared=prepare(tables.calls, tables.ranges, op_keys=tables.op_keys,
                                                  strings=tables.strings), op_keys=None)
    fixed = BASE_BYTES + FIXED_BYTES_PER_CALL * len(tables.calls) + FIXED_BYTES_PER_RANGE * len(tables.ranges)
    chunk_rows = max(MIN_CHUNK_ROWS, (memory_budget - fixed) // CHUNK_BYTES_PER_OP)
    floor = BASE_BYTES + FLOOR_BYTES_PER_CALL * len(tables.calls) + FLOOR_BYTES_PER_RANGE * len(tables.ranges)
    floor_note = [] if floor <= memory_budget else [Note(
        N.BELOW_FLOOR, f"--memory-budget {_size(memory_budget)} is below this report's floor, about "
        f"{_size(floor)} (its API calls and NVTX ranges are held whole): the GPU ops went in the smallest chunks")]
    if entry is not None:
        source = chunks.CachedChunks(cached, chunk_rows)
    else:
        fill = cache_mod.ChunkFill(path, tables) if cache else None
        source = chunks.SqliteChunks(src.time_chunks(chunk_rows), on_read=fill.append if fill else None)
    # handed over in a box the map step empties: no frame here keeps the call-side arrays alive
    box = [tables]
    del tables
    step = ReportMap(path, config, box, keep_ops=False, store=OpStore(on_disk=True), stage=stage)
    memory.release()                 # the NVTX read's buffers
    try:
        for k, chunk in enumerate(chunks.iter_chunks(source)):
            stage(f"chunk {k + 1}/{len(source)}")
            step.update(chunk)
            del chunk
    except BaseException as exc:     # out of time order, an error, an interrupt: no half-written cache entry
        step.store.close()
        if fill is not None:
            fill.abort()
        if not isinstance(exc, chunks.NotTimeOrdered):
            raise
        notes.append(Note(N.NOT_TIME_ORDERED, "--memory-budget: the GPU op tables are not in time order, so the "
                          "report was analysed in one piece (only its read was chunked)"))
        return None
    result = step.finish()
    memory.release()          # the freed working heap, before the reports are combined
    cache_note = fill.commit() if fill is not None else None
    result.notes[:0] = notes + ([cache_note] if cache_note else [])
    result.notes += [chunked_note(len(source))] + floor_note
    return result


def load(paths, config: PhaseConfig | None = None, *, jobs: int = 1, progress: bool = False,
         cache: bool = False, memory_budget: int | str | None = "auto",
         scheduler: str | None = None, allow_mixed: bool = False, strict: bool = False) -> Analysis:
    """Analyze one or more nsys SQLite exports (files or directories) into an :class:`Analysis`.
    ``memory_budget``: bytes (time-ordered chunks, see mapstep.py), None (whole), or "auto": whole
    unless a report would not fit in the available memory (:func:`auto_budget`). The same policy
    inline (jobs=1), in a process pool (jobs=N), on a Dask cluster (scheduler=ADDRESS) and with
    the cache. The reports are checked first (read/runset.py): the same report twice or reports of
    different runs are refused unless ``allow_mixed``; a report of a directory that cannot be
    analysed is left out with a note unless ``strict``. A live timing log (a ``*.parquet`` file or a
    directory of them, run/live.py) is read as its cycle table instead (no kernel tables)."""
    from analyze.run import live

    logs = live.live_paths(paths)
    if logs is not None:              # live timing logs (docs/live.md): cycles only, no kernels
        return live.load_live(logs)
    config = config or PhaseConfig()
    run = runset.collect(paths, allow_mixed=allow_mixed, strict=strict)
    results = map_reports(run.files, config, jobs=jobs, progress=progress, cache=cache,
                          memory_budget=memory_budget, scheduler=scheduler)
    analysis = multirank.combine(results, config)
    analysis.notes.extend(run.notes)
    del results
    # what the map step and combining left on the heap, handed back before views, plots and tables
    # are drawn, by a big analysis (the peak of a whole one was there: measured at 10M kernels);
    # below TRIM_AFTER_OPS the views' arrays reuse those pages instead of faulting in fresh ones
    # (real tiled 1M: 190k page faults -> 150k, a tenth of the wall time: docs/performance.md)
    if int(analysis.totals["gpu_ops"].sum()) >= memory.TRIM_AFTER_OPS:
        memory.release()
    return analysis


@dataclass(frozen=True)
class MapOptions:
    """What every map task of an analysis is given besides its report (picklable)."""

    config: PhaseConfig
    cache: bool = False
    memory_budget: int | str | None = None   # bytes, None (whole) or "auto"
    at_once: int = 1          # map tasks sharing the memory of the machine this one runs on
    progress: bool = False    # stage lines of large reports on stderr


def map_one(path: str, options: MapOptions) -> ReportResult:
    """The map task of one report, wherever it runs: the memory policy (:func:`budget_for`, on the
    machine that runs it), then the map step (:func:`analyze_report`), on the report opened once."""
    with source.ReportSource(path) as src:
        budget, note = budget_for(src, options.memory_budget, options.at_once)
        result = analyze_report(src, options.config, cache=options.cache, memory_budget=budget,
                                progress=options.progress)
    if note:
        result.notes.append(note)
    return result


def budget_for(path, memory_budget: int | str | None, at_once: int = 1) -> tuple[int | None, Note | None]:
    """(memory budget in bytes or None for whole, note): ``"auto"`` decided by :func:`auto_budget`,
    anything else taken as given."""
    if memory_budget == AUTO:
        return auto_budget(path, at_once)
    return (int(memory_budget) if memory_budget else None), None


def map_reports(files: list[str], config: PhaseConfig, *, jobs: int = 1, progress: bool = False,
                cache: bool = False, memory_budget: int | str | None = None,
                scheduler: str | None = None) -> list[ReportResult]:
    """:func:`map_one` over reports: in this process (jobs=1), a process pool (jobs=N) or on a Dask
    cluster (scheduler=ADDRESS, see distributed.py). Results come back in the order of ``files``.
    ``memory_budget="auto"``: each report whole, unless it would not fit in the available memory
    of the machine that analyses it (shared by the reports analysed there at once): then in
    chunks, with a note (:func:`auto_budget`)."""
    run = executor(jobs, scheduler, len(files), progress)
    try:
        inline = run.slots == 1 and not scheduler
        options = MapOptions(config, cache, memory_budget, at_once=run.slots, progress=progress and inline)
        return run.map(map_one, list(files), options)
    finally:
        run.close()


AUTO = "auto"
# the whole analysis' peak per GPU op (over the floor of calls and ranges), measured 3.3 GiB at 10M
# kernels and 8.9 GiB at 30M (bench/results.md): the estimate errs on the high side
WHOLE_BYTES_PER_OP = 250
# a report is analysed whole when its estimate is below this share of the available memory; else
# in chunks under a budget of AUTO_BUDGET_SHARE of it
AUTO_FIT_SHARE = 0.8
AUTO_BUDGET_SHARE = 0.5


def estimate_whole_bytes(path) -> int | None:
    """What the whole analysis of ``path`` (or its ReportSource) is expected to peak at (row counts:
    report.row_counts, a few seeks), or None when the report cannot be opened (the analysis then says
    why)."""
    with source.opened(path) as src:
        rows = src.row_counts()
    if rows is None:
        return None
    return (BASE_BYTES + WHOLE_BYTES_PER_OP * rows["ops"] + FLOOR_BYTES_PER_CALL * rows["calls"]
            + FLOOR_BYTES_PER_RANGE * rows["ranges"])


def auto_budget(path, at_once: int = 1) -> tuple[int | None, Note | None]:
    """(memory budget, note) for ``memory_budget="auto"``: (None, None), the whole analysis, when
    the report's estimate fits ``AUTO_FIT_SHARE`` of the available memory (divided among the
    ``at_once`` reports analysed together), else a budget of ``AUTO_BUDGET_SHARE`` of it and the
    note that says so. Whole too when the memory or the estimate is unknown."""
    available = memory.available_bytes()
    need = None if available is None else estimate_whole_bytes(path)
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


def read_tables(path, *, cache: bool = False, memory_budget: int | None = None,
                notes: list[Note] | None = None) -> report.ReportTables:
    """The report's tables (``path``: a report or its ReportSource): from the Parquet cache when
    ``cache`` (cache.py), GPU ops read in rowid chunks sized to ``memory_budget`` bytes when given
    (the same tables either way)."""
    chunk_rows = max(MIN_CHUNK_ROWS, int(memory_budget) // (4 * READ_BYTES_PER_OP)) if memory_budget else None
    with source.opened(path) as src:
        if not cache:
            return src.tables(chunk_rows=chunk_rows)
        from analyze.read import cache as cache_mod
        tables, note = cache_mod.load_or_read(src.path, lambda p: src.tables(chunk_rows=chunk_rows))
    if note and notes is not None:
        notes.append(note)
    return tables
