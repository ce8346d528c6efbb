"""One measurement as diff and whatif see it (:class:`Side`): its decode cycles, kernels and phase
names, loaded from a report, a directory of per-rank reports, an Analysis or a saved ``--json``
result; and its per-cycle samples (one row per cycle)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze import opstore
from analyze.notes import Note
from analyze.attribute.attention import is_attention
from analyze.attribute.phases import OTHER
from analyze.errors import CorruptReport, MissingInput, UnsuitableInput
from analyze.notes import text_of
from analyze.timeline import cycles as cycles_mod
from nvtx_annotate.protocol import SpecConfig, parse_spec_config

@dataclass
class Side:
    """What diff and whatif need from one measurement."""

    label: str
    cycles: pd.DataFrame
    kernels: pd.DataFrame
    phase_names: list
    ranges: pd.DataFrame | None = None     # only for reports (not for JSON results)
    gpu_ops: pd.DataFrame | None = None    # the per-op rows whatif reads (:func:`whatif_ops`)
    notes: list = field(default_factory=list)
    spec_config: SpecConfig | None = None  # SGLang's speculative configuration (the shim's mark)
    live: bool = False                     # read from a live timing log (run/live.py): no kernels, no ranges
    pids: tuple = ()                       # the process ids of its ranks (a report's ranks table)
    clock: tuple = ()                      # the lowest rank's ``clock`` marks (ClockMark): its cycles before the window
    clock_at_ns: int | None = None         # when that rank's clock stopped (its clock_stop mark) or wrote its first mark
    clock_rank: int | None = None          # that rank
    run: str = ""                          # the measurement the side was cut from (split_by_steps); "": its label


def spec_config_of(ranks) -> SpecConfig | None:
    """The speculative configuration the ranks' ``spec_config`` marks record (the lowest rank's
    that parses), else None."""
    if ranks is None or not len(ranks) or "spec_config" not in ranks.columns:
        return None
    for text in ranks.sort_values("rank")["spec_config"].tolist():
        cfg = parse_spec_config(text)
        if cfg is not None:
            return cfg
    return None


def clock_of(ranks) -> dict:
    """The :class:`Side` fields of the ``clock`` marks (nvtx_annotate/clock.py) of the lowest rank that has them:
    ``clock`` (the marks), ``clock_at_ns`` (when its clock stopped, :func:`analyze.ranks.identify.clock_marks`, on the
    analysis' clock: the report's offset added) and ``clock_rank``; {} without."""
    if ranks is None or not len(ranks) or "clock" not in ranks.columns:
        return {}
    for _, row in ranks.sort_values("rank").iterrows():
        marks = row["clock"]
        if isinstance(marks, tuple) and marks:
            at = row.get("clock_at_ns")
            at = None if at is None or pd.isna(at) else int(at) + int(row.get("offset_ns", 0) or 0)
            return {"clock": marks, "clock_at_ns": at, "clock_rank": int(row["rank"])}
    return {}


def clock_unprofiled(side: "Side") -> bool:
    """Did the side's clock cycles run outside the profile? False where the profile holds decode cycles of that
    process that started before the clock was written (nsys collected before SGLang's profiler started:
    ``--capture all``, a manual ``/start_profile``): those cycles ran under the profiler."""
    c = side.cycles
    if side.clock_at_ns is None or c is None or not len(c) or "cpu_start_ns" not in c.columns:
        return True
    rank = side.clock_rank if side.clock_rank is not None else c["rank"].min()
    start = pd.to_numeric(c.loc[c["rank"] == rank, "cpu_start_ns"], errors="coerce").dropna()
    return not (len(start) and start.min() < side.clock_at_ns)


def clock_cycles(clock: tuple) -> pd.DataFrame:
    """The clock marks' cycles as a cycle table (rank 0, cycle, period_ns, requests, tokens), a batch size's
    cycles in their order, for :func:`live_tokens_per_s` (the one steady-cycle rule)."""
    rows = [(m.requests, p * 1000, t) for m in sorted(clock, key=lambda m: (m.requests, m.part))
            for p, t in zip(m.periods_us, m.tokens)]
    frame = pd.DataFrame(rows, columns=["requests", "period_ns", "tokens"], dtype="int64")
    return frame.assign(rank=0, cycle=np.arange(1, len(frame) + 1, dtype="int64"))


def clock_tokens_per_s(side: "Side", batch: int) -> dict | None:
    """Tokens/s of the side's cycles before its capture window (its ``clock`` marks) at ``batch`` requests, over
    their steady cycles: sum(tokens) / sum(period_ns). None without such cycles. Returns
    :func:`live_tokens_per_s`'s dict with ``batch`` set."""
    c = clock_cycles([m for m in side.clock if m.requests == int(batch)])
    return live_tokens_per_s(c, batch=int(batch)) if len(c) else None


def clock_round_gap_ns(side: "Side", batch: int) -> dict | None:
    """The round gap before the capture window at ``batch`` requests (the ``gap_us`` of the side's ``clock`` marks,
    nvtx_annotate/clock.py: from the end of the last decode cycle with requests to the start of a round of ``batch``
    requests, without the profiler): ``{"round_gap_ns": median, "round_gaps": count}``, None without one (no gap
    at that batch size, or marks of a shim before 2026-12-07)."""
    gaps = [g for m in side.clock if m.requests == int(batch) for g in m.gaps_us]
    if not gaps:
        return None
    return {"round_gap_ns": float(np.median(gaps)) * 1000.0, "round_gaps": len(gaps)}


WHATIF_COLUMNS = ["kind", "rank", "cycle_range", "phase", "name", "start_ns", "end_ns"]
"""The op columns whatif reads."""


def whatif_rows(ops: pd.DataFrame) -> np.ndarray:
    """Which ops (of one rank, launched inside cycle ranges, in start order) whatif reads: the draft
    phase's (its step period, its attention), the attention kernels of verify and draft_extend
    (whatif/attention.py) and each cycle range's first op (its GPU window start; a range cut by a
    chunk boundary gives one more, later, whose start is not the least)."""
    phase = ops["phase"].to_numpy()
    keep = phase == "draft"
    extend_like = np.isin(phase, ("verify", "draft_extend"))
    if extend_like.any():
        keep[extend_like] |= is_attention(ops["name"].to_numpy()[extend_like])
    keep |= ~pd.Series(ops["cycle_range"].to_numpy()).duplicated().to_numpy()    # hashing, no sort
    return keep


def whatif_ops(result) -> pd.DataFrame | None:
    """The GPU ops whatif reads, from the analysis' op store (whichever way its reports were
    analysed): those of the lowest rank with decode cycles launched inside cycle ranges, of them
    :func:`whatif_rows`' (in start order). None without cycles."""
    cyc = getattr(result, "cycles", None)
    # the rank whatif models: the lowest of the cycles with GPU data (the cycles its Side holds)
    cyc = cycles_mod.with_gpu(cyc) if cyc is not None else None
    if cyc is None or not len(cyc):
        return None
    return opstore.of(result).query(WHATIF_COLUMNS, ranks=[int(cyc["rank"].min())], in_cycles=True,
                                    where=whatif_rows)


def side_from_analysis(result, label: str = "") -> Side:
    kernels, notes = result.kernels, [text_of(n) for n in result.notes]
    store = opstore.of(result)
    if len(result.cycles) and len(store) and (store.frame is None or "cycle_range" in store.frame.columns):
        # the kernels inside decode cycles (views.kernels: the one definition), whole or chunked
        from analyze.views.kernels import cycle_kernels_of_store

        kernels = cycle_kernels_of_store(store)
    from analyze.run.live import is_live

    live = is_live(result)
    if live:
        notes.append(f"{label or 'this input'}: a live timing log: kernel tables absent (no kernels, no NVTX ranges); "
                     "phase times from CUDA events, periods from the host clock")
    ranks = getattr(result, "ranks", None)
    pids = tuple(sorted(int(x) for x in ranks["pid"].dropna().unique())) \
        if ranks is not None and "pid" in getattr(ranks, "columns", []) else ()
    return Side(label, cycles_mod.with_flags(cycles_mod.with_gpu(result.cycles)), kernels, list(result.phase_names), result.ranges,
                whatif_ops(result), notes, spec_config_of(ranks), live=live, pids=pids,
                **clock_of(ranks))


def side_from_json(data: dict, label: str = "") -> Side:
    if "cycles" not in data or "kernels" not in data:
        raise ValueError(f"{label}: not an `analyze-trace --json` result (no cycles/kernels tables)")
    cycles = pd.DataFrame(data["cycles"])
    for c in ("accepted_tokens", "requests", "tokens"):
        if c in cycles.columns:
            cycles[c] = pd.to_numeric(cycles[c], errors="coerce").astype("Int64")
    ranks = pd.DataFrame(data.get("ranks") or [])
    in_cycles = pd.DataFrame(data.get("cycle_kernels") or [])
    notes = [text_of(n) for n in data.get("notes") or []]
    if len(in_cycles):            # results written since the table exists: the kernels inside decode cycles
        kernels = in_cycles
    else:
        kernels = pd.DataFrame(data["kernels"])
        if len(cycles):
            notes.append(f"{label}: a JSON result without the cycle_kernels table (older, or analysed in chunks): "
                         "kernel lists count every op of the report (set-up included), not only those inside "
                         "decode cycles")
    from analyze.notes import LIVE_LOG_NO_KERNELS

    live = any(isinstance(n, dict) and n.get("code") == LIVE_LOG_NO_KERNELS for n in data.get("notes") or [])
    return Side(label, cycles_mod.with_flags(cycles_mod.with_gpu(cycles)), kernels, list(data.get("phase_names") or []),
                notes=notes,
                spec_config=spec_config_of(ranks if "rank" in ranks.columns else None), live=live)


def load_side(path, config=None) -> Side:
    """A report, a directory of reports, or a ``--json`` result (``.json``)."""
    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".json":
        try:
            text = p.read_text()
        except OSError as exc:
            raise MissingInput(f"{p}: cannot read JSON result: {exc}", p) from exc
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise CorruptReport(f"{p}: not valid JSON (truncated?): {exc}", p) from exc
        try:
            return side_from_json(data if isinstance(data, dict) else {}, str(p))
        except ValueError as exc:
            raise UnsuitableInput(str(exc), p) from exc
    from analyze.run import api

    from analyze.errors import MixedInputs

    try:
        # the path as given (str(Path("")) is ".": read/inputs.find_reports refuses the empty one)
        return side_from_analysis(api.load(os.fspath(path), config), str(p))
    except MixedInputs as exc:
        if not p.is_dir() or exc.reason is None:
            raise
        # whatif and diff take no --allow-mixed: separate runs are separate sides, each its own argument
        raise MixedInputs(f"{p}: {exc.reason}: a directory is read as one run; give each run as its own argument (its "
                          "report, or a directory of its ranks' reports)", exc.path, reason=exc.reason) from exc


def as_side(x, label: str = "") -> Side:
    if isinstance(x, Side):
        return x
    if isinstance(x, dict):
        return side_from_json(x, label)
    if hasattr(x, "cycles") and hasattr(x, "kernels"):
        return side_from_analysis(x, label)
    return load_side(x)


def time_column(cycles: pd.DataFrame) -> str:
    """The cycle's wall time: its period (start to next start on the host) when the table has it."""
    return "period_ns" if "period_ns" in cycles.columns else "duration_ns"


def figures(cycles: pd.DataFrame, phase_names: list) -> list[str]:
    cols = [time_column(cycles)] + [f"{p}_ns" for p in list(phase_names) + [OTHER]] + ["gap_ns"]
    return [c for c in dict.fromkeys(cols) if c in cycles.columns]


def per_cycle(cycles: pd.DataFrame, phase_names: list, rank=None) -> pd.DataFrame:
    """One row per cycle: the figures of one rank, or (rank=None) the mean over ranks per cycle index;
    tokens from the lowest rank that recorded accept marks."""
    cols = figures(cycles, phase_names)
    if rank is not None:
        c = cycles[cycles["rank"] == rank].set_index("cycle")
        out = c[cols].astype("float64")
    else:
        out = cycles.groupby("cycle")[cols].mean()
    if "timed" in cycles.columns:          # a sampled live log: split known only where every rank timed the cycle
        flag = pd.Series(cycles_mod.timed(cycles), index=cycles.index)
        keep = flag if rank is None else flag[cycles["rank"] == rank]
        out["timed"] = keep.groupby(cycles.loc[keep.index, "cycle"]).all().reindex(out.index).fillna(True).astype(bool)
    tok = cycles[cycles["tokens"].notna()] if "tokens" in cycles.columns else cycles.iloc[0:0]
    if len(tok):
        src = tok[tok["rank"] == (rank if rank is not None else tok["rank"].min())].set_index("cycle")
        out["tokens"] = src["tokens"].astype("float64").reindex(out.index)
    else:
        out["tokens"] = np.nan
    return out.reset_index()


# ------------------------------------------------------------------------------- live timing logs
def live_tokens_per_s(cycles: pd.DataFrame, steps: int | None = None, batch: int | None = None) -> dict | None:
    """Tokens/s measured by a live timing log (run/live.py): over the cycles of ``steps`` draft steps
    (the log's ``steps`` column; all when None) and ``batch`` requests (all when None), their steady
    cycles (:func:`analyze.timeline.cycles.steady`, as whatif takes them), of the lowest rank with
    tokens: sum(tokens) / sum(period_ns). None when no such cycle. Returns {tokens_per_s, cycles,
    rank, tokens, period_ns, steps, batch}."""
    c = cycles
    if c is None or not len(c):
        return None
    if steps is not None:
        if "steps" not in c.columns:
            return None
        c = c[pd.to_numeric(c["steps"], errors="coerce") == int(steps)]
    if batch is not None:
        c = c[pd.to_numeric(c["requests"], errors="coerce") == int(batch)]
    c = cycles_mod.steady(c, every_rank=True)
    if c is None or not len(c):
        return None
    c = c[c["tokens"].notna() & c["period_ns"].notna()]
    if not len(c):
        return None
    rank = int(c["rank"].min())
    c = c[c["rank"] == rank]
    tokens = float(pd.to_numeric(c["tokens"]).sum())
    period = float(pd.to_numeric(c["period_ns"]).sum())
    if not period > 0:
        return None
    return {"tokens_per_s": tokens * 1e9 / period, "cycles": int(len(c)), "rank": rank, "tokens": tokens,
            "period_ns": period, "steps": steps, "batch": batch}


def live_step_counts(cycles: pd.DataFrame) -> list[int]:
    """The draft step counts a live log's cycles ran at (its ``steps`` column), ascending."""
    if cycles is None or not len(cycles) or "steps" not in cycles.columns:
        return []
    return sorted(int(x) for x in pd.to_numeric(cycles["steps"], errors="coerce").dropna().unique())


def marked_steps(side: Side) -> pd.Series | None:
    """Per cycle of an nsys profile whose shim marked each cycle's step count (``spec_steps=S cycle=K``:
    SGLang's --speculative-adaptive), that count, unmarked cycles taking the process's spec_config value;
    None where no cycle is marked (or the side is a live log: its own ``steps`` column)."""
    if side.live or side.cycles is None or "steps" not in side.cycles.columns:
        return None
    steps = pd.to_numeric(side.cycles["steps"], errors="coerce")
    if steps.isna().all():
        return None
    start = side.spec_config.steps if side.spec_config is not None else None
    return steps.fillna(start) if start is not None else steps


def cut_by_steps(side: Side, batch: int | None, min_cycles: int,
                 parts: list[Side] | None = None) -> tuple[list[Side], list, list]:
    """:func:`split_by_steps` for a model of ``batch`` (None: every batch size): (the parts to model, the
    step counts left out because none of their cycles at ``batch`` carries phase times, those left out
    because they ran fewer than ``min_cycles`` cycles at ``batch`` where another ran more; each
    [(label, steps, cycles)]). SGLang picks the step count by batch size: a step count none of whose cycles
    ran ``batch`` says nothing of it (the first part is kept where none ran it, for the one error line that
    names the batch sizes seen); a sampled log's step count that ran it only in untimed cycles (SGLang's
    start value before its first switch) has no phase times there; a step count run in a handful of cycles
    (around a switch) gives a cost fit nothing but its noise and its moment in the requests' context.
    ``parts``: ``split_by_steps(side)`` where the caller cuts one side for several batch sizes (split once)."""
    from analyze.timeline.cycles import timed

    parts, untimed, few = (split_by_steps(side) if parts is None else parts), [], []
    if len(parts) < 2:
        return parts, untimed, few

    def at(p):
        req = pd.to_numeric(p.cycles["requests"], errors="coerce") if "requests" in p.cycles.columns else None
        if batch is None:
            return np.ones(len(p.cycles), dtype=bool)
        return (req == batch).to_numpy(dtype=bool) if req is not None else np.zeros(len(p.cycles), dtype=bool)

    def cycles_of(i, mask):       # cycles, not rows: one rank's (every TP rank logs each cycle)
        c = parts[i].cycles
        low = (c["rank"] == c["rank"].min()).to_numpy(dtype=bool) if "rank" in c.columns and len(c) else True
        return int((mask & low).sum())

    at_b = [at(p) for p in parts]
    has = [i for i, b in enumerate(at_b) if b.any()]
    with_times = [i for i in has if (at_b[i] & timed(parts[i].cycles)).any()]
    if with_times and len(with_times) < len(has):
        untimed = [(side.label, int(parts[i].spec_config.steps), cycles_of(i, at_b[i])) for i in has
                   if i not in with_times]
        has = with_times
    keep = has or [0]
    if len(keep) > 1:
        n_at = {i: cycles_of(i, at_b[i]) for i in keep}
        if max(n_at.values()) >= min_cycles:
            few = [(side.label, int(parts[i].spec_config.steps), n) for i, n in n_at.items() if n < min_cycles]
            keep = [i for i in keep if n_at[i] >= min_cycles]
    return [parts[i] for i in keep], untimed, few


def split_by_steps(side: Side) -> list[Side]:
    """A side cut into one side per step count its cycles ran at (a live log of several processes or of
    SGLang's --speculative-adaptive; an nsys profile whose shim marked each cycle's step count), each with
    that step count in its spec_config: what whatif fits from several profiles. The side itself when it
    holds one step count."""
    marked = marked_steps(side)
    if marked is not None:
        side = Side(side.label, side.cycles.assign(steps=marked.astype("Int64")), side.kernels, side.phase_names,
                    side.ranges, side.gpu_ops, list(side.notes), side.spec_config, live=False, pids=side.pids)
    ks = live_step_counts(side.cycles) if side.live or marked is not None else []
    steps = pd.to_numeric(side.cycles["steps"], errors="coerce") if ks else None
    if 0 in ks:
        # SGLang's adaptive mode at 0 steps verifies one token a request with the speculative machinery
        # (not speculation off: no baseline) and drafts nothing: no draft step to model; left out, said once
        zero = int((steps == 0).sum())
        ks = [k for k in ks if k > 0]
        if not ks:
            return [side]
        note = Note(N.LIVE_LOG_ZERO_STEPS, "cycles at 0 draft steps (SGLang's adaptive mode: one token verified "
                    "a request, no draft; not speculation off) left out of the model", zero)
        kept = side.cycles[steps > 0].reset_index(drop=True)
        cfg = side.spec_config._replace(steps=ks[0]) if side.spec_config is not None and len(ks) == 1 \
            else side.spec_config
        side = Side(side.label, kept, side.kernels, side.phase_names, side.ranges, side.gpu_ops,
                    list(side.notes) + [note], cfg, live=side.live, pids=side.pids)
        steps = pd.to_numeric(side.cycles["steps"], errors="coerce")
    if len(ks) < 2:
        if len(ks) == 1 and side.spec_config is not None and side.spec_config.steps != ks[0]:
            side = replace(side, spec_config=side.spec_config._replace(steps=ks[0]))
        return [side]
    out = []
    for i, k in enumerate(ks):
        cfg = side.spec_config._replace(steps=k) if side.spec_config is not None else None
        # the side's notes once (on the first part), not once a step count
        out.append(Side(f"{side.label} [{k} steps]", side.cycles[steps == k].reset_index(drop=True), side.kernels,
                        side.phase_names, side.ranges, side.gpu_ops, list(side.notes) if i == 0 else [], cfg,
                        live=side.live, pids=side.pids, run=side.run or side.label or "(unlabelled)"))
    return out
