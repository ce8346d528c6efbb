"""Phase definitions: which NVTX ranges and which kernel names make up draft, verify, allreduce...

A phase is a name plus NVTX range names (optionally restricted to one domain) and/or kernel-name
glob patterns. Order matters twice: kernel patterns are tried in phase order, and where GPU ops of
several phases overlap in time the phase listed first owns the overlap (see attribution.py).

Config file (TOML or JSON), e.g. ``phases.toml``::

    [[phase]]
    name = "verify"
    ranges = ["verify", "graph_replay_verify"]
    domain = "sglang"          # optional

    [[phase]]
    name = "allreduce"
    ranges = ["allreduce"]
    kernels = ["ncclDevKernel_AllReduce*", "*cross_device_reduce_*stage*"]

On the command line: ``--phase 'moe=ranges:moe_forward;kernels:*fused_moe*'`` (repeatable; a phase
given there replaces the default of the same name, new ones are appended).

Range patterns are globs like kernel patterns (``*``, ``?``, ``[...]``; a name without them is matched
exactly) and are tried against the range's name and against ``domain:name`` as the tool prints it
(``nccl:ncclAllReduce``; ``:name`` for the default domain), so ``--phase 'comm=ranges:nccl:*'``
takes every range of domain ``nccl``. Values with a comma or a semicolon (PyTorch names its ranges
``aten::mm, seq = 12, op_id = 34``) go in double quotes, ``--phase 'mm=ranges:"aten::mm, *"'``,
or in a config file (TOML/JSON lists need no quoting).
"""
from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from nvtx_annotate import protocol

OTHER = "other"


@dataclass(frozen=True)
class Phase:
    name: str
    ranges: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    domain: str | None = None

    def kernel_regex(self) -> re.Pattern | None:
        if not self.kernels:
            return None
        return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in self.kernels), re.DOTALL)

    def range_matcher(self):
        """``matches(name, domain) -> bool`` for this phase's range patterns: a pattern is tried on
        the name and on ``domain:name`` (exactly, and as a glob when it has ``*``, ``?`` or ``[``);
        ``domain`` restricts the phase to one domain."""
        exact = frozenset(self.ranges)
        globs = [p for p in self.ranges if is_glob(p)]
        rx = re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in globs), re.DOTALL) if globs else None

        def matches(name, domain) -> bool:
            if self.domain is not None and self.domain != domain:
                return False
            name = "" if name is None else str(name)
            full = f"{'' if domain is None else domain}:{name}"
            if name in exact or full in exact:
                return True
            return rx is not None and bool(rx.fullmatch(name) or rx.fullmatch(full))
        return matches


def is_glob(pattern: str) -> bool:
    """Whether a range or kernel pattern holds glob characters (else it is an exact name)."""
    return any(c in pattern for c in "*?[")


ALLREDUCE_KERNELS = (
    "ncclDevKernel_AllReduce*", "ncclKernel_AllReduce*",
    "*cross_device_reduce_1stage*", "*cross_device_reduce_2stage*",
    "*allreduce_fusion*", "*AllReduceFusion*", "*allreduce_fusion_kernel*",
    "*oneshot_allreduce*", "*twoshot_allreduce*", "*lamport*allreduce*",
)

# the shim's ranges per phase (nvtx_annotate.protocol, the one definition shared with the shim),
# plus `draft_step` (per-step draft ranges of other instrumentations) and the all-reduce kernels
_EXTRA_RANGES = {"draft": ("draft_step",)}
_KERNELS = {"allreduce": ALLREDUCE_KERNELS}
DEFAULT_PHASES: tuple[Phase, ...] = tuple(
    Phase(name, ranges=ranges[:1] + _EXTRA_RANGES.get(name, ()) + ranges[1:], kernels=_KERNELS.get(name, ()))
    for name, ranges in protocol.PHASE_RANGES.items())

# the range that delimits one decode cycle (speculative step) in the shim's output
CYCLE_RANGES = protocol.CYCLE_RANGES


@dataclass
class PhaseConfig:
    phases: list[Phase] = field(default_factory=lambda: list(DEFAULT_PHASES))
    cycle_ranges: tuple[str, ...] = CYCLE_RANGES
    # the phases the user defined or redefined (--phase, --config): a warning when one matches nothing
    user_defined: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.phases]

    def replace(self, phase: Phase) -> None:
        if phase.name not in self.user_defined:
            self.user_defined = self.user_defined + (phase.name,)
        for i, p in enumerate(self.phases):
            if p.name == phase.name:
                self.phases[i] = phase
                return
        self.phases.append(phase)


def split_quoted(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside double or single quotes (the quotes removed; a backslash
    escapes the next character). ``'a, "b, c", d'`` -> ``['a', ' b, c', ' d']``."""
    parts, buf, quote, i = [], [], None, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            buf.append(text[i + 1])
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = None
            else:
                buf.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == sep:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    if quote:
        raise ValueError(f"unclosed {quote} quote in {text!r}")
    parts.append("".join(buf))
    return parts


def _split_keeping_quotes(text: str, sep: str) -> list[str]:
    """``text`` split at ``sep`` outside quotes, the quotes kept (for a second split inside)."""
    parts, start, quote, i = [], 0, None, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def quote_value(value: str) -> str:
    """A range or kernel name as written in a ``--phase`` value: in double quotes when it holds a
    comma, a semicolon, a quote or a backslash (:func:`split_quoted` reads it back)."""
    if not any(c in value for c in ",;\"'\\") and value == value.strip():
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_phase_option(text: str) -> Phase:
    """``name=ranges:a,b;kernels:pat*,pat2;domain:sglang``; a value holding ``,`` or ``;`` in double
    quotes: ``mm=ranges:"aten::mm, *"``."""
    if "=" not in text:
        raise ValueError(f"--phase {text!r}: expected NAME=ranges:A,B;kernels:PATTERN")
    name, spec = text.split("=", 1)
    parts: dict[str, tuple[str, ...]] = {"ranges": (), "kernels": ()}
    domain = None
    try:
        items = [s.strip() for s in _split_keeping_quotes(spec, ";")]
    except ValueError as exc:
        raise ValueError(f"--phase {text!r}: {exc}") from None
    for item in filter(None, items):
        key, _, values = item.partition(":")
        key = key.strip().lower()
        try:
            vals = tuple(v.strip() for v in split_quoted(values, ",") if v.strip())
        except ValueError as exc:
            raise ValueError(f"--phase {text!r}: {exc}") from None
        if key in ("ranges", "range", "nvtx"):
            parts["ranges"] = vals
        elif key in ("kernels", "kernel"):
            parts["kernels"] = vals
        elif key == "domain":
            domain = vals[0] if vals else None
        else:
            raise ValueError(f"--phase {text!r}: unknown key {key!r} (ranges, kernels, domain)")
    if not name.strip() or not (parts["ranges"] or parts["kernels"]):
        raise ValueError(f"--phase {text!r}: a phase needs a name and ranges or kernels")
    return Phase(name.strip(), parts["ranges"], parts["kernels"], domain)


def _phase_from_mapping(item: dict) -> Phase:
    def as_tuple(v):
        if v is None:
            return ()
        return (v,) if isinstance(v, str) else tuple(str(x) for x in v)

    if "name" not in item:
        raise ValueError("each [[phase]] needs a name")
    return Phase(str(item["name"]), as_tuple(item.get("ranges")), as_tuple(item.get("kernels")),
                 item.get("domain"))


def load_config(path: str | Path | None = None, options: list[str] | None = None,
                replace_defaults: bool = False) -> PhaseConfig:
    """Defaults, then a config file (TOML/JSON), then ``--phase`` options."""
    config = PhaseConfig(phases=[] if replace_defaults else list(DEFAULT_PHASES))
    if path is not None:
        text = Path(path).read_text()
        if str(path).endswith(".json"):
            data = json.loads(text)
        else:
            import tomllib
            data = tomllib.loads(text)
        if data.get("replace_defaults"):
            config.phases = []
        for item in data.get("phase", data.get("phases", [])):
            config.replace(_phase_from_mapping(item))
        if "cycle_ranges" in data:
            config.cycle_ranges = tuple(data["cycle_ranges"])
    for text in options or []:
        config.replace(parse_phase_option(text))
    return config


def range_phase(names, domains, config: PhaseConfig) -> list[str | None]:
    """Phase of each NVTX range (first phase in order whose patterns match its name or its
    ``domain:name``, see :meth:`Phase.range_matcher`), else None. Called once per distinct
    (name, domain) pair."""
    matchers = [(p.name, p.range_matcher()) for p in config.phases if p.ranges]
    out = []
    for name, domain in zip(names, domains):
        out.append(next((phase for phase, matches in matchers if matches(name, domain)), None))
    return out


def kernel_phase(names, config: PhaseConfig) -> list[str | None]:
    """Phase given by kernel-name patterns (first matching phase), else None. ``names`` unique."""
    regexes = [(p.name, p.kernel_regex()) for p in config.phases if p.kernels]
    out = []
    for name in names:
        found = None
        if isinstance(name, str):
            for phase_name, rx in regexes:
                if rx.fullmatch(name):
                    found = phase_name
                    break
        out.append(found)
    return out
