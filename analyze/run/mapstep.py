"""The map step: one report's GPU ops in, its :class:`~analyze.results.ReportResult` out.

Written once, as an accumulator over time-ordered chunks of the report's GPU ops
(:meth:`ReportMap.update` per chunk, :meth:`ReportMap.finish` once): the analysis of a whole
report is the one-chunk case, so a report analysed in chunks (``--memory-budget``) gives the same
tables by construction. Chunk k holds the ops of every op table that start in [T_k, T_k+1); the
driver (api.py, chunks.py) checks it.

The calls and NVTX ranges are prepared once, before any op (launches.py). Per chunk, the figures
that add up are added up (kernel sums, op counts, per-call first start and last end for the two
projections, odd-case counts), the unions behind busy and exclusive time are streamed
(:func:`intervals.union_step_segments`: exact because chunks come in time order), the collectives
carry the phase of the op before them on their process across chunks, and a few bytes per op are
kept (:class:`spill.OpStore`: in memory for a whole report, on disk under a budget) for what needs
every op of a rank at once: the per-cycle split and the per-kernel median and p99. Ranks are known
only at the end (the rank marks and devices of every process), so ops are grouped per process
(``global_pid``) meanwhile; a process is a rank.

The per-op table (``gpu_ops``) is built only for a report analysed in one chunk (``keep_ops``);
otherwise it is empty and the kept op columns are written to a Parquet file instead, the report's op
store (``ops``: :class:`analyze.opstore.SpilledOps`), which the timeline plot, advise and whatif
query as they query a per-op table.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze import memory, opstore
from analyze import notes as N
from analyze.attribute import attribution
from analyze.attribute import intervals
from analyze.attribute.intervals import INT64_MIN, segment_duration_sums, union_step_segments
from analyze.attribute.phases import OTHER, PhaseConfig
from analyze.notes import Note
from analyze.project import projection
from analyze.ranks.identify import identify_ranks
from analyze.read import capture, report
from analyze.read.ids import ID_DTYPE, narrow_ids
from analyze.results import ReportResult
from analyze.run import checks
from analyze.run.launches import Launches, cycle_of_ops, report_rows
from analyze.run.spill import OpStore
from analyze.timeline import collectives as coll_mod
from analyze.timeline import cycles

INT64_MAX = np.iinfo(np.int64).max
KINDS = attribution.KIND_NAMES
OP_TABLE_COLUMNS = ["kind", "global_pid", "device_id", "stream_id", "correlation_id", "graph_node_id", "name_id",
                    "start_ns", "end_ns", "name", "phase", "range_id", "rank", "duration_ns", "call_pos", "input",
                    "collective", "cycle_range"]


# the per-op table's id columns (OP_ID_COLUMNS) are int32 whenever every value fits (they do for any
# real export: ranks, devices, streams, string ids, rows of the report's own tables), int64 otherwise
# (read/ids.py)
OP_ID_COLUMNS = ("device_id", "stream_id", "name_id", "range_id", "rank", "call_pos", "cycle_range")


class OpChunk(NamedTuple):
    """GPU ops of one time slice of a report, as arrays (one element per op)."""

    kind: np.ndarray              # int8 code into attribution.KIND_NAMES
    global_pid: np.ndarray
    device_id: np.ndarray
    correlation_id: np.ndarray
    name_id: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    stream_id: np.ndarray | None = None     # the per-op table's own columns (whole reports only)
    graph_node_id: object = None
    graph_node: np.ndarray | None = None    # per op, a CUDA graph node (bool; chunks read in parts)
    excluded: tuple = ()          # what the read of these rows left out (read/validate.py Exclusions)


def chunk_of_frame(ops: pd.DataFrame) -> OpChunk:
    """The op table of :func:`analyze.read.report.read_report` (every op: the one-chunk case)."""
    col = {c: ops[c].to_numpy() for c in ("global_pid", "device_id", "stream_id", "correlation_id",
                                          "name_id", "start_ns", "end_ns")}
    return OpChunk(attribution.kind_codes(ops["kind"]), col["global_pid"].astype("int64", copy=False),
                   col["device_id"], col["correlation_id"].astype("int64", copy=False), col["name_id"],
                   col["start_ns"].astype("int64", copy=False), col["end_ns"].astype("int64", copy=False),
                   col["stream_id"], ops["graph_node_id"].array)


def chunk_of_parts(parts: list[tuple[str, pd.DataFrame]]) -> OpChunk:
    """One chunk from its parts: (op kind, frame of :data:`analyze.read.report.GPU_OP_COLUMNS`
    but ``kind``) per op table."""
    excluded = tuple(x for _, f in parts for x in report.take_excluded(f))
    parts = [(k, f) for k, f in parts if len(f)]
    if not parts:
        z = np.zeros(0, dtype="int64")
        return OpChunk(np.zeros(0, dtype="int8"), z, z, z, z, z, z, excluded=excluded)
    kind = np.concatenate([np.full(len(f), KINDS.index(k), dtype="int8") for k, f in parts])
    col = {c: np.concatenate([f[c].to_numpy(dtype="int64") for _, f in parts])
           for c in ("global_pid", "device_id", "correlation_id", "name_id", "start_ns", "end_ns")}
    node = np.concatenate([f["graph_node_id"].notna().to_numpy() if "graph_node_id" in f.columns else
                           np.zeros(len(f), dtype=bool) for _, f in parts])
    return OpChunk(kind, col["global_pid"], col["device_id"], col["correlation_id"], col["name_id"],
                   col["start_ns"], col["end_ns"], graph_node=node, excluded=excluded)


class _Groups:
    """Dense codes for processes (global_pid) in order of appearance, and per-process arrays that
    grow as processes appear."""

    def __init__(self):
        self.code: dict[int, int] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.fill: dict[str, int] = {}

    def add(self, name: str, shape_head: tuple, fill) -> None:
        self.arrays[name] = np.full(shape_head + (0,), fill, dtype="int64")
        self.fill[name] = fill

    def codes(self, pid: np.ndarray, factorized: tuple | None = None) -> np.ndarray:
        """The dense code of every row's process; ``factorized``: ``pd.factorize(pid)`` when made already."""
        codes, uniq = factorized if factorized is not None else pd.factorize(pid)
        lookup = np.array([self.code.setdefault(int(u), len(self.code)) for u in np.asarray(uniq)],
                          dtype="int32")
        n = len(self.code)
        for name, arr in self.arrays.items():
            if arr.shape[-1] < n:
                grown = np.full(arr.shape[:-1] + (n,), self.fill[name], dtype="int64")
                grown[..., :arr.shape[-1]] = arr
                self.arrays[name] = grown
        return lookup[codes] if len(lookup) else np.zeros(0, dtype="int32")

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


PAIR_BLOCK_ROWS = 1 << 20
# threads for the per-process passes (the op pass, the cycles' interval split), a process or rank
# each: one per core, at most two (each holds one's gathered op columns; the readers use two as
# well, read/report.read_threads)
SPLIT_THREADS = max(1, min(2, os.cpu_count() or 1))


def pid_device_pairs(pid: np.ndarray, device: np.ndarray, factorized: tuple | None = None) -> pd.DataFrame:
    """Distinct (global_pid, device_id) pairs of some ops (what identify_ranks looks at), in the
    order they first occur; block by block (no temporaries as long as the ops). ``factorized``:
    ``pd.factorize(pid)`` when made already (the map step codes the processes with it too)."""
    if len(pid) <= PAIR_BLOCK_ROWS:
        return _block_pairs(pid, device, factorized)
    parts = [_block_pairs(pid[a:a + PAIR_BLOCK_ROWS], device[a:a + PAIR_BLOCK_ROWS],
                          None if factorized is None else (factorized[0][a:a + PAIR_BLOCK_ROWS], factorized[1]))
             for a in range(0, len(pid), PAIR_BLOCK_ROWS)]
    return pd.concat(parts, ignore_index=True).drop_duplicates(ignore_index=True)


def _block_pairs(pid: np.ndarray, device: np.ndarray, factorized: tuple | None = None) -> pd.DataFrame:
    """:func:`pid_device_pairs` of one block; ``factorized``: codes of the block's pids into uniques
    that may hold other blocks' pids too."""
    pcode, puniq = factorized if factorized is not None else pd.factorize(pid)
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


def _quiet(what: str) -> None:
    pass


class ReportMap:
    """The map step of one report, fed its GPU ops chunk by chunk in time order.

    ``box``: a list holding the report's :class:`~analyze.read.report.ReportTables`, read without
    GPU ops and with ``prepared`` = :class:`~analyze.run.launches.Launches`; emptied here, so that
    the caller keeps no reference and what is not needed any more (the API calls) can be freed.
    ``keep_ops``: build the per-op table (one chunk only). ``store``: where the per-op columns wait
    for :meth:`finish`. ``stage``: progress lines; ``detail``: the stages of a one-chunk analysis
    (linking, projecting and attributing) rather than those of a chunked one."""

    def __init__(self, path: str, config: PhaseConfig, box: list, *, keep_ops: bool, store: OpStore,
                 stage=None, detail: bool = False):
        tables = box.pop()
        launches: Launches = tables.prepared
        # the report as results name it (read.inputs.display_path); ``source``: the path it was read from
        self.source, self.path = str(path), tables.path
        self.config, self.keep_ops, self.store = config, keep_ops, store
        self.stage, self.detail = stage or _quiet, detail
        self.meta, self.marks, self.processes = tables.meta, tables.marks, tables.processes
        self.nccl_messages = tables.nccl_messages
        # what the calls and ranges alone say, before they are let go of
        self.input_notes = checks.input_notes(tables, launches.ranges, launches.shared_ids)
        # the report's calls let go of now (from here on only the prepared ones are used): what the
        # steps below allocate reuses their memory (real tiled 1M: peak 0.67 -> 0.62 GB)
        tables = tables._replace(calls=None)
        # (launches.calls: the prepared calls, fewer than the report's when the ops were read first)
        call_names = launches.calls["name_id"].to_numpy(dtype="int64")[launches.index.order] \
            if len(launches.calls) else np.zeros(0, dtype="int64")
        self.capture_ids = cycles.capture_cycle_ids(call_names, tables.strings, launches.cycle_owner)
        self.host_calls = self._host_calls(launches, call_names, tables.strings)
        del call_names
        self.n_calls = len(launches.index.key)
        # per sorted call, its row in the report's calls (the per-op table's call_pos)
        self.call_rows = narrow_ids(report_rows(launches)) if keep_ops else None
        self.keys = projection.call_keys(launches.calls, launches.index)
        if self.keys is not None:
            # ops are linked through the keys: the calls and their sort keys can go
            launches = launches._replace(calls=None, index=launches.index._replace(order=None, key=None))
        # the ranges are not looked at again until every chunk is in (on disk meanwhile, under a budget)
        store.put_frame("ranges", launches.ranges)
        self.launches = launches._replace(ranges=None, full_name=None)
        self.names = attribution.OpNames(tables.strings, config)
        del tables
        n_ph = len(config.names)
        groups = self.groups = _Groups()
        groups.add("reach", (2 + 2 * n_ph,), INT64_MIN)   # unions: busy, other, per phase inclusive, cumulative
        groups.add("total", (2 + 2 * n_ph,), 0)
        groups.add("kernel_ns", (n_ph + 2,), 0)            # per phase inclusive, other, all kernels
        groups.add("win_start", (), INT64_MAX)
        groups.add("win_end", (), INT64_MIN)
        groups.add("ops", (), 0)
        groups.add("last_phase", (), -1)                   # phase code of the last op (for collectives)
        groups.add("last_coll", (), 0)
        self.spans_nsys = projection.empty_call_spans(self.n_calls)
        self.spans_all = projection.empty_call_spans(self.n_calls)
        self.pairs: list[pd.DataFrame] = []
        self.counts = {"unlinked": 0, "zero": 0, "negative_pid": 0, "graph": 0, "excluded": []}
        self.n_ops = 0
        self.coll_parts: list[tuple] = []
        self.op_columns: dict | None = None
        self.chunks = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-spans")

    # ------------------------------------------------------------------------------------------
    def update(self, chunk: OpChunk) -> None:
        """Add one chunk: its ops all start at or after every op of the chunks before."""
        if self.keep_ops and self.chunks:
            raise ValueError("keep_ops: the per-op table is built from one chunk only")
        self.chunks += 1
        self.counts["excluded"] += list(chunk.excluded)
        if not len(chunk.start_ns):
            return
        self.n_ops += len(chunk.start_ns)
        config, n_ph = self.config, len(self.config.names)
        kind, pid, start, end = chunk.kind, chunk.global_pid, chunk.start_ns, chunk.end_ns
        name_code = self.names.codes(kind, chunk.name_id)
        if self.detail:
            self.stage("linking ops to API calls")
        launches = self.launches
        op_call = projection.link_with_keys(pid, chunk.correlation_id, self.keys) if self.keys is not None else \
            projection.link_op_arrays(pid, chunk.correlation_id, launches.calls, launches.index)
        counts = self.counts
        counts["unlinked"] += int((op_call < 0).sum())
        counts["zero"] += int((end == start).sum())
        counts["negative_pid"] += int((pid < 0).sum())
        counts["graph"] += int((kind == KINDS.index("graph")).sum())
        if self.detail:
            self.stage("projecting NVTX ranges and attributing phases")
        # the per-call spans behind both projections: for a whole report in a second thread while this
        # one attributes phases (NumPy passes that release the GIL); chunk by chunk (bounded memory)
        # one after the other
        spans_args = (op_call, start, end, (kind >= 0) & (kind <= 2), self.spans_nsys, self.spans_all)
        if self.detail:
            spans = self._pool.submit(projection.update_call_span_pairs, *spans_args)
        else:
            projection.update_call_span_pairs(*spans_args)
            spans = None
        del spans_args
        try:
            phase, range_id, inclusive = attribution.op_phase_codes(launches.painted, op_call, name_code,
                                                                    self.names.phase, config)
            if self.keep_ops:
                self.op_columns = {"chunk": chunk, "name_code": name_code, "phase": phase, "range_id": range_id,
                                   "op_call": op_call}
            del range_id
            # the processes coded once, for their device pairs and their groups (made here, not
            # earlier: 8 bytes per op held only while both use them)
            pid_codes = pd.factorize(pid)
            self.pairs.append(pid_device_pairs(pid, chunk.device_id, pid_codes))
            g_read = self.groups.codes(pid, pid_codes)
            del pid_codes
            n_g = len(self.groups.code)
            if self.keep_ops:
                self.op_columns["group"] = g_read         # the per-op rank, by a gather
            order = narrow_ids(attribution.sort_order(g_read, start))
            counts_of = np.bincount(g_read, minlength=n_g)
            bounds = np.r_[0, np.cumsum(counts_of)]
            # the runs of one process in (process, start) order (the order sorts by process code first)
            segs = [(int(c), int(bounds[c]), int(bounds[c + 1])) for c in np.flatnonzero(counts_of)]
            # kept in the order read (with the permutation): the chunk's own arrays, no sorted copies
            kept = {"g": g_read, "s": start, "e": end, "ph": phase, "nc": name_code}
            if not self.keep_ops:     # no per-op table: what launch gaps and whatif read from it kept too
                kept.update(k=kind, cr=narrow_ids(cycle_of_ops(launches, op_call)),
                            gn=chunk.graph_node if chunk.graph_node is not None else np.zeros(len(kind), dtype=bool))
            self.store.put(kept, order, segs)
            del kept
            if len(segs) > intervals.FEW_GROUPS:   # many processes: one pass over the whole sorted arrays
                passes = [self._op_pass(segs, g_read[order], start, end, phase, kind, inclusive, name_code, order)]
            else:
                # a process at a time, its ops gathered (small temporaries), on SPLIT_THREADS threads:
                # a pass writes only its own process' figures, and returns its collectives
                def one_process(seg):
                    code, first, stop = seg
                    return self._op_pass([(code, 0, stop - first)], np.full(stop - first, code, dtype=g_read.dtype),
                                         start, end, phase, kind, inclusive, name_code, order[first:stop])
                if SPLIT_THREADS > 1 and len(segs) > 1:
                    with ThreadPoolExecutor(max_workers=SPLIT_THREADS, thread_name_prefix="specprof-pass") as pool:
                        passes = list(pool.map(one_process, segs))
                else:
                    passes = [one_process(seg) for seg in segs]
            # in process order whatever the threads' timing
            self.coll_parts += [part for part in passes if part is not None]
            del g_read, phase, inclusive, passes
        finally:
            if spans is not None:
                spans.result()

    def _op_pass(self, segs, g, start, end, phase, kind, inclusive, name_code, order) -> tuple | None:
        """The ops ``order`` picks (``segs``: their runs of one process, ``g`` their process codes,
        in that sorted order; the other arrays in the order read): the rank figures' unions and
        kernel time, the processes' windows; returns their collectives (:meth:`_collectives`). It
        writes the figures of ``segs``' processes only (element by element), so passes over
        different processes may run at the same time."""
        config, n_ph, n_g = self.config, len(self.config.names), len(self.groups.code)
        s, e, ph = start[order], end[order], phase[order]
        is_kernel = kind[order] == 0
        incl = {k: v[order] for k, v in inclusive.items()} if isinstance(inclusive, dict) else inclusive[order]
        reach, total, kns = self.groups["reach"], self.groups["total"], self.groups["kernel_ns"]
        codes = np.array([c for c, _, _ in segs], dtype="int64")

        def add_kernel_ns(row: int, mask) -> None:   # only this pass' processes' elements
            kns[row, codes] += segment_duration_sums(segs, s, e, n_g, mask)[codes]

        def stream(u: int, mask=None):
            union_step_segments(segs, g, s, e, reach[u], total[u], mask)

        stream(0)
        covered = np.zeros(len(g), dtype=bool)
        for i, pname in enumerate(config.names):
            member = attribution.inclusive_mask(incl, i, pname)
            stream(2 + i, member)
            covered |= ph == i
            stream(2 + n_ph + i, covered)
            add_kernel_ns(i, member & is_kernel)
        del incl
        stream(1, ~covered)
        add_kernel_ns(n_ph, ~covered & is_kernel)
        add_kernel_ns(n_ph + 1, is_kernel)
        del covered, is_kernel
        first = np.array([a for _, a, _ in segs], dtype="int64")
        last = np.array([b for _, _, b in segs], dtype="int64") - 1
        gr = g[first]
        self.groups["win_start"][gr] = np.minimum(self.groups["win_start"][gr], s[first])
        self.groups["win_end"][gr] = np.maximum(self.groups["win_end"][gr], np.maximum.reduceat(e, first))
        self.groups["ops"][gr] += last - first + 1
        return self._collectives(g, s, e, ph, name_code, order, first, last, gr)

    def _collectives(self, g, s, e, ph, name_code, order, first, last, gr) -> tuple | None:
        """The collective ops among those of one :meth:`_op_pass` (a process' ops of the chunk, or all
        of them), with the phase of the op before each on its process (across chunks: the last op of
        every process is carried over). ``g, s, e, ph``: those ops in (group, start) order;
        ``name_code``: the chunk's, in the order read; ``order``: those ops' rows in it."""
        coll = self.names.collective[name_code[order]] if len(self.names.texts) else np.zeros(len(g), dtype=bool)
        if coll.any():
            sel = np.flatnonzero(coll)
            prev = np.maximum(sel - 1, 0)
            first_of_group = np.r_[True, g[1:] != g[:-1]][sel]
            prev_phase = np.where(first_of_group, self.groups["last_phase"][g[sel]], ph[prev].astype("int64"))
            prev_coll = np.where(first_of_group, self.groups["last_coll"][g[sel]] > 0, coll[prev])
            part = (g[sel].astype("int32"), name_code[order[sel]], s[sel], e[sel],
                    prev_phase.astype("int16"), prev_coll.astype(bool))
        else:
            part = None
        self.groups["last_phase"][gr] = ph[last]
        self.groups["last_coll"][gr] = coll[last]
        return part

    # ------------------------------------------------------------------------------------------
    def finish(self) -> ReportResult:
        """The report's result, once every chunk is in."""
        self._pool.shutdown(wait=True)
        if not self.n_ops:                # the read left every op out (read/validate.py)
            self.store.close()
            capture.require_gpu_activity(self.source, usable_ops=0)
        config, path, store = self.config, self.path, self.store
        launches = self.launches
        self.launches, self.keys = None, None
        chunked = not self.detail
        if chunked:
            launches = launches._replace(calls=None)
            memory.release()
            self.stage("combining chunks")
        ranges = store.take_frame("ranges")
        pairs = pd.concat(self.pairs, ignore_index=True).drop_duplicates() if self.pairs else \
            pd.DataFrame({"global_pid": pd.Series(dtype="int64"), "device_id": pd.Series(dtype="int64")})
        ranks = identify_ranks(pairs, self.marks, ranges, self.processes, path)
        rank_values = ranks["rank"].to_numpy(dtype="int64")
        rank_pids = ranks["global_pid"].to_numpy(dtype="int64")
        group_pids = np.array(list(self.groups.code), dtype="int64")
        # group code -> row of ranks (ranks sorted by rank)
        row_of_group = pd.Index(rank_pids).get_indexer(group_pids) if len(group_pids) else np.zeros(0, dtype="int64")
        figures = self._rank_figures(row_of_group, len(ranks))

        # nsys' projection and ours (graph launches too), from the per-call spans
        def project():
            return (projection.project_ranges(ranges, launches.index, *self.spans_nsys, launches.layout),
                    projection.project_ranges(ranges, launches.index, *self.spans_all, launches.layout))

        rank_of_pid = dict(zip(rank_pids.tolist(), rank_values.tolist()))
        is_cycle = np.asarray(launches.is_cycle, dtype=bool)
        outermost = launches.painted.outermost
        cycle_rows = ranges[is_cycle].copy()     # a few rows, apart from the frame the projection reads
        cycle_rows["rank"] = cycle_rows["global_pid"].map(rank_of_pid).fillna(-1).astype("int64")
        cycle_rows["is_cycle"] = True
        cycle_rows = cycle_rows.rename_axis("range_id").reset_index().assign(input=path)
        windows = cycles.cycle_windows(launches.cycle_owner, *self.spans_all)
        phase_names = list(config.names) + [OTHER]
        texts = self.names.table

        def second_pass():
            """The kernel statistics and the cycle table, from the kept op columns."""
            if chunked:
                self.stage("kernel statistics")
            kernels = attribution.kernel_table_of_chunks(self.store, row_of_group, rank_values, phase_names, texts)
            if chunked:
                memory.release()
            self.stage("decode cycles")
            return kernels, cycles.cycle_table_of_chunks(cycle_rows, windows, self.store, rank_values[row_of_group],
                                                         self.marks.assign(input=self.path), self.config,
                                                         self.capture_ids, self.host_calls, SPLIT_THREADS)

        if chunked:
            # one after the other (bounded memory): what served the projections is let go of first
            self.stage("projecting NVTX ranges")
            projected = project()
            launches = launches._replace(layout=None, index=None, painted=None, cycle_owner=None)
            self.spans_nsys = self.spans_all = None
            memory.release()
            ranges, nvtx_summary = _projected_ranges(ranges, *projected, rank_of_pid, outermost, is_cycle)
            del projected
            kernels, cycle_tab = second_pass()
        else:
            # the projections in a second thread while this one makes the second pass
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-project") as pool:
                projecting = pool.submit(project)
                kernels, cycle_tab = second_pass()
                projected = projecting.result()
            ranges, nvtx_summary = _projected_ranges(ranges, *projected, rank_of_pid, outermost, is_cycle)
            del projected
        del cycle_rows
        phases, totals = attribution.phase_tables(figures, ranges, outermost, ranks, config)
        totals["outside_cycles_busy_ns"] = totals["busy_ns"].to_numpy() - _period_busy(cycle_tab, rank_values)
        ranges = ranges.rename_axis("range_id").reset_index()

        # no per-op table: the kept op columns, spilled, are the report's op store (opstore.SpilledOps)
        spilled = None if self.keep_ops else opstore.spill(self._spill_parts(row_of_group, rank_values), phase_names,
                                                           texts, KINDS)
        if chunked:
            memory.release()
            self.stage("collectives and notes")
        parts, self.coll_parts = self.coll_parts, []
        coll_ops = coll_mod.collective_ops_of_parts(parts, rank_values[row_of_group], phase_names, texts)
        del parts
        store.close()            # the kept op columns: let go of before the per-op table is made
        if self.keep_ops and self.op_columns is not None:
            if self.n_ops >= memory.TRIM_AFTER_OPS:
                memory.release()     # the map step's freed temporaries, before the largest table grows
            gpu_ops = self._op_table(launches, rank_values, row_of_group, phase_names, texts)
        else:
            gpu_ops = empty_op_table()
        notes = checks.notes_from_counts(self.input_notes, self.counts)
        return ReportResult(path, self.meta, ranks, gpu_ops, ranges, self.marks, phases, kernels, totals,
                            nvtx_summary, notes, cycles=cycle_tab, collective_ops=coll_ops, ops=spilled,
                            nccl_messages=self.nccl_messages)

    def _rank_figures(self, row_of_group: np.ndarray, n_r: int) -> attribution.RankFigures:
        """Per rank (rows of the ranks table) from the per-process accumulators."""
        n_ph = len(self.config.names)
        groups = self.groups

        def by_rank(arr: np.ndarray) -> np.ndarray:
            out = np.zeros(arr.shape[:-1] + (n_r,), dtype="int64")
            out[..., row_of_group] = arr
            return out

        total, kns = by_rank(groups["total"]), by_rank(groups["kernel_ns"])
        win_start, win_end = np.full(n_r, -1, dtype="int64"), np.full(n_r, -1, dtype="int64")
        win_start[row_of_group], win_end[row_of_group] = groups["win_start"], groups["win_end"]
        attributed = total[2 + 2 * n_ph - 1] if n_ph else np.zeros(n_r, dtype="int64")
        exclusive, cumulative = [], np.zeros(n_r, dtype="int64")
        for i in range(n_ph):
            exclusive.append(total[2 + n_ph + i] - cumulative)
            cumulative = total[2 + n_ph + i]
        return attribution.RankFigures(total[0], [total[2 + i] for i in range(n_ph)], exclusive,
                                       [kns[i] for i in range(n_ph)], total[1], kns[n_ph], attributed,
                                       kns[n_ph + 1], win_start, win_end, by_rank(groups["ops"]))

    @staticmethod
    def _host_calls(launches: Launches, call_names: np.ndarray, strings: pd.Series) -> pd.DataFrame | None:
        """Per cycle range id (index), from the calls of its host period: ``host_wait_ns``, the synchronize calls'
        time outside the phases (cycles.host_wait_by_cycle), and ``launch_excess_ns``, the graph launches' time beyond
        the fastest launch (cycles.launch_excess_by_cycle); None without calls (the cycle table's columns are
        then NA)."""
        if not len(launches.calls) or launches.cycle_owner is None:
            return None
        order = launches.index.order
        calls = launches.calls
        cyc = launches.ranges.loc[np.asarray(launches.is_cycle, dtype=bool), ["global_tid", "start_ns"]]
        tid = calls["global_tid"].to_numpy(dtype="int64")[order]
        start = calls["start_ns"].to_numpy(dtype="int64")[order]
        end = calls["end_ns"].to_numpy(dtype="int64")[order]
        return pd.DataFrame({
            "host_wait_ns": cycles.host_wait_by_cycle(call_names, tid, start, end, launches.painted.owner[:-1], cyc,
                                                      strings),
            "launch_excess_ns": cycles.launch_excess_by_cycle(call_names, tid, start, end, cyc, strings)})

    def _spill_parts(self, row_of_group: np.ndarray, rank_values: np.ndarray):
        """(rank, columns) of every run of one process of every chunk of the kept ops, in start order,
        the chunks in time order: what :func:`opstore.spill` writes (a report analysed in chunks)."""
        store = self.store
        for k in range(len(store)):
            by_rank = store.runs_by_rank(k, rank_values[row_of_group])
            for rank in sorted(by_rank):
                runs = by_rank[rank]
                col = {c: np.concatenate([store.get_run(k, c, a, b) for a, b in runs])
                       for c in ("s", "e", "ph", "nc", "k", "cr", "gn")}
                if len(runs) > 1:                # a rank of several processes: their ops merged by start
                    order = np.argsort(col["s"], kind="stable")
                    col = {c: v[order] for c, v in col.items()}
                yield rank, {"start_ns": col["s"], "end_ns": col["e"], "phase_code": col["ph"], "name_code": col["nc"],
                             "kind_code": col["k"], "cycle_range": col["cr"], "graph_node": col["gn"]}

    def _op_table(self, launches: Launches, rank_values: np.ndarray, row_of_group: np.ndarray,
                  phase_names: list[str], texts: np.ndarray) -> pd.DataFrame:
        """The per-op table of a report analysed in one chunk, in the order the ops were read. Column
        by column, each kept op array let go of once its column is made (the peak of a large report)."""
        cols, self.op_columns = self.op_columns, None
        op = cols.pop("chunk")._asdict()                # the last reference to the chunk's arrays
        op.pop("excluded")
        n = len(op["start_ns"])
        table = {"kind": pd.Categorical.from_codes(op.pop("kind"), categories=list(KINDS))}
        for c in ("device_id", "stream_id", "name_id"):
            op[c] = narrow_ids(op[c])
        op["range_id"] = narrow_ids(cols.pop("range_id"))
        op_call = cols.pop("op_call")
        op["call_pos"] = self.call_rows[op_call]
        op["cycle_range"] = narrow_ids(cycle_of_ops(launches, op_call))
        del op_call
        group = cols.pop("group")
        op["rank"] = narrow_ids(rank_values)[row_of_group][group] if len(group) else np.zeros(0, dtype=ID_DTYPE)
        del group
        op["duration_ns"] = op["end_ns"] - op["start_ns"]
        name_code = cols.pop("name_code")
        op["name"] = pd.Series(texts[name_code] if len(texts) else np.zeros(0, dtype=object), dtype=object, copy=False)
        op["collective"] = self.names.collective[name_code] if len(texts) else np.zeros(n, dtype=bool)
        del name_code
        op["phase"] = pd.Series(np.array(phase_names, dtype=object)[cols.pop("phase")], dtype=object, copy=False)
        op["input"] = pd.Categorical.from_codes(np.zeros(n, dtype="int8"), [self.path])
        table.update(op)
        return pd.DataFrame(table, copy=False)[OP_TABLE_COLUMNS]


def _projected_ranges(ranges: pd.DataFrame, nsys_proj: pd.DataFrame, all_proj: pd.DataFrame, rank_of_pid: dict,
                      outermost: np.ndarray, is_cycle: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the ranges with their projected GPU spans, rank, outermost and is_cycle flags; nsys' NVTX
    projection summary)."""
    ranges = ranges.assign(gpu_ops=nsys_proj["gpu_ops"], gpu_start_ns=nsys_proj["gpu_start_ns"],
                           gpu_end_ns=nsys_proj["gpu_end_ns"], gpu_ops_all=all_proj["gpu_ops"],
                           gpu_start_all=all_proj["gpu_start_ns"], gpu_end_all=all_proj["gpu_end_ns"])
    del all_proj
    summary = projection.nvtx_projection_summary(ranges, nsys_proj)
    ranges["rank"] = ranges["global_pid"].map(rank_of_pid).fillna(-1).astype("int64")
    ranges["outermost"] = outermost
    ranges["is_cycle"] = is_cycle
    return ranges, summary


def _period_busy(cycle_tab: pd.DataFrame, rank_values: np.ndarray) -> np.ndarray:
    """Per rank (rows of the ranks table), the GPU busy time inside its cycles' GPU periods."""
    sel = cycles.with_gpu(cycle_tab)
    if sel is None or sel.empty:
        return np.zeros(len(rank_values), dtype="int64")
    busy = (sel["gpu_period_ns"] - sel["period_idle_ns"]).groupby(sel["rank"]).sum()
    return busy.reindex(rank_values).fillna(0).to_numpy(dtype="int64")


def empty_op_table() -> pd.DataFrame:
    """The per-op table of a report analysed in chunks (not kept): its columns, no rows."""
    frame = pd.DataFrame({c: pd.Series(dtype=ID_DTYPE if c in OP_ID_COLUMNS else "int64") for c in OP_TABLE_COLUMNS})
    frame["kind"] = pd.Categorical([], categories=list(KINDS))
    for c in ("name", "phase"):
        frame[c] = pd.Series(dtype=object)
    frame["collective"] = pd.Series(dtype=bool)
    frame["input"] = pd.Categorical([])
    return frame


def chunked_note(chunks: int) -> Note:
    """What a report analysed in ``chunks`` chunks says about it."""
    return Note(N.CHUNKED, f"--memory-budget: analysed in {chunks} time-ordered "
                f"chunk{'s' if chunks != 1 else ''}; the per-op table (gpu_ops) is not kept", chunks)
