"""Guidance for traces the phase rules do not fit: which NVTX ranges hold the GPU time, and the
``--phase`` lines that would make phases of them.

A trace not made with the shim (vLLM, TensorRT-LLM, plain PyTorch) has NVTX ranges, but none of
them is named like a phase, so every GPU nanosecond lands in ``other``. :func:`range_families`
groups the ranges into families (PyTorch's ``aten::mm, seq = 12, op_id = 34`` -> ``aten::mm, *``;
numbers -> ``*``) ranked by the GPU time nsys projects onto them, each with the exact
``--phase`` option that takes it; :func:`hint_notes` turns that, and a user phase that matched
nothing, into notes (:mod:`analyze.notes` codes ``nvtx_not_phases`` and ``phase_unmatched``).
"""
from __future__ import annotations

import re
import shlex

import numpy as np
import pandas as pd

from analyze import notes as N
from analyze.attribute.phases import PhaseConfig, quote_value
from analyze.notes import Note

__all__ = ["family_pattern", "range_families", "phase_option", "hint_notes", "FAMILY_COLUMNS"]

# PyTorch's emit_nvtx / record_function attributes after the op name: ", seq = 12", ", op_id = 3",
# ", sizes = [[1, 2]]"
_ATTRIBUTES = re.compile(r"^(?P<head>[^,]+?), \w+ = .*$", re.DOTALL)
_NUMBER = re.compile(r"(?<![A-Za-z])\d+(?![A-Za-z])")     # an index, not part of a word (c10d, sm90)

SAME_WORK = 0.02     # families within 2% of each other's projected GPU time: one family's work, nested
FAMILY_COLUMNS = ["pattern", "domain", "ranges", "gpu_ops", "projected_ns", "cpu_ns", "phase_name", "option"]


def family_pattern(name: str) -> str:
    """The glob that takes every range of ``name``'s family: attributes after the op name become
    ``, *`` and every number ``*`` (``FSDP::forward (block.16)`` -> ``FSDP::forward (block.*)``);
    a name without either is itself."""
    name = "" if name is None else str(name)
    m = _ATTRIBUTES.match(name)
    head, tail = (m.group("head"), ", *") if m else (name, "")
    if not head.isdigit():
        head = _NUMBER.sub("*", head)
    return head + tail


def _phase_name(pattern: str) -> str:
    head = pattern.split(",")[0].rstrip("*")
    word = re.sub(r"\W+", "_", head).strip("_").lower()
    return (word or "phase")[:24]


def phase_option(name: str, patterns: list[str]) -> str:
    """The shell-quoted ``--phase`` option for ``patterns`` (quoted inside where they need it)."""
    return "--phase " + shlex.quote(f"{name}=ranges:" + ",".join(quote_value(p) for p in patterns))


def range_families(ranges: pd.DataFrame, top: int = 6) -> pd.DataFrame:
    """The ``top`` range families by projected GPU time (nsys' projection of each range: first to
    last GPU op launched inside it, summed over ranges), each with a suggested phase name and its
    ``--phase`` option. Columns :data:`FAMILY_COLUMNS`. The same GPU work seen through nested
    ranges (PyTorch's ``aten::to > aten::_to_copy > aten::copy_``) is listed once: a family whose
    projected time is within :data:`SAME_WORK` of one listed above is left out."""
    empty = pd.DataFrame({c: pd.Series(dtype="object") for c in FAMILY_COLUMNS})
    if ranges is None or ranges.empty:
        return empty
    name = ranges["name"].astype(object).where(ranges["name"].notna(), "")
    domain = ranges["domain"].astype(object).where(ranges["domain"].notna(), "").astype(str)
    codes, uniq = pd.factorize(name)
    fam = np.array([family_pattern(u) for u in uniq] + [""], dtype=object)[codes]
    ops = ranges["gpu_ops"].fillna(0).to_numpy(dtype="int64") if "gpu_ops" in ranges.columns \
        else np.zeros(len(ranges), dtype="int64")
    if "gpu_start_ns" in ranges.columns:
        proj = (ranges["gpu_end_ns"] - ranges["gpu_start_ns"]).fillna(0).to_numpy(dtype="int64")
        proj = np.where(ops > 0, np.maximum(proj, 0), 0)
    else:
        proj = np.zeros(len(ranges), dtype="int64")
    cpu = (ranges["end_ns"] - ranges["start_ns"]).fillna(0).to_numpy(dtype="int64")
    frame = pd.DataFrame({"pattern": fam, "domain": domain.to_numpy(), "gpu_ops": ops, "projected_ns": proj,
                          "cpu_ns": cpu})
    g = frame.groupby(["pattern", "domain"], sort=False)
    out = pd.DataFrame({"ranges": g.size(), "gpu_ops": g["gpu_ops"].sum(), "projected_ns": g["projected_ns"].sum(),
                        "cpu_ns": g["cpu_ns"].sum()}).reset_index()
    out = out[out["projected_ns"] > 0].sort_values(["projected_ns", "pattern"], ascending=[False, True],
                                                    kind="stable")
    rows, seen, names = [], [], set()
    for r in out.itertuples(index=False):
        if any(abs(int(r.projected_ns) - t) <= SAME_WORK * t for t in seen):
            continue
        seen.append(int(r.projected_ns))
        pattern = f"{r.domain}:{r.pattern}" if r.domain else r.pattern
        phase = _phase_name(r.pattern)
        while phase in names:
            phase += "_"
        names.add(phase)
        rows.append([pattern, r.domain, int(r.ranges), int(r.gpu_ops), int(r.projected_ns), int(r.cpu_ns), phase,
                     phase_option(phase, [pattern])])
        if len(rows) >= top:
            break
    return pd.DataFrame(rows, columns=FAMILY_COLUMNS) if rows else empty


def no_phase_ranges(a) -> bool:
    """Whether the analysis has NVTX ranges but none of them became a phase (and no decode cycle)."""
    ranges = a.ranges
    if ranges is None or ranges.empty or "phase" not in ranges.columns:
        return False
    if a.cycles is not None and len(a.cycles) > 0:      # before the look at every range's phase
        return False
    return bool(ranges["phase"].isna().all())


def hint_notes(a, config: PhaseConfig | None = None) -> list[Note]:
    """The notes of this module: ``nvtx_not_phases`` when NVTX ranges exist but none is a phase
    (with the top family's ``--phase`` line), ``phase_unmatched`` for every phase the user defined
    (``config.user_defined``) that matched no NVTX range and no kernel."""
    out: list[Note] = []
    if no_phase_ranges(a):
        fams = range_families(a.ranges, top=3)
        lines = "; ".join(f"{r.pattern} ({r.projected_ns / 1e6:,.3f} ms of GPU time): {r.option}"
                          for r in fams.itertuples()) if len(fams) else "none of them launched GPU work"
        out.append(Note(N.NVTX_NOT_PHASES, f"{len(a.ranges)} NVTX ranges, none of them a phase (was the trace made "
                        f"without the specprof shim?): every GPU op is `other`. Ranges with the most GPU time, and "
                        f"the option that makes a phase of each: {lines}", count=len(a.ranges)))
    if config is not None:
        for phase in config.phases:
            if phase.name not in config.user_defined:
                continue
            ranges = a.ranges
            in_ranges = ranges is not None and "phase" in ranges.columns and bool((ranges["phase"] == phase.name).any())
            ph = a.phases
            in_kernels = bool(len(ph)) and bool(ph.loc[ph["phase"] == phase.name, "kernel_ns"].fillna(0).sum() > 0)
            if not (in_ranges or in_kernels):
                what = " and no ".join(w for w, v in (("NVTX range", phase.ranges), ("kernel", phase.kernels)) if v)
                pats = ", ".join(list(phase.ranges) + list(phase.kernels))
                out.append(Note(N.PHASE_UNMATCHED, f"warning: phase {phase.name!r} matched no {what} ({pats}): "
                                "check the names (range patterns match the name or `domain:name` as this tool "
                                "prints them; globs like kernel patterns)", count=0))
    return out
