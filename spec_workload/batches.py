"""The decode batch of every cycle: a seeded arrival/finish process over ``reqs`` batch slots.

A real server's batch changes from cycle to cycle (requests finish, new ones arrive), so one
profile holds cycles that verify different numbers of tokens.  Model: ``reqs`` slots, all busy at
the first cycle; after every cycle each running request finishes with probability ``finish_p`` and
each free slot takes a new request with probability ``arrive_p``; when fewer than ``reqs_min``
remain, the lowest free slots are refilled.  The stationary mean is about
``reqs * arrive_p / (arrive_p + finish_p)``, the correlation time about
``1 / (arrive_p + finish_p)`` cycles.  ``reqs_min == reqs`` gives a constant batch.

The sequence depends only on (reqs, reqs_min, finish_p, arrive_p, seed) and the cycle index,
never on the step count, so every run of a sweep sees the same batches.  Each request's current
token (the verify input of the MoE target) is drawn uniformly from the vocabulary with the same
seeded generator: it stands in for the token the request sampled last.
"""

from __future__ import annotations

from typing import List

import numpy as np

from .srt.managers.schedule_batch import ScheduleBatch

_STREAM = 0xBA7C  # keeps this generator apart from the accept-length sampler's (seeded by seed alone)


def _check(reqs: int, reqs_min: int, finish_p: float, arrive_p: float) -> None:
    if reqs < 1:
        raise ValueError(f"reqs={reqs} must be >= 1")
    if not 1 <= reqs_min <= reqs:
        raise ValueError(f"reqs_min={reqs_min} must be in 1..reqs={reqs}")
    for name, p in (("finish_p", finish_p), ("arrive_p", arrive_p)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name}={p} must be in [0, 1]")


def batch_sizes(reqs: int, reqs_min: int, cycles: int, seed: int,
                finish_p: float = 0.3, arrive_p: float = 0.3) -> List[int]:
    """Requests running in each of ``cycles`` consecutive cycles (the first is ``reqs``)."""
    return [b.batch_size() for b in make_batches(reqs, reqs_min, cycles, seed, finish_p, arrive_p, vocab=1)]


def make_batches(reqs: int, reqs_min: int, cycles: int, seed: int, finish_p: float, arrive_p: float,
                 vocab: int) -> List[ScheduleBatch]:
    """One ScheduleBatch per cycle: the running requests' current tokens, in slot order."""
    _check(reqs, reqs_min, finish_p, arrive_p)
    rng = np.random.default_rng([seed, _STREAM, 0])      # batch sizes: independent of the vocabulary
    tokens = np.random.default_rng([seed, _STREAM, 1])
    busy = np.ones(reqs, dtype=bool)
    out = []
    for _ in range(cycles):
        ids = tokens.integers(0, vocab, size=reqs)  # drawn for every slot: tokens do not shift with the batch
        out.append(ScheduleBatch([int(t) for t in ids[busy]]))
        u = rng.random(reqs)
        if reqs_min < reqs:
            busy = np.where(busy, u >= finish_p, u < arrive_p)
            short = reqs_min - int(busy.sum())
            if short > 0:
                busy[np.flatnonzero(~busy)[:short]] = True
    return out
