"""Findings: what ``analyze-trace advise`` says could be changed, as structured data.

A :class:`Finding` is one rule's conclusion about one trace: a stable ``rule`` id that code may test
(:data:`RULES`), the cycle time it could save (``saving_ns``, per decode cycle: what findings are
ranked by, estimated as ``basis`` says), the ceiling of the gain (``ceiling_ns``: Amdahl, the cycle if
that component were free or at its best observed value), the mean cycle both are measured against,
the ``evidence`` (figures read from the trace; keys carry their units: ``_ns``, ``_share``,
``_bytes``, ``_count``), a ``suggestion`` for people and the concrete ``settings`` to try (environment
variables and server flags, each a string). Renderers format findings; nothing parses their text.
A :class:`RuleCheck` records that a rule ran and why it found nothing (or could not run).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

VERIFY_DOMINATED = "verify_dominated"
ALLREDUCE = "allreduce"
HOST_BOUND = "host_bound"
STRAGGLER = "straggler"
DRAFT_EXTEND = "draft_extend"
SPECULATION = "speculation"
ADAPTIVE_STEPS = "adaptive_steps"
DRAFT_STEPS = "draft_steps"

RULES = (VERIFY_DOMINATED, ALLREDUCE, HOST_BOUND, STRAGGLER, DRAFT_EXTEND, SPECULATION, ADAPTIVE_STEPS, DRAFT_STEPS)

# why a rule produced no finding
BELOW_THRESHOLD = "below_threshold"
NOT_APPLICABLE = "not_applicable"
NO_DATA = "no_data"
TRIGGERED = "triggered"
STATUSES = (TRIGGERED, BELOW_THRESHOLD, NOT_APPLICABLE, NO_DATA)


def _plain(value):
    """JSON-ready: NumPy scalars to Python, NaN to None, tuples to lists, recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (TypeError, ValueError):
            return value
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


SET, REMOVE, COMPARE, CHECK = "set", "remove", "compare", "check"
ACTIONS = (SET, REMOVE, COMPARE, CHECK)


@dataclass(frozen=True)
class Setting:
    """One thing to try: ``set`` an environment variable or flag (``value``), ``remove`` a flag if the
    server runs with it, ``compare`` against a configuration, or ``check`` something outside the trace."""

    action: str
    name: str
    value: str | None = None
    note: str = ""

    def __post_init__(self):
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")

    def __str__(self) -> str:
        return self.short() + (f" [{self.note}]" if self.note else "")

    def short(self) -> str:
        """The setting without its note."""
        what = self.name if self.value is None else (f"{self.name}={self.value}" if not self.name.startswith("-")
                                                     else f"{self.name} {self.value}")
        return {SET: what, REMOVE: f"remove {what} (if set)", COMPARE: f"compare with {what}",
                CHECK: f"check {what}"}[self.action]


@dataclass(frozen=True)
class Finding:
    rule: str
    title: str
    saving_ns: float
    ceiling_ns: float
    cycle_ns: float
    basis: str
    suggestion: str
    evidence: dict = field(default_factory=dict)
    settings: tuple = ()
    rank: int | None = None
    phase: str | None = None

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"unknown rule {self.rule!r}")

    @property
    def saving_share(self) -> float:
        """saving_ns as a share of the cycle."""
        return self.saving_ns / self.cycle_ns if self.cycle_ns else 0.0

    @property
    def speedup_ceiling(self) -> float:
        """Amdahl: cycle / (cycle - ceiling), the most the cycle could speed up from this finding."""
        rest = self.cycle_ns - self.ceiling_ns
        return self.cycle_ns / rest if rest > 0 else math.inf

    def setting_names(self) -> list[str]:
        return [x.name for x in self.settings]

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["settings"] = [dict(dataclasses.asdict(x), text=str(x)) for x in self.settings]
        d["saving_share"] = self.saving_share
        d["speedup_ceiling"] = None if math.isinf(self.speedup_ceiling) else self.speedup_ceiling
        return _plain(d)


@dataclass(frozen=True)
class RuleCheck:
    rule: str
    status: str
    reason: str
    figures: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.rule not in RULES or self.status not in STATUSES:
            raise ValueError(f"unknown rule or status {self.rule!r}, {self.status!r}")

    def to_dict(self) -> dict:
        return _plain(dataclasses.asdict(self))


def ranked(findings) -> list[Finding]:
    """The largest saving as a share of its cycle first (then the larger ceiling's share, then rule order). Every
    finding's cycle is the analysis' mean cycle but the host-bound one calibrated at a batch size (its unprofiled
    cycle there, advise/model.py ``unprofiled_idle``): shares compare where nanoseconds of two cycles would not."""
    return sorted(findings, key=lambda f: (-f.saving_share, -(f.ceiling_ns / f.cycle_ns if f.cycle_ns else 0.0),
                                           RULES.index(f.rule)))


@dataclass
class Advice:
    """All findings of one analysis (ranked) and what every rule checked."""

    findings: list
    checks: list
    cycle_ns: float
    cycles: int
    ranks: int
    warmup_cycles: int = 0
    whatif: dict | None = None
    whatif_error: str | None = None
    cycles_batch: int | None = None       # the cycle figures are of this batch size alone (--batch M), else all
    live: bool = False                    # of a live timing log (host periods only: no GPU-start cycle to compare)

    def rules_triggered(self) -> list[str]:
        return [f.rule for f in self.findings]

    def to_dict(self) -> dict:
        return _plain({"cycle_ns": self.cycle_ns, "cycles": self.cycles, "ranks": self.ranks,
                       "warmup_cycles": self.warmup_cycles,
                       "findings": [dict(f.to_dict(), rank_order=i + 1) for i, f in enumerate(self.findings)],
                       "checks": [c.to_dict() for c in self.checks], "whatif": self.whatif,
                       "whatif_error": self.whatif_error, "cycles_batch": self.cycles_batch, "live": self.live})
