"""The map step over time-ordered chunks of GPU ops: one report in bounded memory.

Used under ``--memory-budget`` (api.analyze_report). The calls and NVTX ranges are prepared once
(launches.py); the GPU ops are then read in chunks that cut the time axis: chunk k holds, from
every op table, the ops that start in [T_k, T_k+1). nsys writes every activity table in start
order (checked on every real export we have), so a chunk of a table is a rowid range, found by
binary search on rowid; each chunk is checked to lie in its time slice, and a report whose tables
are not in time order is analyzed in one piece instead (with a note).

Per chunk, the figures that add up are added up (kernel sums, op counts, per-call first start and
last end for the projections, collective ops, odd-case counts); unions (busy, per phase, the
cumulative unions behind exclusive time) are streamed with :func:`intervals.union_step`, exact
because chunks come in time order. What needs every op of a rank at once is spilled to a
temporary directory, a few bytes per op (rank, start, end, phase, name), and read back chunk by
chunk: the per-cycle split (the cycles' GPU windows are known only after all ops) and the
per-kernel median and p99. The per-op table (``gpu_ops``) is not kept: the result is the same in
every other table (tests/test_scale.py, tests/test_properties.py).
"""
from __future__ import annotations

import pickle
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import memory
from analyze import notes as N
from analyze.attribute import attribution
from analyze.attribute.intervals import INT64_MIN, union_step
from analyze.attribute.phases import OTHER, PhaseConfig, kernel_phase
from analyze.notes import Note
from analyze.project import projection
from analyze.ranks.identify import identify_ranks
from analyze.read import capture, report
from analyze.read.connection import open_report
from analyze.results import ReportResult
from analyze.run import checks
from analyze.run.launches import Launches
from analyze.timeline import collectives as coll_mod
from analyze.timeline import cycles

INT64_MAX = np.iinfo(np.int64).max
KINDS = attribution.KIND_NAMES


class NotTimeOrdered(Exception):
    """An op table's rows are not in start order: chunks by rowid would not cut time."""


# ------------------------------------------------------------------------------------------
# planning: time slices over every op table

def _start_at(conn, table: str, rowid: int) -> tuple[int, int] | None:
    row = conn.execute(f"SELECT rowid, start FROM {table} WHERE rowid >= ? AND start IS NOT NULL "
                       "ORDER BY rowid LIMIT 1", (rowid,)).fetchone()
    return (int(row[0]), int(row[1])) if row else None


def _first_rowid_at(conn, table: str, t: int, lo: int, hi: int) -> int:
    """Smallest rowid in [lo, hi] whose start is >= t (hi when none), rows in start order."""
    while lo < hi:
        mid = (lo + hi) // 2
        found = _start_at(conn, table, mid)
        if found is None or found[0] >= hi:
            hi = mid
        elif found[1] >= t:
            hi = mid
        else:
            lo = found[0] + 1
    return lo


def plan_chunks(conn, chunk_rows: int) -> tuple[list[list[report.OpRead]], list[int]]:
    """(reads per chunk, chunk start times): the biggest op table cut every ``chunk_rows`` rows,
    the others cut at the same times."""
    whole = report.plan_gpu_op_reads(conn)
    tables = []
    for part in whole:
        lo, hi = report.rowid_bounds(conn, part.table)
        if lo is not None:
            tables.append((part, int(lo), int(hi) + 1))
    if not tables:
        return [], []
    driver = max(tables, key=lambda t: t[2] - t[1])
    _, d_lo, d_hi = driver
    times = [INT64_MIN]
    for a in range(d_lo + chunk_rows, d_hi, chunk_rows):
        found = _start_at(conn, driver[0].table, a)
        if found is not None and found[1] > times[-1]:
            times.append(found[1])
    chunks: list[list[report.OpRead]] = [[] for _ in times]
    for part, lo, hi in tables:
        cuts = [lo] + [_first_rowid_at(conn, part.table, t, lo, hi) for t in times[1:]] + [hi]
        for k in range(len(times)):
            a, b = cuts[k], max(cuts[k], cuts[k + 1])
            if b > a:
                chunks[k].append(report.OpRead(part.kind, part.table, part.sql, a, b, b - a))
    return chunks, times


# ------------------------------------------------------------------------------------------
# names: one code per distinct display name, across chunks

class _Names:
    """Op display names (attribution.op_name_codes' rules), coded as chunks reveal them."""

    def __init__(self, strings: pd.Series, config: PhaseConfig, coll_rx):
        self.strings, self.config, self.coll_rx = strings, config, coll_rx
        self.pair_code: dict[int, int] = {}
        self.text_code: dict[str, int] = {}
        self.texts: list[str] = []
        self.phase: list[int] = []
        self.collective: list[bool] = []
        self._code_of = {n: i for i, n in enumerate(config.names)}

    def _text(self, kind: int, name_id: int) -> str:
        if KINDS[kind] == "kernel":
            text = self.strings.get(name_id) if name_id in self.strings.index else None
            return text if isinstance(text, str) else f"<kernel {name_id}>"
        if KINDS[kind] in attribution.OP_KIND_LABEL:
            return attribution.OP_KIND_LABEL[KINDS[kind]]
        return f"[CUDA graph {name_id}]"

    def codes(self, kind: np.ndarray, name_id: np.ndarray) -> np.ndarray:
        pair = kind.astype("int64") * (1 << 40) + (name_id & ((1 << 40) - 1))
        codes, uniq = pd.factorize(pair)
        lookup = np.empty(len(uniq), dtype="int32")
        for i, u in enumerate(np.asarray(uniq).tolist()):
            code = self.pair_code.get(u)
            if code is None:
                # the name id as the reader gave it (low 40 bits, sign restored)
                nid = u & ((1 << 40) - 1)
                nid = nid - (1 << 40) if nid >= (1 << 39) else nid
                text = self._text(u >> 40, nid)
                code = self.text_code.get(text)
                if code is None:
                    code = len(self.texts)
                    self.text_code[text] = code
                    self.texts.append(text)
                    found = kernel_phase([text], self.config)[0]
                    self.phase.append(self._code_of[found] if found is not None else -1)
                    self.collective.append(bool(self.coll_rx.fullmatch(text)) if self.coll_rx else False)
                self.pair_code[u] = code
            lookup[i] = code
        return lookup[codes]


# ------------------------------------------------------------------------------------------
# per-group state that grows as processes appear

class _Groups:
    """Dense codes for processes (global_pid) in order of appearance, and per-process arrays."""

    def __init__(self):
        self.code: dict[int, int] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.fill: dict[str, int] = {}

    def add(self, name: str, shape_head: tuple, fill) -> None:
        self.arrays[name] = np.full(shape_head + (0,), fill, dtype="int64")
        self.fill[name] = fill

    def codes(self, pid: np.ndarray) -> np.ndarray:
        codes, uniq = pd.factorize(pid)
        lookup = np.array([self.code.setdefault(int(u), len(self.code)) for u in np.asarray(uniq)],
                          dtype="int64")
        n = len(self.code)
        for name, arr in self.arrays.items():
            if arr.shape[-1] < n:
                grown = np.full(arr.shape[:-1] + (n,), self.fill[name], dtype="int64")
                grown[..., :arr.shape[-1]] = arr
                self.arrays[name] = grown
        return lookup[codes] if len(lookup) else np.zeros(0, dtype="int64")

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]


def _masked_sums(group: np.ndarray, values: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype="int64")
    g, v = group[mask], values[mask]
    if len(g):
        runs = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
        np.add.at(out, g[runs], np.add.reduceat(v, runs))
    return out


# ------------------------------------------------------------------------------------------

def analyze_chunked(path: str, config: PhaseConfig, box: list, chunk_rows: int, stage) -> ReportResult:
    """The map step of api.analyze_report, chunk by chunk (see the module doc). ``box``: a list
    holding the report's tables (read without ops, ``prepared`` = launches.Launches), emptied here
    so the call-side arrays can be freed once used. Raises NotTimeOrdered when an op table is not
    in start order."""
    conn = open_report(path, quick_check=False)
    spill = Path(tempfile.mkdtemp(prefix="specprof-chunks-"))
    try:
        chunks, times = plan_chunks(conn, chunk_rows)
        return _analyze(path, config, box, conn, chunks, times, spill, stage)
    finally:
        shutil.rmtree(spill, ignore_errors=True)
        from analyze.read import fastread
        fastread.close(conn)
        conn.close()


def _read_chunk(conn_path: str, immutable: bool, reads: list[report.OpRead]):
    own = open_report(conn_path, immutable=immutable, quick_check=False)
    try:
        return [(r, report.read_op_part(own, r)) for r in reads]
    finally:
        from analyze.read import fastread
        fastread.close(own)
        own.close()


def _analyze(path, config, box: list, conn, chunks, times, spill: Path, stage) -> ReportResult:
    tables = box.pop()
    label = tables.path           # the report as results name it (read.inputs.display_path)
    launches: Launches = tables.prepared
    tables = tables._replace(prepared=None, ranges=None)
    n_calls = len(launches.index.key)
    n_ph = len(config.names)
    painted = launches.painted
    # what the calls and ranges alone say, before they are let go of
    input_notes = checks.input_notes(tables, launches.ranges)
    keys = projection.call_keys(launches.calls, launches.index)
    if keys is not None:      # ops are linked through the keys: the calls and their sort keys can go
        launches = launches._replace(calls=None, index=launches.index._replace(order=None, key=None))
        tables = tables._replace(calls=None)
    # the ranges are not looked at again until every chunk is in: on disk meanwhile
    _spill_frame(launches.ranges, spill / "ranges.pkl")
    launches = launches._replace(ranges=None, full_name=None)
    coll_phase = next((p for p in config.phases if p.name == "allreduce" and p.kernels), None)
    names = _Names(tables.strings, config, coll_phase.kernel_regex() if coll_phase else None)
    groups = _Groups()
    n_unions = 2 + 2 * n_ph          # busy, other, per phase: inclusive, cumulative
    groups.add("reach", (n_unions,), INT64_MIN)
    groups.add("total", (n_unions,), 0)
    groups.add("kernel_ns", (n_ph + 2,), 0)     # per phase inclusive, other, all kernels
    groups.add("win_start", (), INT64_MAX)
    groups.add("win_end", (), INT64_MIN)
    groups.add("ops", (), 0)
    groups.add("last_phase", (), -1)            # phase code of the last op (for collectives)
    groups.add("last_coll", (), 0)
    spans = {k: (np.zeros(n_calls, dtype="int8"), np.full(n_calls, INT64_MAX, dtype="int64"),
                 np.full(n_calls, INT64_MIN, dtype="int64")) for k in ("nsys", "all")}
    pairs: set[tuple[int, int]] = set()
    counts = {"unlinked": 0, "zero": 0, "negative_pid": 0, "graph": 0, "excluded": []}
    coll_parts: list[pd.DataFrame] = []
    n_spilled = 0

    memory.release()                 # the NVTX read's buffers
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="specprof-chunk") as pool:
        pending = pool.submit(_read_chunk, path, conn.immutable, chunks[0]) if chunks else None
        for k in range(len(chunks)):
            parts = pending.result()
            # read the next chunk while this one is analysed
            pending = pool.submit(_read_chunk, path, conn.immutable, chunks[k + 1]) if k + 1 < len(chunks) else None
            stage(f"chunk {k + 1}/{len(chunks)}")
            counts["excluded"] += [x for _, f in parts for x in report.take_excluded(f)]
            frames = [f for _, f in parts if len(f)]
            if not frames:
                continue
            kind = np.concatenate([np.full(len(f), KINDS.index(r.kind), dtype="int8") for r, f in parts if len(f)])
            col = {c: np.concatenate([f[c].to_numpy(dtype="int64") for f in frames])
                   for c in ("global_pid", "device_id", "correlation_id", "name_id", "start_ns", "end_ns")}
            del frames, parts
            start, end = col["start_ns"], col["end_ns"]
            lo_t = times[k]
            hi_t = times[k + 1] if k + 1 < len(times) else INT64_MAX
            if len(start) and (start.min() < lo_t or start.max() >= hi_t):
                raise NotTimeOrdered(f"{path}: GPU op rows are not in start order")
            pid = col["global_pid"]
            pair_key = pd.unique(pd.MultiIndex.from_arrays([pid, col["device_id"]]))
            pairs.update((int(p), int(d)) for p, d in pair_key)
            name_code = names.codes(kind, col["name_id"])
            op_call = projection.link_with_keys(pid, col["correlation_id"], keys) if keys is not None else \
                projection.link_op_arrays(pid, col["correlation_id"], launches.calls, launches.index)
            counts["unlinked"] += int((op_call < 0).sum())
            counts["zero"] += int((end == start).sum())
            counts["negative_pid"] += int((pid < 0).sum())
            counts["graph"] += int((kind == KINDS.index("graph")).sum())
            projection.update_call_spans(op_call, start, end, (kind >= 0) & (kind <= 2), *spans["nsys"])
            projection.update_call_spans(op_call, start, end, kind >= 0, *spans["all"])
            name_phase = np.array(names.phase, dtype="int16")
            phase, _, inclusive = attribution.op_phase_codes(painted, op_call, name_code, name_phase, config)
            del op_call
            g = groups.codes(pid)
            n_g = len(groups.code)
            order = attribution.sort_order(g, start)
            g, s, e = g[order], start[order], end[order]
            ph, nc = phase[order], name_code[order]
            is_kernel = kind[order] == 0
            incl = {k2: v[order] for k2, v in inclusive.items()} if isinstance(inclusive, dict) else inclusive[order]
            del start, end, phase, name_code, inclusive, col
            dur = e - s
            reach, total, kns = groups["reach"], groups["total"], groups["kernel_ns"]

            def stream(u: int, grp, lo_ns, hi_ns, mask=None):
                if mask is None:
                    union_step(grp, lo_ns, hi_ns, reach[u], total[u])
                else:
                    union_step(grp[mask], lo_ns[mask], hi_ns[mask], reach[u], total[u])

            stream(0, g, s, e)
            covered = np.zeros(len(g), dtype=bool)
            for i, pname in enumerate(config.names):
                member = attribution.inclusive_mask(incl, i, pname)
                stream(2 + i, g, s, e, member)
                covered |= ph == i
                stream(2 + n_ph + i, g, s, e, covered)
                kns[i] += _masked_sums(g, dur, member & is_kernel, n_g)
            stream(1, g, s, e, ~covered)
            kns[n_ph] += _masked_sums(g, dur, ~covered & is_kernel, n_g)
            kns[n_ph + 1] += _masked_sums(g, dur, is_kernel, n_g)
            runs = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
            gr = g[runs]
            groups["win_start"][gr] = np.minimum(groups["win_start"][gr], s[runs])
            groups["win_end"][gr] = np.maximum(groups["win_end"][gr], np.maximum.reduceat(e, runs))
            groups["ops"][gr] += np.diff(np.r_[runs, len(g)])
            # collectives, with the phase of the op before each on its process (across chunks)
            coll = np.array(names.collective, dtype=bool)[nc]
            if coll.any():
                sel = np.flatnonzero(coll)
                prev = sel - 1
                first_of_group = np.r_[True, g[1:] != g[:-1]][sel]
                prev_phase = ph[np.maximum(prev, 0)].astype("int64")
                prev_coll = coll[np.maximum(prev, 0)]
                carried = groups["last_phase"][g[sel]]
                prev_phase = np.where(first_of_group, carried, prev_phase)
                prev_coll = np.where(first_of_group, groups["last_coll"][g[sel]] > 0, prev_coll)
                coll_parts.append((g[sel].astype("int32"), nc[sel], s[sel], e[sel],
                                   prev_phase.astype("int16"), prev_coll.astype(bool)))
            last = np.r_[runs[1:], len(g)] - 1
            groups["last_phase"][gr] = ph[last]
            groups["last_coll"][gr] = coll[last]
            # spilled for the second pass (cycles) and the kernel statistics
            for c, v in (("g", g.astype("int32")), ("s", s), ("e", e), ("ph", ph), ("nc", nc)):
                np.save(spill / f"{k}.{c}.npy", v)
            n_spilled += 1
            del g, s, e, ph, nc, incl, covered, dur, is_kernel

    if not n_spilled:                 # the read left every op out (read/validate.py)
        capture.require_gpu_activity(path, usable_ops=0)
    keys = None
    launches = launches._replace(calls=None)
    memory.release()
    stage("combining chunks")
    ranges = _load_frame(spill / "ranges.pkl")
    pairs_df = pd.DataFrame(sorted(pairs), columns=["global_pid", "device_id"], dtype="int64")
    ranks = identify_ranks(pairs_df, tables.marks, ranges, tables.processes, label)
    rank_values = ranks["rank"].to_numpy(dtype="int64")
    rank_pids = ranks["global_pid"].to_numpy(dtype="int64")
    group_pids = np.array(list(groups.code), dtype="int64")
    # group code -> row of ranks (ranks sorted by rank)
    row_of_group = pd.Index(rank_pids).get_indexer(group_pids) if len(group_pids) else np.zeros(0, dtype="int64")
    n_r = len(ranks)

    def by_rank(arr: np.ndarray) -> np.ndarray:
        out = np.zeros(arr.shape[:-1] + (n_r,), dtype="int64")
        out[..., row_of_group] = arr
        return out

    total = by_rank(groups["total"])
    kns = by_rank(groups["kernel_ns"])
    win_start = np.full(n_r, -1, dtype="int64")
    win_end = np.full(n_r, -1, dtype="int64")
    win_start[row_of_group] = groups["win_start"]
    win_end[row_of_group] = groups["win_end"]
    attributed = total[2 + 2 * n_ph - 1] if n_ph else np.zeros(n_r, dtype="int64")
    exclusive, cumulative = [], np.zeros(n_r, dtype="int64")
    for i in range(n_ph):
        exclusive.append(total[2 + n_ph + i] - cumulative)
        cumulative = total[2 + n_ph + i]
    figures = attribution.RankFigures(total[0], [total[2 + i] for i in range(n_ph)], exclusive,
                                      [kns[i] for i in range(n_ph)], total[1], kns[n_ph], attributed,
                                      kns[n_ph + 1], win_start, win_end, by_rank(groups["ops"]))

    # projections from the accumulated per-call spans
    stage("projecting NVTX ranges")
    nsys_proj = projection.project_ranges(ranges, launches.index, *spans["nsys"], launches.layout)
    all_proj = projection.project_ranges(ranges, launches.index, *spans["all"], launches.layout)
    ranges = ranges.assign(gpu_ops=nsys_proj["gpu_ops"], gpu_start_ns=nsys_proj["gpu_start_ns"],
                           gpu_end_ns=nsys_proj["gpu_end_ns"], gpu_ops_all=all_proj["gpu_ops"],
                           gpu_start_all=all_proj["gpu_start_ns"], gpu_end_all=all_proj["gpu_end_ns"])
    del all_proj
    nvtx_summary = projection.nvtx_projection_summary(ranges, nsys_proj)
    rank_of_pid = dict(zip(rank_pids.tolist(), rank_values.tolist()))
    ranges["rank"] = ranges["global_pid"].map(rank_of_pid).fillna(-1).astype("int64")
    ranges["outermost"] = painted.outermost
    phases, totals = attribution.phase_tables(figures, ranges, painted.outermost, ranks, config)
    windows = cycles.cycle_windows(launches.cycle_owner, *spans["all"])
    del spans
    # the range layout and the call index served the projections: gone before the second pass
    launches = launches._replace(layout=None, index=None, painted=None, cycle_owner=None)
    painted = None
    memory.release()
    ranges["is_cycle"] = launches.is_cycle
    ranges = ranges.rename_axis("range_id").reset_index()

    stage("kernel statistics")
    phase_names = list(config.names) + [OTHER]
    texts = np.array(names.texts, dtype=object)
    kernels = _kernel_table(spill, n_spilled, row_of_group, rank_values, phase_names, texts)

    memory.release()
    stage("decode cycles")
    cycle_rows = ranges[ranges["is_cycle"].to_numpy(dtype=bool)].assign(input=label)
    cycle_tab = _cycle_table(spill, n_spilled, row_of_group, rank_values, cycle_rows,
                             windows, tables.marks.assign(input=label), config)

    window_ops = _window_ops(spill, n_spilled, row_of_group, rank_values, cycle_tab, phase_names, texts)

    memory.release()
    stage("collectives and notes")
    coll_ops = None
    if coll_parts:    # plain arrays until the one frame (a few % of the ops, but millions at scale)
        grp, name_c, c_start, c_end, c_prev, c_prev_coll = (np.concatenate(col) for col in zip(*coll_parts))
        del coll_parts
        rank_of = rank_values[row_of_group[grp]]
        order = np.lexsort((c_start, rank_of))
        prev_code = c_prev[order]
        lookup = np.array(phase_names + ["other"], dtype=object)
        prev = lookup[np.where(prev_code < 0, len(phase_names), prev_code)]
        prev[c_prev_coll[order]] = "allreduce"
        prev[prev_code < 0] = "other"
        coll_ops = pd.DataFrame({"rank": rank_of[order], "name": pd.Series(texts[name_c[order]], dtype=object),
                                 "start_ns": c_start[order], "end_ns": c_end[order],
                                 "prev_phase": pd.Series(prev, dtype=object)})[coll_mod.COLLECTIVE_OP_COLUMNS]
        del grp, name_c, c_start, c_end, c_prev, c_prev_coll, order

    gpu_ops = _empty_ops()
    notes = checks.notes_from_counts(input_notes, counts)
    notes.append(Note(N.CHUNKED, f"--memory-budget: analysed in {len(chunks)} time-ordered "
                      f"chunk{'s' if len(chunks) != 1 else ''}; the per-op table (gpu_ops) is not kept", len(chunks)))
    return ReportResult(label, tables.meta, ranks, gpu_ops, ranges, tables.marks, phases, kernels, totals,
                       nvtx_summary, notes, cycles=cycle_tab, collective_ops=coll_ops, window_ops=window_ops)


def _spill_frame(frame: pd.DataFrame, path: Path) -> None:
    """Pickled: the object columns hold a few distinct strings, each written once (pickle's memo)."""
    with open(path, "wb") as f:
        pickle.dump(frame, f, protocol=pickle.HIGHEST_PROTOCOL)


def _load_frame(path: Path) -> pd.DataFrame:
    with open(path, "rb") as f:
        return pickle.load(f)      # our own file, written by _spill_frame in this run


def _load(spill: Path, k: int, c: str) -> np.ndarray:
    return np.load(spill / f"{k}.{c}.npy")


def _kernel_table(spill: Path, n: int, row_of_group: np.ndarray, rank_values: np.ndarray,
                  phase_names: list[str], texts: np.ndarray) -> pd.DataFrame:
    """attribution.kernel_table_codes over the spilled (rank, phase, name, duration) of all ops:
    one int64 per op, key and duration packed, sorted in place (attribution.kernel_table_sorted)."""
    sizes = [len(_load(spill, k, "ph")) for k in range(n)]
    if not sum(sizes):
        return attribution.kernel_table_codes(np.zeros(0, dtype="int32"), rank_values, np.zeros(0, dtype="int8"),
                                              phase_names, np.zeros(0, dtype="int32"), texts,
                                              np.zeros(0, dtype="int64"))
    n_phase, n_name = len(phase_names), max(len(texts), 1)
    dmin, dmax = INT64_MAX, INT64_MIN
    for k in range(n):
        if sizes[k]:
            d = _load(spill, k, "e") - _load(spill, k, "s")
            dmin, dmax = min(dmin, int(d.min())), max(dmax, int(d.max()))
    dspan = dmax - dmin + 1
    if dspan * len(rank_values) * n_phase * n_name >= 2 ** 62:     # does not pack: the general path
        cols = {c: np.concatenate([_load(spill, k, c) for k in range(n)]) for c in ("g", "ph", "nc", "s", "e")}
        return attribution.kernel_table_codes(row_of_group[cols["g"]], rank_values, cols["ph"], phase_names,
                                              cols["nc"], texts, cols["e"] - cols["s"])
    combined = np.empty(sum(sizes), dtype="int64")
    at = 0
    for k in range(n):
        if not sizes[k]:
            continue
        key = (row_of_group[_load(spill, k, "g")].astype("int64") * n_phase + _load(spill, k, "ph")) * n_name \
            + _load(spill, k, "nc")
        combined[at:at + sizes[k]] = key * dspan + (_load(spill, k, "e") - _load(spill, k, "s") - dmin)
        at += sizes[k]
    combined.sort()
    return attribution.kernel_table_sorted(combined, dmin, dspan, rank_values, phase_names, texts)


def _cycle_table(spill: Path, n: int, row_of_group: np.ndarray, rank_values: np.ndarray, ranges: pd.DataFrame,
                 windows, marks: pd.DataFrame, config: PhaseConfig) -> pd.DataFrame:
    """cycles.cycle_table_arrays, second pass: the spilled ops streamed into per-window unions."""
    found = cycles.cycle_windows_table(ranges, np.zeros(len(ranges), dtype="int64"), windows)
    if found is None or found[0].empty:
        return cycles._empty(config)
    cyc, lo, hi = found
    n_win = len(cyc)
    win_rank = cyc["rank"].to_numpy(dtype="int64")
    n_ph = len(config.names)
    reach = np.full((n_ph + 1, n_win), INT64_MIN, dtype="int64")
    total = np.zeros((n_ph + 1, n_win), dtype="int64")
    for k in range(n):
        g = _load(spill, k, "g")
        r = rank_values[row_of_group[g]]
        s, e, ph = _load(spill, k, "s"), _load(spill, k, "e"), _load(spill, k, "ph")
        del g
        if not len(s):
            continue
        # only the windows this chunk's time span can touch
        near = np.flatnonzero((hi > s.min()) & (lo < e.max()))
        if not len(near):
            continue
        for _, w_near, pos in cycles._window_pairs_by_rank(r, s, e, win_rank[near], lo[near], hi[near],
                                                           np.arange(len(s)), (r, s, e)):
            win = near[w_near]
            start = np.clip(s[pos], lo[win], hi[win])
            end = np.clip(e[pos], lo[win], hi[win])
            phase = ph[pos]
            if len(win) > 1 and not cycles._sorted_pairs(win, start):
                srt = np.lexsort((start, win))
                win, start, end, phase = win[srt], start[srt], end[srt], phase[srt]
            union_step(win, start, end, reach[0], total[0])
            covered = np.zeros(len(win), dtype=bool)
            for i in range(n_ph):
                covered |= phase == i
                union_step(win[covered], start[covered], end[covered], reach[1 + i], total[1 + i])
    return cycles.cycle_frame(cyc, lo, hi, total[0], total[1:], marks, config)


def _window_ops(spill: Path, n: int, row_of_group: np.ndarray, rank_values: np.ndarray, cycle_tab: pd.DataFrame,
                phase_names: list[str], texts: np.ndarray) -> pd.DataFrame | None:
    """The spilled ops overlapping the window plots.cycle_timeline draws by default (the
    :func:`cycles.default_window_cycles` of every rank): rank, start_ns, end_ns, phase, name, in
    (rank, start) order; None without cycles (the default window is then the whole trace)."""
    chosen = cycles.default_window_cycles(cycle_tab)
    if not chosen:
        return None
    sel = cycle_tab[cycle_tab["cycle"].isin(chosen)]
    w0, w1 = int(sel["start_ns"].min()), int(sel["end_ns"].max())
    parts = []
    for k in range(n):
        s, e = _load(spill, k, "s"), _load(spill, k, "e")
        hit = np.flatnonzero((e > w0) & (s < w1))
        if len(hit):
            parts.append((rank_values[row_of_group[_load(spill, k, "g")[hit]]], s[hit], e[hit],
                          _load(spill, k, "ph")[hit], _load(spill, k, "nc")[hit]))
    rank, start, end, phase, name = (np.concatenate(c) for c in zip(*parts)) if parts else \
        (np.zeros(0, dtype="int64"),) * 3 + (np.zeros(0, dtype="int8"), np.zeros(0, dtype="int32"))
    order = np.lexsort((start, rank))
    return pd.DataFrame({"rank": rank[order].astype("int64"), "start_ns": start[order], "end_ns": end[order],
                         "phase": pd.Series(np.array(phase_names, dtype=object)[phase[order]], dtype=object),
                         "name": pd.Series(texts[name[order]] if len(texts) else np.zeros(0, dtype=object),
                                           dtype=object)})


def _empty_ops() -> pd.DataFrame:
    cols = ["kind", "global_pid", "device_id", "stream_id", "correlation_id", "graph_node_id", "name_id",
            "start_ns", "end_ns", "name", "phase", "range_id", "rank", "duration_ns", "call_pos", "input",
            "collective", "cycle_range"]
    frame = pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    frame["kind"] = pd.Categorical([], categories=list(KINDS))
    for c in ("name", "phase"):
        frame[c] = pd.Series(dtype=object)
    frame["collective"] = pd.Series(dtype=bool)
    frame["input"] = pd.Categorical([])
    return frame
