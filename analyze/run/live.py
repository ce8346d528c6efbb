"""A live timing log (the shim's ``SPECPROF_TIMING=1`` mode, docs/live.md) read as an
:class:`~analyze.results.Analysis`, so that the report's decode headline, ``whatif``, ``advise`` and
``diff`` run on it as on an nsys report.

What the log has and what it lacks decides every column (docs/live.md, "Reading a live log"):

* **Times.** ``start_ns``/``end_ns`` (and ``cpu_start_ns``/``cpu_end_ns``, the same) are the HOST
  times of the ``decode_cycle`` range (``perf_counter_ns``, CLOCK_MONOTONIC: comparable between the
  processes of one host), not a GPU window. ``period_ns`` is the host start to the next cycle's
  host start of the same process; where that is unknown (a process's last cycle, a cycle followed
  by dropped ones) the cycle's own host duration, as the nsys cycle table does for a rank's last
  cycle (counted in the note).
* **Phases.** ``<phase>_ns`` is the logged GPU time of the phase (CUDA events on the current
  stream, null where not measured). The all-reduce runs inside the draft, verify or draft-extend
  forward, so its events lie inside theirs: ``busy_ns`` = draft + verify + draft_extend, and the
  period split (``period_<phase>_ns``) gives the all-reduce 0 (its time is inside the phase that
  ran it). ``other_ns`` and ``gap_ns`` are null (not measured).
* **Period split.** ``period_<phase>_ns`` = the phase's GPU time (0 where not measured),
  ``period_other_ns`` = 0, ``period_idle_ns`` = period - draft - verify - draft_extend: GPU idle,
  GPU work of no timed range AND host time together (the log cannot tell them apart; the headline
  says "outside the timed phases", not "GPU idle"). With SGLang's overlap scheduler one cycle's GPU
  work may run in the next one's host period: per cycle the rest can be negative, its mean cannot
  be read as idle time either.
* **Sampled logs** (``SPECPROF_TIMING_SAMPLE``): a cycle the sampling left without CUDA events
  (``timed`` false) keeps its period, tokens and acceptance (a steady cycle like any other: the timed
  cycles pay the events' cost, the others do not) and has no period split (``period_<phase>_ns``,
  ``period_idle_ns`` null): the phase figures are the timed cycles' split carried onto the mean period of
  every cycle (:func:`analyze.timeline.cycles.sampled_scale`, used by the decode breakdown and whatif).
* **Steady cycles.** No warm-up flags: :func:`analyze.timeline.cycles.left_out_reasons` derives
  them from the table (first cycle per rank, outlier period per batch size), the one definition.
* **Cycles** are numbered by the shim's decode-cycle number less the log's smallest (one number is
  one step on every rank; per rank in host start order where a rank holds several processes); the
  shim's number is kept in ``shim_cycle``, with ``pid`` and ``steps`` (SGLang's --speculative-num-steps).
* Kernel, phase, range, NVTX and collective tables are empty; the notes say so
  (:data:`analyze.notes.LIVE_LOG_NO_KERNELS`).

Pure functions over DataFrames; :func:`load_live` puts them together."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.attribute.phases import OTHER, PhaseConfig
from analyze.errors import MissingInput, UsageError
from analyze.notes import Note
from analyze.read import columnar, live_log
from analyze.read.inputs import NSYS_REP_SUFFIXES, REPORT_SUFFIXES, display_path
from analyze.results import Analysis
from analyze.timeline import cycles as cycles_mod
from nvtx_annotate.protocol import SpecConfig, format_spec_config

LIVE_PHASES = ("draft", "verify", "draft_extend", "allreduce")
"""The phases a live log times, in the analyzer's phase order."""
NESTED_PHASE = "allreduce"
"""Timed inside the other phases' events (the TP all-reduce runs inside the forwards)."""
SOURCE = "live_log"
"""The ``source`` of the ranks table and the ``kind`` of an input read from a live log."""
EXTRA_COLUMNS = ["pid", "shim_cycle", "timed", "replay_ns", "draft_replay_ns", "shim_ns", "sink_ns"]


def live_config() -> PhaseConfig:
    """The phase configuration of a live log: the default phases the log times."""
    base = PhaseConfig()
    return PhaseConfig(phases=[p for p in base.phases if p.name in LIVE_PHASES])


# ---------------------------------------------------------------------------------------------- inputs
def is_live_path(path) -> bool:
    """A ``*.parquet`` or ``*.arrows`` file (a log file, complete or open), or a directory holding such files and
    no nsys report or export (a ``parquetdir`` export is one: read/columnar.py): taken as a live log (the reader then checks its schema: a Parquet file that is not a
    live log is refused with one line, exit 12)."""
    p = Path(os.fspath(path))
    if p.is_file():
        return p.name.lower().endswith(live_log_suffix())
    if p.is_dir():
        if columnar.table_files(p) is not None:
            return False
        names = [q.name.lower() for q in p.iterdir() if q.is_file()]
        reports = any(n.endswith(REPORT_SUFFIXES) or n.endswith(NSYS_REP_SUFFIXES) for n in names)
        return not reports and any(n.endswith(live_log_suffix()) for n in names)
    return False


def live_log_suffix() -> tuple[str, str]:
    return (live_log.SUFFIX, live_log.OPEN_SUFFIX)


def live_paths(paths) -> list[str] | None:
    """The paths when they are live logs (:func:`is_live_path`), None when none is; giving live
    logs and reports together is a usage error."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    live = [is_live_path(p) for p in paths]
    if not any(live):
        return None
    if not all(live):
        raise UsageError("live timing logs and nsys reports given together: analyse them separately (live: "
                         + ", ".join(display_path(p) for p, x in zip(paths, live) if x) + ")")
    return paths


def read_raw(paths) -> tuple[pd.DataFrame, list[dict]]:
    """(every log row of ``paths`` with an ``input`` column, one metadata dict per file with its
    ``path``)."""
    frames, metas = [], []
    for path in paths:
        for f in live_log.log_files(path):
            read = live_log.read_log(f)
            rows = 0 if read.frame is None else len(read.frame)
            if rows:
                frames.append(read.frame.assign(input=display_path(path)))
            metas.append(dict(read.meta, path=display_path(read.path), input=display_path(path), open=read.open,
                              cut=read.cut, rows=rows))
    if not frames:
        raise MissingInput(f"{', '.join(map(display_path, paths))}: no cycle in the timing log (its files hold no "
                           "batch yet: a process killed before writing one, or one just started)", paths[0])
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0], metas


# ---------------------------------------------------------------------------------------------- tables
def cycle_table(frame: pd.DataFrame, config: PhaseConfig | None = None) -> pd.DataFrame:
    """The reader's per-cycle frame (:func:`analyze.read.live_log.cycles_frame`) -> the analyzer's
    cycle table (:func:`analyze.timeline.cycles.columns` without the GPU period; warm-up flags derived
    once by the one rule, plus :data:`EXTRA_COLUMNS`); see the module docstring for each column."""
    config = config or live_config()
    names = list(config.names)
    order = [c for c in cycles_mod.columns(config)
             if c not in cycles_mod.PERIOD_COLUMNS and c not in cycles_mod.FLAG_COLUMNS]
    if frame is None or not len(frame):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in order + EXTRA_COLUMNS})
    f = frame.sort_values(["rank", "start_ns", "pid", "cycle"], kind="stable").reset_index(drop=True)
    start = f["start_ns"].astype("int64")
    end = f["end_ns"].astype("int64")
    # a cycle without a next one in its process: its own host duration, or its timed GPU work where that is
    # longer (it ran past the host's end: an overlapping scheduler), so that its split is never negative
    outer_ns = f[[f"{p}_ns" for p in names if p != NESTED_PHASE and f"{p}_ns" in f.columns]]
    own = np.maximum((end - start).to_numpy(), outer_ns.fillna(0).sum(axis=1).astype("int64").to_numpy())
    period = f["period_ns"].astype("Int64").fillna(pd.Series(own, index=f.index)).astype("int64")
    out = pd.DataFrame({"rank": f["rank"].astype("int64"), "cycle": cycle_numbers(f),
                        "start_ns": start, "end_ns": end, "duration_ns": end - start,
                        "cpu_start_ns": start, "cpu_end_ns": end, "period_ns": period})
    timed = {p: f[f"{p}_ns"].astype("Int64") if f"{p}_ns" in f.columns else pd.Series(pd.NA, index=f.index,
                                                                                     dtype="Int64")
             for p in names}
    outer = [p for p in names if p != NESTED_PHASE]
    outer_frame = pd.DataFrame({p: timed[p] for p in outer})
    any_outer = outer_frame.notna().any(axis=1)
    busy = outer_frame.fillna(0).sum(axis=1).astype("Int64").where(any_outer, pd.NA)
    out["busy_ns"] = busy
    for p in names:
        out[f"{p}_ns"] = timed[p]
    out[f"{OTHER}_ns"] = pd.Series(pd.NA, index=f.index, dtype="Int64")
    out["gap_ns"] = pd.Series(pd.NA, index=f.index, dtype="Int64")
    out["accepted_tokens"] = f["accepted"].astype("Int64")
    out["requests"] = f["requests"].astype("Int64")
    # the per-request accept lengths where the shim logged them ("a,b,...", as an accept mark's lens=)
    out["accept_lengths"] = live_log.text_column(f, "accept_lens")
    out["tokens"] = f["tokens"].astype("Int64")
    out["tokens_per_s"] = (out["tokens"].astype("Float64") * 1e9 / out["period_ns"].where(out["period_ns"] > 0)) \
        .astype("float64")
    out["host_wait_ns"] = pd.Series(pd.NA, index=f.index, dtype="Int64")     # no API calls in a live log
    out["launch_excess_ns"] = pd.Series(pd.NA, index=f.index, dtype="Int64")
    measured = busy.fillna(0).astype("int64")
    # a cycle the sampling left without events has no period split (null), the others as before
    has_events = cycles_mod.timed(f)
    split = pd.Series(has_events, index=f.index)

    def split_only(v: pd.Series) -> pd.Series:
        return v.astype("Int64").where(split, pd.NA)
    for p in names:
        out[f"period_{p}_ns"] = split_only(pd.Series(0, index=f.index) if p == NESTED_PHASE
                                           else timed[p].fillna(0).astype("int64"))
    out[f"period_{OTHER}_ns"] = split_only(pd.Series(0, index=f.index))
    out["period_idle_ns"] = split_only(period - measured)
    out["pid"] = f["pid"].astype("int64")
    out["shim_cycle"] = f["cycle"].astype("int64")
    out["steps"] = f["steps"].astype("Int64")
    out["timed"] = split.to_numpy()
    for col in ("replay_ns", "draft_replay_ns", *live_log.OWN_COST_COLUMNS):
        out[col] = f[col].astype("Int64") if col in f.columns else pd.Series(pd.NA, index=f.index, dtype="Int64")
    # the flags derived once, over the whole table (timeline.cycles.with_flags): a subset keeps them;
    # every process's first cycle is warm-up (a restarted worker captures its graphs again)
    out = cycles_mod.with_flags(out[order + EXTRA_COLUMNS])
    first = (out.groupby(["rank", "pid"]).cumcount() == 0).to_numpy() & ~out["warmup"].to_numpy(dtype=bool)
    out.loc[first, "warmup_reason"] = cycles_mod.FIRST
    out.loc[first, "warmup"] = True
    return out


def cycle_numbers(f: pd.DataFrame) -> pd.Series:
    """The cycle number of each row (rows in (rank, start) order): the shim's decode-cycle number less
    the smallest over the log, so that one number is one decode step on every rank (TP ranks run the
    same steps; a cycle a rank's ring dropped leaves a gap, not a shift); where a rank holds several
    processes (a restart), numbered per rank in host start order instead."""
    if len(f) and (f.groupby("rank")["pid"].nunique() == 1).all():
        k = f["cycle"].astype("int64")
        return (k - int(k.min())).astype("int64")
    return f.groupby("rank").cumcount().astype("int64")


def spec_config_text(spec: dict | None) -> str | None:
    """A log's ``specprof.spec_config`` metadata (a dict) as the shim's ``spec_config`` mark text
    (what the ranks table's ``spec_config`` column holds), None when absent or unusable."""
    if not isinstance(spec, dict) or "algo" not in spec:
        return None
    try:
        cfg = SpecConfig(**{k: spec.get(k) for k in SpecConfig._fields})
    except TypeError:
        return None
    return format_spec_config(cfg)


def ranks_table(metas: list[dict]) -> pd.DataFrame:
    """One row per rank (its first process's file, by name order): rank, pid, global_pid, device_ids,
    source, world (the spec_config's tp), input, offset_ns (0), spec_config (mark text)."""
    rows, seen = [], set()
    for m in sorted(metas, key=lambda m: (int(m.get("rank", 0)), m["path"])):
        rank = int(m.get("rank", 0))
        if rank in seen:
            continue
        seen.add(rank)
        spec = m.get("spec_config") if isinstance(m.get("spec_config"), dict) else {}
        rows.append({"rank": rank, "pid": int(m.get("pid", 0)), "global_pid": int(m.get("pid", 0)),
                     "device_ids": None, "source": SOURCE, "world": spec.get("tp"), "input": m["input"],
                     "offset_ns": 0, "spec_config": spec_config_text(spec)})
    cols = ["rank", "pid", "global_pid", "device_ids", "source", "world", "input", "offset_ns", "spec_config"]
    return pd.DataFrame(rows, columns=cols)


def totals_table(cycles: pd.DataFrame) -> pd.DataFrame:
    """Per rank: no GPU op counted (the log has none), no kernel time, busy = the timed phases over
    the cycles (a sampled log: over its timed cycles, scaled to all), nothing known outside the cycles."""
    ranks = sorted(int(r) for r in cycles["rank"].unique()) if len(cycles) else []
    busy = cycles.groupby("rank")["busy_ns"].sum() if len(cycles) else pd.Series(dtype="int64")
    if len(cycles) and not cycles_mod.timed(cycles).all():
        # a sampled log: the timed cycles' sum carried onto every cycle of the rank, as the decode breakdown
        # carries their split (timeline/cycles.sampled_scale; an estimate: the note says so)
        g = pd.Series(cycles_mod.timed(cycles), index=cycles.index).groupby(cycles["rank"])
        # over the steady cycles, as the breakdown and whatif take it (the one rule)
        steady = cycles_mod.steady(cycles)
        scale = pd.Series({r: cycles_mod.sampled_scale(c["period_ns"].to_numpy(dtype="float64", na_value=np.nan),
                                                       cycles_mod.timed(c))
                           for r, c in steady.groupby("rank")}, dtype="float64").reindex(g.size().index).fillna(1.0)
        busy = (busy * g.size() / g.sum().where(g.sum() > 0) * scale).fillna(0).round()
    return pd.DataFrame({"rank": ranks, "kernel_ns": [0] * len(ranks),
                         "busy_ns": [int(busy.get(r, 0) or 0) for r in ranks],
                         "exclusive_attributed_ns": [int(busy.get(r, 0) or 0) for r in ranks],
                         "unattributed_ns": [0] * len(ranks), "window_start_ns": [None] * len(ranks),
                         "window_end_ns": [None] * len(ranks), "idle_ns": [None] * len(ranks),
                         "gpu_ops": [0] * len(ranks), "outside_cycles_busy_ns": [0] * len(ranks)})


def set_aside_notes(counts: dict) -> list[Note]:
    """Notes of the rows and values :func:`analyze.read.live_log.clean_rows` set aside (never summed)."""
    out = []
    rows, dups = counts.get(live_log.ROWS_LEFT_OUT, 0), counts.get(live_log.DUPLICATES_LEFT_OUT, 0)
    if rows or dups:
        out.append(Note(N.LIVE_LOG_BAD_ROWS, f"log rows left out: {rows} without a usable rank, pid, cycle or host "
                        f"start/end (missing, negative, or ending before it starts), {dups} repeating a (rank, pid, "
                        "cycle) already read", rows + dups))
    values = counts.get(live_log.VALUES_NULLED, 0)
    if values:
        out.append(Note(N.LIVE_LOG_BAD_VALUES, "log values read as not measured: negative times or counts, times "
                        "longer than their process's whole log, a timed flag other than 0 or 1, accept lengths that "
                        "are not one a request summing to the accepted tokens", values))
    return out


def open_file_notes(metas: list[dict]) -> list[Note]:
    """A note on the open files read (streams: their process still writing them, or stopped without completing
    them, e.g. by SGLang's SIGKILL): their whole batches were read; a cut-off last batch is not."""
    opened = [m for m in metas if m.get("open")]
    if not opened:
        return []
    cut = sum(bool(m.get("cut")) for m in opened)
    rows = sum(int(m.get("rows", 0)) for m in opened)
    return [Note(N.LIVE_LOG_OPEN_FILES, f"{len(opened)} log file(s) not completed (*.arrows: their process still "
                 f"running, or stopped without completing them, e.g. by SIGKILL): {rows} cycles read from their whole "
                 f"batches, {cut} of them ending inside a batch (a write cut short: that batch not read); the cycles "
                 "such a process had not yet written (about the last second, SPECPROF_TIMING_FLUSH_S) are missing",
                 len(opened))]


def live_notes(frame: pd.DataFrame, cycles: pd.DataFrame) -> list[Note]:
    """What the analysis of a live log says about itself (structured notes)."""
    out = [Note(N.LIVE_LOG_NO_KERNELS, "a live timing log (docs/live.md): no kernels and no NVTX ranges, so the "
                "kernel, phase, NVTX and collective tables are absent; GPU phase times are CUDA-event times, cycle "
                "times and periods the shim's host clock; the 'outside timed' row ('gpu_idle' in --json) is the period "
                "outside the timed phases (GPU idle, GPU work of no timed range and host time together)", len(cycles))]
    no_period = int(frame["period_ns"].isna().sum()) if len(frame) else 0
    if no_period:
        out.append(Note(N.LIVE_LOG_NO_PERIOD, "cycles without a usable next cycle in their process (the last one, "
                        "one followed by dropped cycles, one whose next cycle starts no later): their period is their "
                        "own host duration, or their timed GPU work where that is longer", no_period))
    untimed = int((~cycles_mod.timed(cycles)).sum())
    if untimed:
        out.append(Note(N.LIVE_LOG_SAMPLED, f"the shim timed {len(cycles) - untimed} of {len(cycles)} cycles with "
                        "CUDA events (SPECPROF_TIMING_SAMPLE): periods, tokens and acceptance are every cycle's; "
                        "phase times the timed cycles' split carried onto every cycle's mean period (the timed "
                        "cycles pay the events' cost: their period is longer); busy totals likewise",
                        untimed))
    ar = cycles[f"{NESTED_PHASE}_ns"].notna() if f"{NESTED_PHASE}_ns" in cycles.columns else pd.Series(dtype=bool)
    if ar.any():
        out.append(Note(N.LIVE_LOG_NESTED_ALLREDUCE, "the all-reduce's events lie inside the forward that ran it "
                        "(draft, verify or draft_extend): allreduce_ns is part of those phases' time, not added to "
                        "busy_ns nor to the period split", int(ar.sum())))
    return out


def live_analysis(frame: pd.DataFrame, metas: list[dict], inputs: list[str],
                  set_aside: dict | None = None) -> Analysis:
    """The :class:`Analysis` of a live log: the cycle table, the ranks table (spec_config from the
    files' metadata), empty kernel-level tables, the notes (``set_aside``: what
    :func:`analyze.read.live_log.clean_rows` left out or nulled, counted)."""
    config = live_config()
    cycles = cycle_table(frame, config)
    ranks = ranks_table(metas)
    notes = set_aside_notes(set_aside or {}) + open_file_notes(metas) + live_notes(frame, cycles)
    by_input = {}
    for m in metas:
        by_input.setdefault(m["input"], []).append(m)
    input_rows = [{"path": display_path(p), "kind": SOURCE,
                   "schema_version": (by_input.get(display_path(p)) or [{}])[0].get("schema_version"),
                   "nsys_version": None, "cuda_graph_trace": None, "utc_start_ns": None, "offset_ns": 0,
                   "files": len(by_input.get(display_path(p), [])),
                   "ranks": sorted({int(m.get("rank", 0)) for m in by_input.get(display_path(p), [])}),
                   "notes": []} for p in inputs]
    empty = _empty
    return Analysis(
        inputs=input_rows, ranks=ranks,
        gpu_ops=empty(["rank", "kind", "name", "phase", "start_ns", "end_ns", "cycle_range"]),
        ranges=empty(["rank", "global_tid", "global_pid", "domain", "name", "style", "start_ns", "end_ns", "phase"]),
        phases=empty(["rank", "phase", "instances", "cpu_ns", "projected_ns", "busy_ns", "exclusive_ns",
                      "kernel_ns"]),
        kernels=empty(["rank", "phase", "name", "instances", "total_ns", "mean_ns", "median_ns", "p99_ns",
                       "share"]),
        totals=totals_table(cycles),
        nvtx_projection=empty(["range", "style", "instances", "total_projected_ns", "total_range_ns", "gpu_ops",
                               "input"]),
        cycles=cycles,
        collectives=empty(["collective", "rank", "name", "start_ns", "end_ns", "wait_ns", "transfer_ns"]),
        alignment=empty(["input", "offset_ns", "method"]),
        phase_names=list(config.names), notes=notes)


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="object") for c in columns})


def load_live(paths) -> Analysis:
    """Live timing logs (files or directories, :func:`live_paths`) -> :class:`Analysis`."""
    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    raw, metas = read_raw(paths)
    raw, set_aside = live_log.clean_rows(raw)
    frame = live_log.cycles_frame(raw)
    return live_analysis(frame, metas, paths, set_aside)


def is_live(analysis) -> bool:
    """Whether an analysis was read from a live log (by its note code)."""
    return any(getattr(n, "code", None) == N.LIVE_LOG_NO_KERNELS for n in getattr(analysis, "notes", []) or [])


__all__ = ["LIVE_PHASES", "SOURCE", "cycle_table", "is_live", "is_live_path", "live_analysis", "live_paths",
           "load_live", "ranks_table", "spec_config_text"]
