"""Attributing every GPU op of a rank to phases, and the per-rank, per-phase, per-kernel figures.

* inclusive membership: an op is in phase P when its launching call lies inside any range of P, or
  its name matches P's kernel patterns (``busy_ns``, ``kernel_ns``);
* exclusive phase: kernel patterns first (phase order), then the innermost enclosing range that
  belongs to a phase, else ``other``;
* exclusive time: the rank's busy timeline split so every covered nanosecond has one owner; where
  phases overlap the earlier-listed phase wins. Computed as differences of cumulative unions, so
  ``sum(exclusive over phases) + unattributed == busy`` holds by construction and exactly.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from analyze.attribute import intervals
from analyze.attribute.phases import OTHER, PhaseConfig, kernel_phase, range_phase
from analyze.codes import factorize_objects, stable_order
from analyze.project import projection as proj
from analyze.project.projection import text_codes

OP_KIND_LABEL = {"memcpy": "[CUDA memcpy]", "memset": "[CUDA memset]"}



def label_ranges(ranges: pd.DataFrame, config: PhaseConfig) -> pd.DataFrame:
    """The ranges with ``phase`` (the phase their name and domain give, or None) and ``full_name``
    (nsys' ``domain:name``), both worked out once per distinct (name, domain) pair."""
    ranges = ranges.copy(deep=False)   # copy-on-write: the columns are shared, not copied
    ncode, nuniq = text_codes(ranges["name"])
    dcode, duniq = text_codes(ranges["domain"])
    codes, uniq = pd.factorize(ncode.astype("int64") * (len(duniq) + 1) + dcode)
    uniq = np.asarray(uniq, dtype="int64")
    names, domains = list(nuniq[uniq // (len(duniq) + 1)]), list(duniq[uniq % (len(duniq) + 1)])
    found = np.array(range_phase(names, domains, config) + [None], dtype=object)
    full = np.array([f"{d}:{n}" for n, d in zip(names, domains)] + [""], dtype=object)
    ranges["phase"] = pd.Series(found[codes] if len(codes) else found[:0], index=ranges.index, dtype=object)
    ranges["full_name"] = pd.Series(full[codes] if len(codes) else full[:0], index=ranges.index, dtype=object)
    return ranges



# ---------------------------------------------------------------------------------------------
# Array versions (the map step's fast path): ops as NumPy arrays of integer codes, no per-op
# Python objects. Names are codes into a per-report name table, phases codes into
# ``config.names + [other]``, ranks codes into the report's sorted rank list.

KIND_NAMES = ("kernel", "memcpy", "memset", "graph")


def kind_codes(kind) -> np.ndarray:
    """int8 code per op into :data:`KIND_NAMES` (-1 for anything else)."""
    if isinstance(getattr(kind, "dtype", None), pd.CategoricalDtype):
        cats = list(kind.cat.categories) if hasattr(kind, "cat") else list(kind.categories)
        codes = kind.cat.codes.to_numpy() if hasattr(kind, "cat") else kind.codes
        lookup = np.array([KIND_NAMES.index(k) if k in KIND_NAMES else -1 for k in cats] + [-1], dtype="int8")
        return lookup[codes]
    codes, uniq = pd.factorize(pd.Series(kind, copy=False))
    lookup = np.array([KIND_NAMES.index(k) if k in KIND_NAMES else -1 for k in uniq] + [-1], dtype="int8")
    return lookup[codes]


class OpNames:
    """Op display names, coded as chunks of ops reveal them: kernels by their name string
    (``<kernel ID>`` when the string is missing), ``[CUDA memcpy]`` / ``[CUDA memset]``, graph
    launches ``[CUDA graph ID]``. One code per distinct text (two name ids may carry the same
    text), codes in order of first appearance; per code, the phase its kernel-name patterns give
    (-1 for none) and whether it is a collective (the ``allreduce`` phase's kernel patterns)."""

    def __init__(self, strings: pd.Series, config: PhaseConfig):
        self.strings, self.config = strings, config
        coll = next((p for p in config.phases if p.name == "allreduce" and p.kernels), None)
        self._coll_rx = coll.kernel_regex() if coll is not None else None
        self._code_of_phase = {n: i for i, n in enumerate(config.names)}
        self._pair_code: dict[int, int] = {}
        self._text_code: dict[str, int] = {}
        self.texts: list[str] = []
        self._phase: list[int] = []
        self._collective: list[bool] = []

    def codes(self, kind: np.ndarray, name_id: np.ndarray) -> np.ndarray:
        """The name code (int32) of every op of a chunk (``kind``: :func:`kind_codes`)."""
        if not len(kind):
            return np.zeros(0, dtype="int32")
        ids = name_id.astype("int64", copy=False)
        pair = kind.astype("int64") * (1 << 40) + (ids & ((1 << 40) - 1))
        codes, uniq = pd.factorize(pair)
        uniq = np.asarray(uniq)
        lookup = np.array([self._pair_code.get(u, -1) for u in uniq.tolist()], dtype="int32")
        new = np.flatnonzero(lookup < 0)
        if len(new):
            first = np.zeros(len(uniq), dtype="int64")
            first[codes[::-1]] = np.arange(len(codes))[::-1]     # first op of every distinct pair
            texts = self._texts(uniq[new] >> 40, ids[first[new]])
            fresh = [t for t in dict.fromkeys(texts) if t not in self._text_code]
            for t, found in zip(fresh, kernel_phase(fresh, self.config)):
                self._text_code[t] = len(self.texts)
                self.texts.append(t)
                self._phase.append(self._code_of_phase[found] if found is not None else -1)
                self._collective.append(bool(self._coll_rx.fullmatch(t)) if self._coll_rx is not None else False)
            for u, t in zip(uniq[new].tolist(), texts):
                self._pair_code[u] = self._text_code[t]
            lookup[new] = [self._text_code[t] for t in texts]
        return lookup[codes]

    def _texts(self, kind: np.ndarray, ids: np.ndarray) -> list[str]:
        out = np.empty(len(kind), dtype=object)
        is_kernel = kind == KIND_NAMES.index("kernel")
        if is_kernel.any():
            looked = np.array(self.strings.reindex(ids[is_kernel]).to_numpy(dtype=object), dtype=object)
            missing = pd.isna(looked)
            looked[missing] = [f"<kernel {i}>" for i in ids[is_kernel][missing]]
            out[is_kernel] = looked
        for k, label in OP_KIND_LABEL.items():
            out[kind == KIND_NAMES.index(k)] = label
        is_graph = kind == KIND_NAMES.index("graph")
        out[is_graph] = [f"[CUDA graph {i}]" for i in ids[is_graph]]
        return [str(t) for t in out]

    @property
    def table(self) -> np.ndarray:
        """The distinct texts, by code (an object array)."""
        return np.array(self.texts, dtype=object)

    @property
    def phase(self) -> np.ndarray:
        """Per code, the kernel-pattern phase code (int16, -1 for none)."""
        return np.array(self._phase, dtype="int16")

    @property
    def collective(self) -> np.ndarray:
        """Per code, whether the name is a collective kernel."""
        return np.array(self._collective, dtype=bool)


def kernel_phase_codes(names: np.ndarray, config: PhaseConfig) -> np.ndarray:
    """Per distinct name, the code of the phase its kernel pattern gives (-1 for none)."""
    found = kernel_phase(list(names), config)
    code_of = {n: i for i, n in enumerate(config.names)}
    return np.array([code_of[f] if f is not None else -1 for f in found], dtype="int16")


class PaintedCalls(NamedTuple):
    """Per sorted API call, what its NVTX ranges say (from calls and ranges only, no GPU op)."""

    owner: np.ndarray           # innermost phase range id per call, with a trailing -1 slot (no call)
    range_code: np.ndarray      # phase code per range id, with a trailing ``other`` slot
    call_bits: np.ndarray | None  # inclusive membership, bit i = phase i (None beyond 64 phases)
    members: dict               # phase code -> bool per call (used beyond 64 phases)
    outermost: np.ndarray       # per range: outermost among the ranges of its phase


class PhaseNesting(NamedTuple):
    """How the phase ranges nest, from the ranges alone (no call): :func:`phase_nesting`."""

    levels: np.ndarray          # per phase range (ranges with a phase, in row order): depth among them
    tops: dict                  # phase code -> positions (among the phase ranges) of its outermost ranges
    phase_ranges: pd.DataFrame  # the ranges with a phase (thread, start, end, phase; their ids as index)


def phase_nesting(ranges: pd.DataFrame, config: PhaseConfig) -> PhaseNesting:
    """Depth of every phase range among the phase ranges of its thread, and per phase its outermost
    ranges (``ranges``: label_ranges' output). Needs no API call: computed while they are prepared."""
    # the phase texts coded once (missing: -1), not tested for NA then compared with every phase name
    code_all, uniques = factorize_objects(ranges["phase"].to_numpy(dtype=object))
    has_phase = code_all >= 0
    # only the columns used (a boolean selection of the whole frame copies every column)
    phase_ranges = ranges[["global_tid", "start_ns", "end_ns", "phase"]][has_phase]
    phase_code = code_all[has_phase]
    del code_all
    thread = pd.factorize(phase_ranges["global_tid"].to_numpy(dtype="int64"))[0].astype("int64")
    starts = phase_ranges["start_ns"].to_numpy(dtype="int64")
    ends = phase_ranges["end_ns"].to_numpy(dtype="int64")
    order = proj.thread_start_order(thread, starts, ends) if len(starts) else None
    levels = proj.nesting_levels(thread, starts, ends, order)
    code_of = {u: c for c, u in enumerate(uniques.tolist())}
    wanted = {i: code_of[name] for i, name in enumerate(config.names) if name in code_of}
    by_code = outermost_per_code(thread, starts, ends, phase_code, set(wanted.values()), order)
    tops = {}
    for i, code in wanted.items():
        if by_code is not None:
            tops[i] = by_code[code]
        else:
            sel = np.flatnonzero(phase_code == code)
            tops[i] = sel[proj.nesting_levels(thread[sel], starts[sel], ends[sel]) == 0]
    return PhaseNesting(levels, tops, phase_ranges)


def outermost_per_code(thread: np.ndarray, start: np.ndarray, end: np.ndarray, code: np.ndarray,
                       wanted: set, order: np.ndarray | None = None) -> dict | None:
    """For each code in ``wanted`` (codes >= 0), the positions (ascending) of its ranges at depth 0
    among the ranges of that code and thread, ``sel[nesting_levels(thread[sel], start[sel],
    end[sel]) == 0]`` for ``sel`` its positions, from one order instead of one nesting per code.
    In (thread, start, -end) order (stable, as nesting_levels orders them), a range is at depth 0
    when every earlier range of its code and thread ended before it started (a segmented running
    max of ends). None (the caller takes nesting_levels per code) where a range ends before it
    starts (nesting_levels then counts it differently) or a code is negative. ``order``:
    projection.thread_start_order of the ranges when the caller has it."""
    n = len(start)
    if not n or not wanted:
        return {c: np.zeros(0, dtype=np.intp) for c in wanted}
    if bool((end < start).any()) or int(code.min()) < 0 or min(wanted) < 0:
        return None
    order = proj.thread_start_order(thread, start, end) if order is None else order
    c_max = int(code.max())
    by_code = order[stable_order(code[order], 0, c_max)]
    t, c, s, e = thread[by_code], code[by_code], start[by_code], end[by_code]
    new = np.r_[True, (t[1:] != t[:-1]) | (c[1:] != c[:-1])]
    reach = intervals.segmented_running_max(e, new)       # the latest end so far in the group
    top = new.copy()
    top[1:] |= reach[:-1] < s[1:]
    out = {}
    bounds = np.searchsorted(c, np.arange(max(c_max, max(wanted)) + 2))  # c ascends: each code's run
    for k in wanted:
        a, b = bounds[k], bounds[k + 1]
        out[k] = np.sort(by_code[a:b][top[a:b]])
    return out


def paint_phase_calls(ranges: pd.DataFrame, index: proj.CallIndex, config: PhaseConfig,
                      layout=None, nesting: PhaseNesting | None = None) -> PaintedCalls:
    """The call side of the phase assignment: every sorted call painted with its innermost
    phase range and its inclusive phase bits (once per report, whatever the number of ops).
    ``layout``: projection.range_layout of ``ranges`` when the caller has it (blocks reused);
    ``nesting``: :func:`phase_nesting` of ``ranges`` when the caller has it."""
    n_calls = len(index.key)
    nesting = phase_nesting(ranges, config) if nesting is None else nesting
    phase_ranges = nesting.phase_ranges          # (selected once per preparation)
    lo, hi, exact, end_key, start_key = proj.subset_blocks(index, ranges, phase_ranges, layout)
    levels = nesting.levels
    labels = phase_ranges.index.to_numpy(dtype="int64")
    # range ids as int32 when they fit: held per call for the whole analysis
    label_t = "int32" if len(ranges) < 2 ** 31 - 1 and (not len(labels) or labels.max() < 2 ** 31 - 1) else "int64"
    owner = np.full(n_calls + 1, -1, dtype=label_t)   # op_call -1 (no launching call) picks the last slot
    owner[:-1] = proj.paint_blocks(n_calls, lo, hi, levels, exact, labels, (index.end_key, end_key), dtype=label_t,
                                   start_key=start_key)

    code_of = {n: i for i, n in enumerate(config.names)}
    other = len(config.names)
    pcode, puniq = factorize_objects(ranges["phase"].to_numpy(dtype=object), use_na_sentinel=True)  # per phase
    plookup = np.array([code_of.get(p, other) if isinstance(p, str) else other for p in puniq] + [other],
                       dtype="int16")
    range_code = np.append(plookup[np.where(pcode < 0, len(puniq), pcode)], np.int16(other))

    # inclusive membership as one bit per phase, painted once per phase
    n_ph = len(config.names)
    bits_t = next((t for t in (np.uint8, np.uint16, np.uint32, np.uint64) if np.dtype(t).itemsize * 8 >= n_ph),
                  None)
    outermost = np.zeros(len(ranges), dtype=bool)
    members: dict[int, np.ndarray] = {}
    for i in range(len(config.names)):
        top = nesting.tops.get(i)
        if top is not None:
            outermost[phase_ranges.index.to_numpy()[top]] = True
            marks = proj.paint_blocks(n_calls, lo[top], hi[top], np.zeros(len(top), dtype="int64"),
                                      exact[top], np.ones(len(top), dtype="int8"),
                                      (index.end_key, end_key[top]), dtype="int8")
            members[i] = marks > 0
            del marks
    call_bits = None
    if bits_t is not None:
        call_bits = np.zeros(n_calls + 1, dtype=bits_t)
        for i, m in members.items():
            call_bits[:-1][m] |= call_bits.dtype.type(1 << i)
        members = {}         # the bits say it all (members serve beyond 64 phases only)
    return PaintedCalls(owner, range_code, call_bits, members, outermost)


def op_phase_codes(painted: PaintedCalls, op_call: np.ndarray, name_code: np.ndarray,
                   name_phase: np.ndarray, config: PhaseConfig):
    """The op side of the phase assignment (:func:`paint_phase_calls` is the call side): (phase code, range id, inclusive membership) per
    op, by gathers from the painted calls (works on any subset of the ops, e.g. one chunk)."""
    n_ops = len(op_call)
    range_id = painted.owner[op_call]                 # int32 when the range ids fit (paint_phase_calls)
    # phase codes are small (int8: a phase per code, at most 127 of them): gathers of int8 tables
    small = len(config.names) < 127
    kt = "int8" if small else "int16"
    by_kernel = name_phase.astype(kt)[name_code] if len(name_phase) else np.full(n_ops, -1, dtype=kt)
    phase = painted.range_code.astype(kt)[range_id]
    np.copyto(phase, by_kernel, where=by_kernel >= 0)
    phase = phase.astype("int8", copy=False)
    if painted.call_bits is not None:
        op_bits = painted.call_bits[op_call]
        kernel_bit = np.left_shift(np.ones(1, dtype=op_bits.dtype), np.maximum(by_kernel, 0).astype(op_bits.dtype))
        op_bits |= np.where(by_kernel >= 0, kernel_bit, 0).astype(op_bits.dtype)
        return phase, range_id, op_bits
    inclusive: dict[str, np.ndarray] = {}
    for i, name in enumerate(config.names):       # more phases than bits in a word: one mask each
        m = painted.members.get(i)
        in_range = np.append(m, False)[op_call] if m is not None else np.zeros(n_ops, dtype=bool)
        inclusive[name] = in_range | (by_kernel == i)
    return phase, range_id, inclusive


def sort_order(code: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The stable order by (code, start): ``np.lexsort((start, code))``, as one stable sort of a
    composite key where it fits 64 bits. (A radix sort by code, then a sort of each run out of start
    order, went in issue 42: on the synthetic 10M file 1.016x wall, 1.002x peak, within the noise.)"""
    if not len(start):
        return np.zeros(0, dtype="int64")
    base = int(start.min())
    span = int(start.max()) - base + 1
    n = int(code.max()) + 1
    if int(code.min()) >= 0 and span * max(n, 1) < 2 ** 62:
        key = code.astype("int64") * span + (start - base)
        return np.argsort(key, kind="stable")
    return np.lexsort((start, code))


def inclusive_mask(inclusive, i: int, name: str) -> np.ndarray:
    """Ops in phase ``i`` (``name``) from :func:`op_phase_codes`' inclusive membership (bits, or a dict beyond 64 phases)."""
    if isinstance(inclusive, dict):
        return inclusive[name]
    return (inclusive & inclusive.dtype.type(1 << i)) != 0


class RankFigures(NamedTuple):
    """Per rank (arrays indexed like the ranks table, sorted by rank): what the phase and totals
    tables are made of. Lists hold one array per configured phase."""

    busy: np.ndarray
    phase_busy: list
    exclusive: list
    kernel_ns: list
    other_busy: np.ndarray
    other_kernel_ns: np.ndarray
    attributed: np.ndarray      # exclusive time of all phases (the last cumulative union)
    kernel_total: np.ndarray
    window_start: np.ndarray
    window_end: np.ndarray
    gpu_ops: np.ndarray


def phase_tables(fig: RankFigures, ranges: pd.DataFrame, outermost: np.ndarray, ranks: pd.DataFrame,
                 config: PhaseConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(phases, totals) tables from the per-rank figures and the ranges (instances, CPU time and
    projected time of each phase's outermost ranges)."""
    rank_list = ranks["rank"].to_numpy(dtype="int64")
    rows = []
    range_rank = dict(zip(ranks["global_pid"].tolist(), ranks["rank"].tolist()))
    # the outermost phase ranges, column by column (not a copy of every column of the frame)
    top = np.flatnonzero(outermost)

    def column(name: str, dtype="int64") -> np.ndarray:
        return ranges[name].to_numpy(dtype=dtype)[top]

    top_rank = pd.Series(column("global_pid")).map(range_rank).fillna(-1).to_numpy(dtype="int64")
    top_phase = column("phase", object)
    cpu_ns = column("end_ns") - column("start_ns")
    projected_ns = np.where(column("gpu_ops_all") > 0, column("gpu_end_all") - column("gpu_start_all"), 0)
    for i_phase, name in enumerate(config.names):
        mine = top_phase == name
        for i, rank in enumerate(rank_list):
            sel = mine & (top_rank == rank)
            rows.append({"rank": int(rank), "phase": name, "instances": int(sel.sum()),
                         "cpu_ns": int(cpu_ns[sel].sum()), "projected_ns": int(projected_ns[sel].sum()),
                         "busy_ns": int(fig.phase_busy[i_phase][i]), "exclusive_ns": int(fig.exclusive[i_phase][i]),
                         "kernel_ns": int(fig.kernel_ns[i_phase][i])})
    busy, cumulative = fig.busy, fig.attributed
    for i, rank in enumerate(rank_list):
        rows.append({"rank": int(rank), "phase": OTHER, "instances": 0, "cpu_ns": 0, "projected_ns": 0,
                     "busy_ns": int(fig.other_busy[i]),
                     "exclusive_ns": int(busy[i] - cumulative[i]), "kernel_ns": int(fig.other_kernel_ns[i])})
    phases = pd.DataFrame(rows).sort_values(["rank"], kind="stable").reset_index(drop=True)
    win_start, win_end = fig.window_start, fig.window_end
    totals = pd.DataFrame({
        "rank": rank_list, "kernel_ns": fig.kernel_total.astype("int64"), "busy_ns": busy,
        "exclusive_attributed_ns": cumulative, "unattributed_ns": busy - cumulative,
        "window_start_ns": win_start, "window_end_ns": win_end,
        "idle_ns": np.where(win_end >= 0, win_end - win_start - busy, 0),
        "gpu_ops": fig.gpu_ops,
    })
    return phases, totals


def kernel_table_codes(rank_code: np.ndarray, rank_values: np.ndarray, phase: np.ndarray,
                       phase_names: list[str], name_code: np.ndarray, names: np.ndarray,
                       duration: np.ndarray) -> pd.DataFrame:
    """:func:`kernel_table` on codes (same rows, same order)."""
    cols = ["rank", "phase", "name", "instances", "total_ns", "mean_ns", "median_ns", "p99_ns", "share"]
    if not len(duration):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    n_phase, n_name = len(phase_names), max(len(names), 1)
    key = (rank_code.astype("int64") * n_phase + phase) * n_name + name_code
    d = duration.astype("int64", copy=False)
    dmin = int(d.min())
    dspan = int(d.max()) - dmin + 1
    n_keys = int(key.max()) + 1
    if dspan * n_keys < 2 ** 62:
        combined = key * dspan + (d - dmin)
        del key
        combined.sort()
        return kernel_table_sorted(combined, dmin, dspan, rank_values, phase_names, names)
    order = np.lexsort((d, key))
    k, v = key[order], d[order]
    run = np.r_[0, np.flatnonzero(k[1:] != k[:-1]) + 1]
    return _kernel_rows(k[run], run, v, rank_values, phase_names, names)


def kernel_table_sorted(combined: np.ndarray, dmin: int, dspan: int, rank_values: np.ndarray,
                        phase_names: list[str], names: np.ndarray) -> pd.DataFrame:
    """:func:`kernel_table_codes` from ``key * dspan + (duration - dmin)`` per op, sorted (key =
    (rank code * phases + phase) * names + name code). ``combined`` is overwritten with the
    durations: one array of 8 bytes per op is the whole working set."""
    # where the key changes, found block by block (no second array of 8 bytes per op)
    starts = [np.zeros(1, dtype="int64")]
    block = 1 << 20
    for a in range(0, len(combined) - 1, block):
        k = combined[a:a + block + 1] // dspan
        starts.append(np.flatnonzero(k[1:] != k[:-1]) + a + 1)
    run = np.concatenate(starts)
    gk = combined[run] // dspan
    np.remainder(combined, dspan, out=combined)
    combined += dmin
    return _kernel_rows(gk, run, combined, rank_values, phase_names, names)


def _kernel_rows(gk: np.ndarray, run: np.ndarray, v: np.ndarray, rank_values: np.ndarray,
                 phase_names: list[str], names: np.ndarray) -> pd.DataFrame:
    """Rows of the kernel table: ``v`` durations sorted by (key, duration), ``run`` where each key's
    run starts, ``gk`` the key of each run."""
    cols = ["rank", "phase", "name", "instances", "total_ns", "mean_ns", "median_ns", "p99_ns", "share"]
    n_phase, n_name = len(phase_names), max(len(names), 1)
    n = np.diff(np.r_[run, len(v)])
    total = np.add.reduceat(v, run)
    lo_mid, hi_mid = run + (n - 1) // 2, run + n // 2
    median = (v[lo_mid] + v[hi_mid]) / 2.0
    pos = 0.99 * (n - 1)
    below = np.floor(pos).astype("int64")
    frac = pos - below
    a = v[run + below].astype("float64")
    b = v[np.minimum(run + below + 1, run + n - 1)].astype("float64")
    p99 = a + (b - a) * frac
    name_i = gk % n_name
    phase_i = (gk // n_name) % n_phase
    rank_i = gk // (n_name * n_phase)
    table = pd.DataFrame({"rank": np.asarray(rank_values)[rank_i],
                          "phase": np.asarray(phase_names, dtype=object)[phase_i],
                          "name": np.asarray(names, dtype=object)[name_i], "instances": n, "total_ns": total,
                          "mean_ns": total / n, "median_ns": median, "p99_ns": p99})
    phase_total = table.groupby(["rank", "phase"])["total_ns"].transform("sum")
    table["share"] = np.where(phase_total > 0, table["total_ns"] / phase_total, 0.0)
    table = table.sort_values(["rank", "phase", "total_ns", "name"], ascending=[True, True, False, True],
                              kind="stable").reset_index(drop=True)
    return table[cols]


def kernel_table_of_chunks(store, row_of_group: np.ndarray, rank_values: np.ndarray, phase_names: list[str],
                           texts: np.ndarray) -> pd.DataFrame:
    """:func:`kernel_table_codes` over the (process, phase, name, duration) of every op a chunked store
    holds (the map step's run/spill.OpStore: ``sizes``, ``get_unordered(k, column)`` of columns g, ph,
    nc, s, e per chunk k): one int64 per op, key and duration packed, sorted in place
    (:func:`kernel_table_sorted`). ``row_of_group``: per process code, its row of ``rank_values``."""
    n, sizes = len(store), store.sizes
    if not sum(sizes):
        return kernel_table_codes(np.zeros(0, dtype="int32"), rank_values, np.zeros(0, dtype="int8"),
                                  phase_names, np.zeros(0, dtype="int32"), texts, np.zeros(0, dtype="int64"))
    n_phase, n_name = len(phase_names), max(len(texts), 1)
    dmin, dmax = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for k in range(n):
        if sizes[k]:
            d = store.get_unordered(k, "e") - store.get_unordered(k, "s")
            dmin, dmax = min(dmin, int(d.min())), max(dmax, int(d.max()))
            del d
    dspan = dmax - dmin + 1
    if dspan * len(rank_values) * n_phase * n_name >= 2 ** 62:     # does not pack: the general path
        cols = {c: np.concatenate([store.get_unordered(k, c) for k in range(n)]) for c in ("g", "ph", "nc", "s", "e")}
        return kernel_table_codes(row_of_group[cols["g"]], rank_values, cols["ph"], phase_names,
                                  cols["nc"], texts, cols["e"] - cols["s"])
    combined = np.empty(sum(sizes), dtype="int64")
    at = 0
    for k in range(n):
        if not sizes[k]:
            continue
        part = combined[at:at + sizes[k]]
        np.multiply(row_of_group[store.get_unordered(k, "g")], n_phase, out=part)
        part += store.get_unordered(k, "ph")
        part *= n_name
        part += store.get_unordered(k, "nc")
        part *= dspan
        part += store.get_unordered(k, "e")
        part -= store.get_unordered(k, "s")
        part -= dmin
        at += sizes[k]
    combined.sort()
    return kernel_table_sorted(combined, dmin, dspan, rank_values, phase_names, texts)
