"""Combining reports: rank identity across files and the cross-rank tables.

A single report may hold every rank (one nsys run around the whole server); several reports may
hold one rank each. Either way the result has one row per rank in ``ranks`` and times of every
rank on one clock (see alignment.py).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analyze import opstore
from analyze.attribute.phases import PhaseConfig
from analyze.ranks import alignment
from analyze.ranks.identify import RankConflict
from analyze.run import checks
from analyze.results import TABLES, Analysis
from analyze.timeline import cycles as cycles_mod, collectives as coll_mod


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if f is not None and len(f.columns)]
    if not frames:
        return pd.DataFrame()
    non_empty = [f for f in frames if len(f)] or frames[:1]
    if len(non_empty) == 1:         # one report: no copy of its (possibly huge) table
        f = non_empty[0]
        return f if isinstance(f.index, pd.RangeIndex) and f.index.start == 0 and f.index.step == 1 \
            else f.reset_index(drop=True)
    return pd.concat(non_empty, ignore_index=True)


def renumber_ranks(results) -> None:
    """Make rank numbers unique across reports; two reports claiming one rank is an error."""
    seen: dict[int, str] = {}
    multi = len(results) > 1
    next_free = 0
    for res in results:
        mapping = {}
        for _, row in res.ranks.iterrows():
            rank = int(row["rank"])
            if multi and row["source"] == "order":
                # process order means nothing across files: take the next free number
                while next_free in seen:
                    next_free += 1
                mapping[rank] = next_free
                rank = next_free
            elif rank in seen:
                raise RankConflict(f"{res.path} and {seen[rank]} both hold rank {rank} "
                                   f"(from {row['source']}): give each rank once")
            seen[rank] = res.path
        if mapping:
            # (res.ops.index: the spilled ops' row groups, a rank each)
            for table in (res.ranks, res.gpu_ops, res.ranges, res.phases, res.kernels, res.totals,
                          res.cycles, res.collective_ops, res.ops.index if res.ops is not None else None):
                if table is not None and "rank" in table.columns:
                    table["rank"] = table["rank"].map(mapping).fillna(table["rank"]).astype(table["rank"].dtype)


def _input_column(path: str, n: int, paths: list[str]) -> pd.Categorical:
    """The report each row came from, as a categorical over every report of the analysis (millions
    of ranges: one byte per row instead of a copy of the path; concatenation keeps the dtype)."""
    return pd.Categorical.from_codes(np.full(n, paths.index(path), dtype="int16"), categories=paths)


def missing_ranks(ranks: pd.DataFrame) -> list:
    """A note naming the ranks of the TP world (the shim's rank marks say its size) that no input
    holds: a directory of some ranks' reports is analysed as what it holds, and says so."""
    from analyze.notes import MISSING_RANKS, Note

    if not len(ranks) or "world" not in ranks.columns:
        return []
    world = pd.to_numeric(ranks["world"], errors="coerce").dropna()
    if not len(world):
        return []
    size = int(world.max())
    have = set(int(r) for r in ranks["rank"])
    gone = [r for r in range(size) if r not in have]
    if not gone or size > 1_000_000:
        return []
    shown = ", ".join(map(str, gone[:16])) + (" ..." if len(gone) > 16 else "")
    return [Note(MISSING_RANKS, f"the rank marks say TP world {size}; no input holds rank{'s' if len(gone) > 1 else ''} "
                                f"{shown}: every per-rank figure is of the {len(have)} rank{'s' if len(have) > 1 else ''} "
                                "given", len(gone))]


def combine(results, config: PhaseConfig):
    for res in results:           # what each report's own tables say about its capture (checks.py)
        res.notes.extend(n for n in checks.report_notes(res) if n not in res.notes)
    renumber_ranks(results)
    paths = list(dict.fromkeys(r.path for r in results))
    offsets = alignment.align(results)
    inputs = []
    for res in results:
        off = offsets.set_index("input")["offset_ns"].get(res.path, 0)
        for info in TABLES:            # the report's clock -> the analysis' (results.TABLES says which columns)
            frame = getattr(res, info.name, None)
            if frame is None or not off:
                continue
            for c in info.time_columns + info.optional_time_columns:
                if c in frame.columns:
                    col = frame[c]
                    if c in info.optional_time_columns:      # negative: none
                        frame[c] = col.where(col < 0, col + int(off))
                    else:                      # a new column: the old may be a read-only view
                        frame[c] = col + int(off)
        res.ranks["offset_ns"] = int(off)
        if res.ops is not None:
            res.ops.offset_ns = int(off)
        inputs.append({"path": res.path, "schema_version": res.meta.get("schema_version"),
                       "nsys_version": res.meta.get("nsys_version"),
                       "cuda_graph_trace": res.meta.get("cuda_graph_trace"),
                       "utc_start_ns": res.meta.get("utc_start_ns"), "offset_ns": int(off),
                       "ranks": res.ranks["rank"].astype(int).tolist(), "notes": res.notes})
    ranks = _concat([r.ranks for r in results]).sort_values("rank").reset_index(drop=True)
    gpu_ops = _concat([r.gpu_ops.assign(input=_input_column(r.path, len(r.gpu_ops), paths)) for r in results])
    ranges = _concat([r.ranges.assign(input=_input_column(r.path, len(r.ranges), paths)) for r in results])
    phases = _concat([r.phases for r in results]).sort_values(["rank"], kind="stable").reset_index(drop=True)
    kernels = _concat([r.kernels for r in results])
    totals = _concat([r.totals for r in results]).sort_values("rank").reset_index(drop=True)
    nvtx = _concat([r.nvtx_projection.assign(input=r.path) for r in results])
    # computed per report in the map step (a rank lives in one report): only sort by rank
    cycles = _concat([r.cycles for r in results])
    if len(results) > 1 and len(cycles):
        cycles = cycles.sort_values("rank", kind="stable").reset_index(drop=True)
    if not len(cycles):
        cycles = cycles_mod.empty_table(config)
    collectives = coll_mod.collective_table_from(_concat([r.collective_ops for r in results
                                                          if r.collective_ops is not None]))
    notes = [n.about_input(r.path) if len(results) > 1 else n for r in results for n in r.notes]
    notes += missing_ranks(ranks)
    # the one op store: the per-op table of the reports analysed whole, the spilled ops of the others
    ops = opstore.combined([opstore.FrameOps(gpu_ops)] + [r.ops for r in results if r.ops is not None])
    nccl, nccl_info = _nccl_messages(results)
    return Analysis(inputs=inputs, ranks=ranks, gpu_ops=gpu_ops, ranges=ranges, phases=phases,
                    kernels=kernels, totals=totals, nvtx_projection=nvtx, cycles=cycles,
                    collectives=collectives, alignment=offsets, phase_names=config.names, notes=notes, ops=ops,
                    nccl_messages=nccl, nccl_info=nccl_info)


def _nccl_messages(results) -> tuple[pd.DataFrame | None, dict | None]:
    """The reports' sized NCCL ranges (already on the analysis' clock) with the report each came from,
    and their reads' info combined; (None, None) where no report read them (results made by hand)."""
    from analyze.read import nccl_payloads

    read = [r for r in results if r.nccl_messages is not None]
    if not read:
        return None, None
    frames = [r.nccl_messages.assign(input=r.path) for r in read if len(r.nccl_messages)]
    frame = pd.concat(frames, ignore_index=True) if frames else \
        nccl_payloads.empty_frame(input_column=True)
    return frame, nccl_payloads.combined_info([r.meta.get(nccl_payloads.INFO) for r in read], bool(frames))
