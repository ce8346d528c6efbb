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

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.phases]

    def replace(self, phase: Phase) -> None:
        for i, p in enumerate(self.phases):
            if p.name == phase.name:
                self.phases[i] = phase
                return
        self.phases.append(phase)


def parse_phase_option(text: str) -> Phase:
    """``name=ranges:a,b;kernels:pat*,pat2;domain:sglang``"""
    if "=" not in text:
        raise ValueError(f"--phase {text!r}: expected NAME=ranges:A,B;kernels:PATTERN")
    name, spec = text.split("=", 1)
    parts: dict[str, tuple[str, ...]] = {"ranges": (), "kernels": ()}
    domain = None
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        key, _, values = item.partition(":")
        key = key.strip().lower()
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
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
    """Phase of each NVTX range (by name, and domain where the phase names one), else None."""
    lookup: dict[str, list[Phase]] = {}
    for phase in config.phases:
        for r in phase.ranges:
            lookup.setdefault(r, []).append(phase)
    out = []
    for name, domain in zip(names, domains):
        found = None
        for phase in lookup.get(name, ()):
            if phase.domain is None or phase.domain == domain:
                found = phase.name
                break
        out.append(found)
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
