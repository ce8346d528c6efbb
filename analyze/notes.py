"""Notes: what the analysis says about how it treated a report (odd rows, chunking, the cache, skipped
figures). Each is structured data: a stable ``code`` that code may test, the ``count`` of rows or
items it is about, one readable ``message`` line, and optionally the ``input`` and ``rank`` it is
about. Code decides on codes, never on message text; the codes are listed in docs/bad_input.md.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# report checks (run/checks.py)
MARKS_ONLY = "marks_only"
NO_NVTX_RANGES = "no_nvtx_ranges"
UNLINKED_OPS = "unlinked_ops"
UNCLOSED_RANGES = "unclosed_ranges"
CROSS_THREAD_RANGES = "cross_thread_ranges"
IDENTICAL_RANGES = "identical_ranges"
ZERO_LENGTH_OPS = "zero_length_ops"
NEGATIVE_IDS = "negative_ids"
SHARED_CORRELATION_IDS = "shared_correlation_ids"
INVALID_TEXT = "invalid_text"
GRAPH_LEVEL_TRACE = "graph_level_trace"
# rows left out at the read (read/validate.py)
BAD_TIMESTAMPS = "bad_timestamps"
NEGATIVE_DURATIONS = "negative_durations"
OUTSIDE_SESSION = "outside_session"
DUPLICATE_ROWS = "duplicate_rows"
BAD_IDS = "bad_ids"
# the capture itself (read/capture.py, run/checks.py)
UVM_MIGRATIONS = "uvm_migrations"
NSYS_DIAGNOSTICS = "nsys_diagnostics"
LOST_CUDA_TAIL = "lost_cuda_tail"
# several reports (read/runset.py, run/multirank.py)
MISSING_RANKS = "missing_ranks"
SKIPPED_INPUT = "skipped_input"
DUPLICATE_INPUT = "duplicate_input"
MIXED_INPUTS = "mixed_inputs"
# memory budget (run/api.py, run/mapstep.py)
CHUNKED = "chunked"
NOT_TIME_ORDERED = "not_time_ordered"
BELOW_FLOOR = "budget_below_floor"
AUTO_BUDGET = "auto_budget"
# the Parquet cache (read/cache.py)
CACHE_READ_ELSEWHERE = "cache_read_elsewhere"
CACHE_WRITTEN_ELSEWHERE = "cache_written_elsewhere"
CACHE_NOT_WRITTEN = "cache_not_written"
# figures (render/plots.py)
FIGURE_SKIPPED = "figure_skipped"
# phase rules that do not fit the trace (views/phase_hints.py)
NVTX_NOT_PHASES = "nvtx_not_phases"
PHASE_UNMATCHED = "phase_unmatched"
# all-reduce skew (views/skew.py)
SKEW_SKIPPED = "skew_skipped"
STRAGGLER_WARMUP_ONLY = "straggler_warmup_only"
# a live timing log read as an analysis (run/live.py)
LIVE_LOG_NO_KERNELS = "live_log_no_kernels"
LIVE_LOG_NO_PERIOD = "live_log_no_period"
LIVE_LOG_SAMPLED = "live_log_sampled"
LIVE_LOG_BAD_ROWS = "live_log_bad_rows"
LIVE_LOG_BAD_VALUES = "live_log_bad_values"
LIVE_LOG_ZERO_STEPS = "live_log_zero_steps"
LIVE_LOG_NESTED_ALLREDUCE = "live_log_nested_allreduce"
LIVE_LOG_OPEN_FILES = "live_log_open_files"

CODES = (MARKS_ONLY, NO_NVTX_RANGES, UNLINKED_OPS, UNCLOSED_RANGES, CROSS_THREAD_RANGES, IDENTICAL_RANGES,
         ZERO_LENGTH_OPS, NEGATIVE_IDS, SHARED_CORRELATION_IDS, INVALID_TEXT, GRAPH_LEVEL_TRACE,
         BAD_TIMESTAMPS, NEGATIVE_DURATIONS, OUTSIDE_SESSION, DUPLICATE_ROWS, BAD_IDS, UVM_MIGRATIONS, NSYS_DIAGNOSTICS,
         LOST_CUDA_TAIL, MISSING_RANKS, SKIPPED_INPUT, DUPLICATE_INPUT, MIXED_INPUTS, CHUNKED,
         NOT_TIME_ORDERED, BELOW_FLOOR, AUTO_BUDGET, CACHE_READ_ELSEWHERE, CACHE_WRITTEN_ELSEWHERE,
         CACHE_NOT_WRITTEN, FIGURE_SKIPPED, NVTX_NOT_PHASES, PHASE_UNMATCHED,
         SKEW_SKIPPED, STRAGGLER_WARMUP_ONLY, LIVE_LOG_NO_KERNELS, LIVE_LOG_NO_PERIOD, LIVE_LOG_NESTED_ALLREDUCE,
         LIVE_LOG_SAMPLED, LIVE_LOG_ZERO_STEPS, LIVE_LOG_BAD_ROWS, LIVE_LOG_BAD_VALUES, LIVE_LOG_OPEN_FILES)


# a note's fields in its JSON form (and the columns of the notes table --csv/--parquet write)
NOTE_FIELDS = ("code", "count", "message", "input", "rank")


@dataclass(frozen=True)
class Note:
    code: str
    message: str
    count: int | None = None
    input: str | None = None
    rank: int | None = None

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unknown note code {self.code!r}")

    def __str__(self) -> str:
        """The line shown to people: the message, after the input it is about when one is named."""
        return f"{self.input}: {self.message}" if self.input else self.message

    def about_input(self, path: str) -> "Note":
        return dataclasses.replace(self, input=str(path))

    def to_dict(self) -> dict:
        """The JSON form: every field (:data:`NOTE_FIELDS`), ``message`` readable on its own."""
        return {name: getattr(self, name) for name in NOTE_FIELDS}


def has(notes, code: str) -> bool:
    """Whether any of ``notes`` has ``code``."""
    return any(getattr(n, "code", None) == code for n in notes)


def text_of(note) -> str:
    """The shown line of a Note, of its JSON object (``--json`` schema 2) or of a plain string (schema 1)."""
    if isinstance(note, dict):
        return f"{note['input']}: {note['message']}" if note.get("input") else str(note["message"])
    return str(note)
