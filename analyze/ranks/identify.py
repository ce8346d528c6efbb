"""Which process is which tensor-parallel rank.

Sources, in order of trust: the shim's mark ``rank=R world=W device=D``; NCCL's own NVTX
(``ncclCommInitRank`` ranges / payload text naming a rank); the process's CUDA device when every
process has its own; else the order of process ids. The chosen source is kept per rank.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyze.codes import factorize_objects
from analyze.errors import RankConflict
from nvtx_annotate.protocol import CONFIG_MARK_RE  # the shim's `spec_config algo=... steps=N ...`
from nvtx_annotate.protocol import RANK_MARK_RE as RANK_MARK  # the shim's `rank=R world=W device=D`
from nvtx_annotate.protocol import CLOCK_PREFIX, CLOCK_STOP_PREFIX, parse_clock_mark, parse_clock_stop, parse_rank_mark

NCCL_RANK = re.compile(r"\brank[\s=:]+(\d+)", re.IGNORECASE)


def _first_match(pid: np.ndarray, text: np.ndarray, pattern: re.Pattern) -> dict[int, re.Match]:
    """Per process, the match of ``pattern`` in the first of its texts (in row order) that matches.
    The pattern runs once per distinct text (marks and ranges repeat a few texts millions of times)."""
    if not len(text):
        return {}
    codes, uniq = factorize_objects(np.asarray(text, dtype=object), use_na_sentinel=False)
    matches = [pattern.search(str(t)) for t in uniq]
    ok = np.array([m is not None for m in matches], dtype=bool)
    rows = np.flatnonzero(ok[codes])
    if not len(rows):
        return {}
    first_pid, first_at = np.unique(np.asarray(pid, dtype="int64")[rows], return_index=True)
    return {int(p): matches[codes[rows[i]]] for p, i in zip(first_pid.tolist(), first_at.tolist())}


def _marked_ranks(marks: pd.DataFrame) -> dict[int, tuple[int, int | None]]:
    found = _first_match(marks["global_pid"].to_numpy(), marks["text"].to_numpy(dtype=object), RANK_MARK)
    out = {}
    for p, m in found.items():
        parsed = parse_rank_mark(m.group(0))
        if parsed is not None:          # a rank or world no real run has (2**31 and more): no mark
            out[p] = (parsed.rank, parsed.world)
    return out


def spec_configs(marks: pd.DataFrame) -> dict[int, str]:
    """Per process, the text of its first ``spec_config`` mark (SGLang's speculative configuration,
    recorded by the shim from the scheduler's ``server_args``)."""
    if marks.empty:
        return {}
    found = _first_match(marks["global_pid"].to_numpy(), marks["text"].to_numpy(dtype=object), CONFIG_MARK_RE)
    return {p: m.group(0) for p, m in found.items()}


def clock_marks(marks: pd.DataFrame) -> dict[int, tuple]:
    """Per process, ``(marks, at_ns)``: its ``clock`` marks parsed (nvtx_annotate/clock.py: the decode cycles it
    ran before profiling started, in parts a batch size; the shim writes them again with each rank mark: each
    distinct text once), in mark order, and when its clock stopped (on the report's clock): the earliest of its
    ``clock_stop`` marks' times less their ``ago_us`` where it wrote any (``profile-trace --delay``: the marks come
    after the clock stopped), else the first clock mark's time; processes without a clock mark left out."""
    if marks.empty:
        return {}
    text = marks["text"].to_numpy(dtype=object)
    codes, uniq = factorize_objects(text, use_na_sentinel=False)
    parsed = [parse_clock_mark(t) if isinstance(t, str) and t.startswith(CLOCK_PREFIX) else None for t in uniq]
    stops = [parse_clock_stop(t) if isinstance(t, str) and t.startswith(CLOCK_STOP_PREFIX) else None for t in uniq]
    hit = np.array([c is not None for c in parsed], dtype=bool)
    rows = np.flatnonzero(hit[codes]) if len(codes) else np.zeros(0, dtype="int64")
    out: dict[int, dict] = {}
    first: dict[int, int] = {}
    times = marks["time_ns"].to_numpy()[rows].tolist() if "time_ns" in marks.columns else [None] * len(rows)
    for pid, code, t in zip(marks["global_pid"].to_numpy()[rows].tolist(), codes[rows].tolist(), times):
        out.setdefault(int(pid), {}).setdefault(code, parsed[code])
        if t is not None and (int(pid) not in first or int(t) < first[int(pid)]):
            first[int(pid)] = int(t)
    stopped: dict[int, int] = {}
    is_stop = np.array([a is not None for a in stops], dtype=bool)
    srows = np.flatnonzero(is_stop[codes]) if len(codes) and "time_ns" in marks.columns else np.zeros(0, dtype="int64")
    for pid, code, t in zip(marks["global_pid"].to_numpy()[srows].tolist(), codes[srows].tolist(),
                            marks["time_ns"].to_numpy()[srows].tolist() if len(srows) else []):
        at = int(t) - 1000 * stops[code]
        stopped[int(pid)] = min(at, stopped.get(int(pid), at))
    return {p: (tuple(d.values()), stopped.get(p, first.get(p))) for p, d in out.items()}


def _nccl_ranks(ranges: pd.DataFrame, marks: pd.DataFrame) -> dict[int, int]:
    found: dict[int, int] = {}
    for frame, col in ((ranges, "name"), (marks, "text")):
        if frame.empty:
            continue
        dcodes, domains = factorize_objects(np.asarray(frame["domain"].to_numpy(dtype=object)),
                                            use_na_sentinel=False)
        nccl_domain = np.array([str(d).upper().startswith("NCCL") for d in domains], dtype=bool)
        sel = np.flatnonzero(nccl_domain[dcodes]) if len(dcodes) else np.zeros(0, dtype="int64")
        for p, m in _first_match(frame["global_pid"].to_numpy()[sel], frame[col].to_numpy(dtype=object)[sel],
                                 NCCL_RANK).items():
            found.setdefault(p, int(m.group(1)))
    return found


def identify_ranks(gpu_ops: pd.DataFrame, marks: pd.DataFrame, ranges: pd.DataFrame,
                   processes: pd.DataFrame, path: str) -> pd.DataFrame:
    """One row per process that launched GPU work: rank, pid, global_pid, device_ids, source, world,
    input, spec_config (the text of the process' ``spec_config`` mark, None without one), clock and clock_at_ns
    (its ``clock`` marks parsed and when its clock stopped, :func:`clock_marks`; None without: not written columns)."""
    cols = ["rank", "pid", "global_pid", "device_ids", "source", "world", "input", "spec_config", "clock",
            "clock_at_ns"]
    if gpu_ops.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    pairs = gpu_ops[["global_pid", "device_id"]].drop_duplicates()
    devices = pairs.groupby("global_pid")["device_id"].agg(lambda s: sorted(set(int(x) for x in s)))
    pids = sorted(int(p) for p in devices.index)
    marked = _marked_ranks(marks)
    nccl = _nccl_ranks(ranges, marks)
    configs = spec_configs(marks)
    clocks = clock_marks(marks)
    pid_of = dict(zip(processes["global_pid"].tolist(), processes["pid"].tolist())) if len(processes) else {}
    distinct_devices = len({tuple(devices[p]) for p in pids}) == len(pids) and all(len(devices[p]) == 1 for p in pids)

    rows = []
    for p in pids:
        if p in marked:
            rank, world, source = marked[p][0], marked[p][1], "mark"
        elif p in nccl:
            rank, world, source = nccl[p], None, "nccl"
        elif distinct_devices and len(pids) > 1:
            rank, world, source = devices[p][0], None, "device"
        else:
            rank, world, source = None, None, "order"
        pid = pid_of.get(p, (p >> 24) & 0xFFFFFF)
        clock, clock_at = clocks.get(p, (None, None))
        rows.append([rank, int(pid), p, ",".join(map(str, devices[p])), source, world, path, configs.get(p),
                     clock, clock_at])
    frame = pd.DataFrame(rows, columns=cols)
    taken = set(int(r) for r in frame["rank"].dropna())
    next_free = 0
    for i in frame.index[frame["rank"].isna()]:
        while next_free in taken:
            next_free += 1
        frame.at[i, "rank"] = next_free
        taken.add(next_free)
    frame["rank"] = frame["rank"].astype("int64")
    dup = frame[frame["rank"].duplicated(keep=False)]
    if len(dup):
        raise RankConflict(f"{path}: processes {', '.join(map(str, dup['pid']))} all claim rank "
                           f"{int(dup['rank'].iloc[0])} ({dup['source'].iloc[0]})")
    return frame.sort_values("rank").reset_index(drop=True)
