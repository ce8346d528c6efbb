"""specprof's analyzer: nsys SQLite exports in, per-phase / per-kernel / per-rank GPU time out.

    >>> import analyze
    >>> result = analyze.load("report.sqlite")
    >>> result.phases            # pandas DataFrame, one row per (rank, phase)
"""
from analyze.attribute.phases import DEFAULT_PHASES, Phase, PhaseConfig, load_config
from analyze.results import Analysis, ReportResult
from analyze.run import api as _api
from analyze.run.api import analyze_report

__all__ = ["Analysis", "ReportResult", "analyze_report", "load", "Phase", "PhaseConfig",
           "DEFAULT_PHASES", "load_config"]


def load(paths, config: PhaseConfig | None = None, **options) -> Analysis:
    """Analyze one or more nsys SQLite exports (files or directories) into an :class:`Analysis`:
    :func:`analyze.run.api.load` (the map step per report, the reducer across them; ``options``:
    jobs, progress, cache, memory_budget, scheduler), then the notes the views make about the
    whole analysis (views/analysis_notes.py: no NVTX range is a phase, a phase matched nothing, the
    skew table left out). The CLI writes exactly this."""
    from analyze.views.analysis_notes import with_view_notes

    config = config or PhaseConfig()
    return with_view_notes(_api.load(paths, config, **options), config)
