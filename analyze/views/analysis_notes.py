"""The notes the views make about a whole analysis (added by :func:`analyze.load`, after the map and
reduce steps): a trace whose NVTX ranges are no phase and a phase that matched nothing
(phase_hints.py), the skew table left out and a straggler seen only in warm-up (skew.py)."""
from __future__ import annotations

from analyze import notes as N
from analyze.attribute.phases import PhaseConfig
from analyze.notes import Note
from analyze.views import phase_hints, skew

__all__ = ["view_notes", "with_view_notes", "CODES"]

# the codes of these notes: about the whole analysis, never about one report (their ``input`` is None)
CODES = (N.NVTX_NOT_PHASES, N.PHASE_UNMATCHED, N.SKEW_SKIPPED, N.STRAGGLER_WARMUP_ONLY)


def view_notes(a, config: PhaseConfig | None = None) -> list[Note]:
    """Every view's notes about ``a`` (``config``: the phases it was analyzed with)."""
    return phase_hints.hint_notes(a, config) + skew.skew_notes(a)


def with_view_notes(a, config: PhaseConfig | None = None):
    """``a`` with :func:`view_notes` appended to its notes (once: notes already there are kept)."""
    for note in view_notes(a, config):
        if note not in a.notes:
            a.notes.append(note)
    return a
