"""The shim's NVTX protocol: domain, range names, mark formats (emitting and parsing).

The one definition shared by the shim (``nvtx_annotate``), the analyzer's default phases and
accept-mark matching (``analyze.attribute.phases``, ``analyze.timeline.cycles``, ``analyze.ranks.identify``) and the synthetic
trace generator (``fixtures.synth``). Standard library only: it is imported at server start.

Ranges (NVTX push/pop in domain ``sglang``; async targets use start/end ranges):

``decode_cycle``
    One speculative decode step of a worker (``forward_batch_generation`` of a decode batch).
    Its int64 payload is ``K``, the process's decode-cycle number: 1, 2, ... counted from the
    shim's start in that process (so numbers survive a capture window that opens mid-run).
``prefill``
    A ``forward_batch_generation`` call on an extend (prefill) batch: kept apart from the decode
    cycles.
``draft``, ``verify``, ``draft_extend``, ``allreduce``, ``graph_replay_*``
    The phases inside a cycle (see :data:`PHASE_RANGES`).

Marks:

``spec_steps=S cycle=K``
    In each decode cycle of a process SGLang runs with ``--speculative-adaptive`` (its spec_config says
    ``adaptive=1``): the step count cycle K ran (the worker's ``speculative_num_steps`` as the cycle closes;
    SGLang activates it by batch size at the start of ``forward_batch_generation``).
``rank=R world=W device=D``
    Once per process when the TP group is created, again when SGLang starts profiling.
``spec_config algo=A steps=N topk=K draft_tokens=D tp=T cuda_graph=0|1 max_running=R [adaptive=0|1] [overlap=0|1] [events_every=E]``
    Once per scheduler process (after ``Scheduler.__init__``), again when SGLang starts profiling:
    SGLang's own speculative configuration, read from its ``server_args`` (``algo=none steps=0`` when
    speculation is off). ``steps`` is ``--speculative-num-steps``: the draft tokens proposed per request
    per cycle (SGLang's ``draft_forward`` runs ``steps - 1`` draft forwards; the first draft token
    comes from the draft extend of the previous cycle). The analyzer takes the profiled step count
    from it instead of inferring it from kernels. ``events_every`` (only while the shim's timing mode
    is on, nvtx_annotate/live): its CUDA events ran in one decode cycle of E (0: none), which slow the
    cycles they run in (whatif says so of a profile with E = 1).
``clock reqs=M part=P period_us=p1,...,pN tokens=t1,...,tN``
    Per batch size (the accept marks' ``M``), in parts of at most 512 cycles (``P`` = 0, 1, ..., oldest first),
    when SGLang starts profiling, again with the rank mark:
    the last decode cycles the process ran *before* profiling started (nvtx_annotate/clock.py), each
    cycle's period (its start to the next decode cycle's start, in us) and tokens (accepted draft tokens +
    ``M``). Under ``--capture-range=cudaProfilerApi`` those cycles ran attached to nsys but uncollected:
    the profile's own unprofiled clock, which whatif calibrates from.
``accept_len=N reqs=M [cycle=K] [lens=l1,...,lM]`` (int64 payload ``N``)
    The accepted *draft* tokens of one decode cycle: ``N`` summed over the ``M`` requests of the
    batch, ``lens`` per request in request order (only for ``M <= ACCEPT_LENS_MAX_REQS``). The
    bonus token is not counted: tokens produced = ``N + M`` (SGLang's ``accept_lens`` include
    it, its ``num_correct_drafts`` / ``accept_length_per_req_cpu`` do not; the mark carries the
    latter). Requests that had already finished before the cycle (the overlap scheduler runs one
    more cycle for them, and SGLang discards its tokens) are left out. ``cycle=K`` names the ``decode_cycle`` range (same process, payload ``K``) the mark
    belongs to: SGLang's v2 workers resolve accept lengths on the CPU after the cycle's range has
    closed (with the overlap scheduler after the next cycle was launched). A mark without
    ``cycle=`` belongs to the cycle range that contains it (v1 workers, older traces).
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Sequence

DOMAIN = "sglang"

# ---------------------------------------------------------------------------------- ranges
DECODE_CYCLE = "decode_cycle"
PREFILL = "prefill"
DRAFT = "draft"
DRAFT_EXTEND = "draft_extend"
VERIFY = "verify"
ALLREDUCE = "allreduce"
GRAPH_REPLAY_DRAFT = "graph_replay_draft"
GRAPH_REPLAY_DRAFT_EXTEND = "graph_replay_draft_extend"
GRAPH_REPLAY_VERIFY = "graph_replay_verify"

RANGE_NAMES = (
    DECODE_CYCLE, PREFILL, DRAFT, DRAFT_EXTEND, VERIFY, ALLREDUCE,
    GRAPH_REPLAY_DRAFT, GRAPH_REPLAY_DRAFT_EXTEND, GRAPH_REPLAY_VERIFY,
)
"""Every range name the shim emits."""

CYCLE_RANGES = (DECODE_CYCLE,)
"""The ranges that delimit one decode cycle."""

PHASE_RANGES = {
    "draft": (DRAFT, GRAPH_REPLAY_DRAFT),
    "verify": (VERIFY, GRAPH_REPLAY_VERIFY),
    "draft_extend": (DRAFT_EXTEND, GRAPH_REPLAY_DRAFT_EXTEND),
    "allreduce": (ALLREDUCE,),
    "prefill": (PREFILL,),
}
"""Phase -> the shim's ranges that feed it, in the analyzer's default phase order."""

CYCLE_ATTR = "_specprof_nvtx_cycle"
"""Attribute the shim sets on the object a decode cycle returns (SGLang's GenerationBatchResult):
the cycle number K, read back where the accept lengths are resolved."""

# ---------------------------------------------------------------------------------- marks
ACCEPT_PREFIX = "accept_len="
ACCEPT_LENS_MAX_REQS = 64
"""Per-request lengths are added to the accept mark up to this batch size (bounds the string)."""


RankMark = namedtuple("RankMark", "rank world device")
RankMark.__doc__ = "rank (int), world (int or None), device (str or None) of a rank mark."
AcceptMark = namedtuple("AcceptMark", "accepted requests cycle lens")
AcceptMark.__doc__ = ("accepted: N, the accepted draft tokens over the batch (bonus excluded); requests: M (or None); "
                      "cycle: K, the decode_cycle payload it belongs to (None: by containment); lens: per-request "
                      "accepted draft tokens in request order (None when not carried).")


RANK_MARK_RE = re.compile(r"(?:^|\s)rank=(?P<rank>\d+)(?:\s+world=(?P<world>\d+))?(?:\s+device=(?P<device>\S+))?")
LENS_PATTERN = r"\d+(?:,\d+)*"
"""The per-request accept lengths as text, ``l1,...,lM`` (an accept mark's ``lens=``, a live log's ``accept_lens``)."""
ACCEPT_MARK_RE = re.compile(
    r"accept(?:ed)?_len(?:gth)?=(?P<n>\d+)(?:\s+reqs=(?P<reqs>\d+))?(?:\s+cycle=(?P<cycle>\d+))?"
    rf"(?:\s+lens=(?P<lens>{LENS_PATTERN}))?")
_LENS_RE = re.compile(LENS_PATTERN)


def format_lens(lengths: Sequence[int]) -> str:
    """``l1,...,lM`` (:data:`LENS_PATTERN`) of per-request accept lengths."""
    return ",".join(map(str, map(int, lengths)))


def parse_lens(text, requests, accepted) -> list[int] | None:
    """The per-request accept lengths of ``text`` (:data:`LENS_PATTERN`), or None unless they are one a request
    (``requests``) summing to the cycle's ``accepted`` draft tokens (or either count is missing)."""
    if not isinstance(text, str) or not _LENS_RE.fullmatch(text):
        return None
    try:
        m, n = int(requests), int(accepted)
    except (TypeError, ValueError):       # None, NaN, pd.NA: no count to check against
        return None
    vals = [int(x) for x in text.split(",")]
    return vals if len(vals) == m and sum(vals) == n else None


def device_index(device) -> str:
    """``cuda:3`` / ``torch.device('cuda', 3)`` / ``3`` -> ``"3"``; ``cpu`` -> ``"cpu"``."""
    if isinstance(device, bool):
        return str(device)
    if isinstance(device, int):
        return str(device)
    idx = None if isinstance(device, str) else getattr(device, "index", None)
    if isinstance(idx, int):
        return str(idx)
    s = str(device)
    return s.split(":", 1)[1] if ":" in s else s


def rank_mark(rank: int, world: int, device) -> str:
    """``rank=R world=W device=D``."""
    return f"rank={int(rank)} world={int(world)} device={device_index(device)}"


MARK_INT_MAX = 2 ** 31 - 1
"""Ranks, world sizes, token and request counts above this are no real values: such a mark is ignored."""


def parse_rank_mark(text) -> RankMark | None:
    m = RANK_MARK_RE.search(text) if isinstance(text, str) else None
    if m is None:
        return None
    rank, world = int(m["rank"]), int(m["world"]) if m["world"] else None
    if rank > MARK_INT_MAX or (world is not None and world > MARK_INT_MAX):
        return None
    return RankMark(rank, world, m["device"])


def format_accept_mark(accepted: int, requests: int | None = None, cycle: int | None = None,
                       lens: Sequence[int] | None = None) -> str:
    """``accept_len=N [reqs=M] [cycle=K] [lens=...]`` from its fields."""
    text = f"{ACCEPT_PREFIX}{int(accepted)}"
    if requests is not None:
        text += f" reqs={int(requests)}"
    if cycle is not None:
        text += f" cycle={int(cycle)}"
    if lens:
        text += " lens=" + format_lens(lens)
    return text


def accept_mark(lengths: Sequence[int], cycle: int | None = None) -> tuple[str, int]:
    """(text, payload) of the mark for one cycle's per-request accepted draft tokens."""
    vals = [int(x) for x in lengths]
    n = sum(vals)
    lens = vals if 0 < len(vals) <= ACCEPT_LENS_MAX_REQS else None
    return format_accept_mark(n, len(vals), cycle, lens), n


CONFIG_PREFIX = "spec_config"
SpecConfig = namedtuple("SpecConfig", "algo steps topk draft_tokens tp cuda_graph max_running adaptive overlap "
                                      "events_every", defaults=(None, None, None))
SpecConfig.__doc__ = ("SGLang's speculative configuration of one process: algo (str, 'none' without speculation), "
                      "steps (--speculative-num-steps, 0 without), topk, draft_tokens (int or None), tp (int), "
                      "cuda_graph (bool), max_running (int or None), adaptive, overlap (bool or None); "
                      "events_every: not SGLang's but the shim's timing mode, CUDA events in one cycle of N "
                      "(0: the mode on without events; None: the mode off, or a shim before the field).")
_CONFIG_INTS = ("steps", "topk", "draft_tokens", "tp", "max_running", "events_every")
_CONFIG_BOOLS = ("cuda_graph", "adaptive", "overlap")
CONFIG_MARK_RE = re.compile(r"^spec_config(?P<body>(?:\s+[a-z_]+=[^\s=]+)+)\s*$")


def format_spec_config(cfg: SpecConfig) -> str:
    """``spec_config algo=... steps=...`` (fields that are None left out)."""
    parts = [CONFIG_PREFIX]
    for name, value in zip(SpecConfig._fields, cfg):
        if value is None:
            continue
        if name in _CONFIG_BOOLS:
            value = int(bool(value))
        parts.append(f"{name}={value}")
    return " ".join(parts)


def spec_config_from_server_args(server_args, max_running=None) -> SpecConfig:
    """SGLang's ServerArgs (any version: missing attributes are None) -> SpecConfig."""
    def get(name, default=None):
        return getattr(server_args, name, default)

    algo = get("speculative_algorithm")
    algo = "none" if algo in (None, "", "NONE", "none") else str(getattr(algo, "name", algo))
    steps = get("speculative_num_steps") if algo != "none" else 0
    running = max_running if max_running is not None else get("max_running_requests")
    overlap = get("disable_overlap_schedule")
    return SpecConfig(
        algo=algo,
        steps=int(steps) if steps is not None else None,
        topk=int(get("speculative_eagle_topk")) if algo != "none" and get("speculative_eagle_topk") is not None else None,
        draft_tokens=(int(get("speculative_num_draft_tokens"))
                      if algo != "none" and get("speculative_num_draft_tokens") is not None else None),
        tp=int(get("tp_size", 1) or 1),
        cuda_graph=not bool(get("disable_cuda_graph", False)),
        max_running=int(running) if running is not None else None,
        adaptive=bool(get("speculative_adaptive")) if get("speculative_adaptive") is not None else None,
        overlap=(not bool(overlap)) if overlap is not None else None,
    )


def parse_spec_config(text) -> SpecConfig | None:
    """The SpecConfig of a ``spec_config ...`` mark, else None (a value that does not parse: None)."""
    m = CONFIG_MARK_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    fields = dict(kv.split("=", 1) for kv in m["body"].split())
    if "algo" not in fields:
        return None
    out = {"algo": fields["algo"]}
    try:
        for name in _CONFIG_INTS:
            if name in fields:
                v = int(fields[name])
                if not 0 <= v < 2 ** 31:
                    return None
                out[name] = v
        for name in _CONFIG_BOOLS:
            if name in fields:
                if fields[name] not in ("0", "1"):
                    return None
                out[name] = fields[name] == "1"
    except ValueError:
        return None
    if out["algo"] == "none":
        out.setdefault("steps", 0)
    return SpecConfig(**{f: out.get(f) for f in SpecConfig._fields})


CLOCK_PREFIX = "clock"
ClockMark = namedtuple("ClockMark", "requests part periods_us tokens gaps_us", defaults=((),))
ClockMark.__doc__ = ("requests: M, the batch size; part: P, the part of that size's cycles (0, 1, ..., oldest first); "
                     "periods_us, tokens: per decode cycle before profiling started, its period (us) and tokens "
                     "produced (tuples of equal length); gaps_us: the round gaps before profiling started (us: from "
                     "the end of the last decode cycle with requests to the start of a round of M requests), on "
                     "part 0, empty elsewhere and in marks of shims before 2026-12-07.")
CLOCK_MARK_RE = re.compile(r"^clock reqs=(?P<reqs>\d+) part=(?P<part>\d+) period_us=(?P<p>\d+(?:,\d+)*) "
                           r"tokens=(?P<t>\d+(?:,\d+)*)(?: gap_us=(?P<g>\d+(?:,\d+)*))?\s*$")


def clock_mark(requests: int, part: int, periods_us: Sequence[int], tokens: Sequence[int],
               gaps_us: Sequence[int] = ()) -> str:
    """``clock reqs=M part=P period_us=... tokens=... [gap_us=...]`` of one part of a batch size's cycles
    (equal-length sequences; ``gap_us`` where there are round gaps)."""
    return (f"{CLOCK_PREFIX} reqs={int(requests)} part={int(part)} "
            f"period_us={','.join(map(str, map(int, periods_us)))} tokens={','.join(map(str, map(int, tokens)))}"
            + (f" gap_us={','.join(map(str, map(int, gaps_us)))}" if len(gaps_us) else ""))


def parse_clock_mark(text) -> ClockMark | None:
    """The ClockMark of a ``clock`` mark, or None (not one, lists of unequal length, a count no real run has)."""
    m = CLOCK_MARK_RE.match(text) if isinstance(text, str) else None
    if m is None or len(m["reqs"]) > 10 or len(m["part"]) > 6:
        return None
    periods = tuple(int(x) for x in m["p"].split(","))
    tokens = tuple(int(x) for x in m["t"].split(","))
    reqs = int(m["reqs"])
    gaps = tuple(int(x) for x in m["g"].split(",")) if m["g"] else ()
    if len(periods) != len(tokens) or not 0 < reqs <= MARK_INT_MAX or max(tokens) > MARK_INT_MAX \
            or max(periods) > MARK_INT_MAX or (gaps and max(gaps) > MARK_INT_MAX):
        return None
    return ClockMark(reqs, int(m["part"]), periods, tokens, gaps)


CLOCK_STOP_AT_ENV, CLOCK_MARKS_AT_ENV = "SPECPROF_CLOCK_STOP_AT_NS", "SPECPROF_CLOCK_MARKS_AT_NS"
"""Wall-clock times (``time.time_ns``) ``profile-trace --delay`` gives the profiled processes: nsys starts collecting at
a time they cannot see, after the first; the shim's clock stops at the first and its marks are written at each of the
second's (comma-separated)."""
CLOCK_STOP_PREFIX = "clock_stop"
CLOCK_STOP_RE = re.compile(r"^clock_stop ago_us=(?P<ago>\d+)\s*$")


def clock_stop_mark(ago_us: int) -> str:
    """``clock_stop ago_us=N``: the process' clock (its ``clock`` marks) stopped N us before this mark. Written with the
    clock marks where they are written later than the clock stopped (``profile-trace --delay``: the clock stops just
    before nsys starts collecting, the marks go out once it surely has), so that the decode cycles the profile holds
    between the two are not taken for cycles the clock ran under the profiler."""
    return f"{CLOCK_STOP_PREFIX} ago_us={int(ago_us)}"


def parse_clock_stop(text) -> int | None:
    """N of a ``clock_stop ago_us=N`` mark (us), or None (not one, a count no real run has)."""
    m = CLOCK_STOP_RE.match(text) if isinstance(text, str) else None
    if m is None or len(m["ago"]) > 12:
        return None
    return int(m["ago"])


STEPS_PREFIX = "spec_steps="
STEPS_MARK_RE = re.compile(r"^spec_steps=(?P<steps>\d+)(?:\s+cycle=(?P<cycle>\d+))?\s*$")
"""``spec_steps=S [cycle=K]``: the step count decode cycle K ran (emitted in each decode cycle of a process
SGLang runs with ``--speculative-adaptive``, whose step count changes at run time; the spec_config mark holds
the start value only)."""


def steps_mark(steps: int, cycle: int | None = None) -> str:
    """``spec_steps=S [cycle=K]``."""
    return f"{STEPS_PREFIX}{int(steps)}" + (f" cycle={int(cycle)}" if cycle is not None else "")


def parse_steps_mark(text) -> tuple[int, int | None] | None:
    """(steps, cycle or None) of a ``spec_steps=`` mark, or None (not one, or a number no real run has)."""
    m = STEPS_MARK_RE.match(text) if isinstance(text, str) else None
    if m is None:
        return None
    steps, cycle = int(m["steps"]), int(m["cycle"]) if m["cycle"] is not None else None
    if steps > MARK_INT_MAX or (cycle is not None and cycle > 2 ** 62):
        return None
    return steps, cycle


def parse_accept_mark(text) -> AcceptMark | None:
    m = ACCEPT_MARK_RE.search(text) if isinstance(text, str) else None
    if m is None:
        return None
    if any(m[g] is not None and len(m[g]) > 10 and int(m[g]) > MARK_INT_MAX for g in ("n", "reqs", "cycle")):
        return None
    return AcceptMark(int(m["n"]), int(m["reqs"]) if m["reqs"] is not None else None,
                      int(m["cycle"]) if m["cycle"] is not None else None,
                      tuple(int(x) for x in m["lens"].split(",")) if m["lens"] else None)
