"""specprof's analyzer: nsys SQLite exports in, per-phase / per-kernel / per-rank GPU time out.

    >>> import analyze
    >>> result = analyze.load("report.sqlite")
    >>> result.phases            # pandas DataFrame, one row per (rank, phase)

The public names are imported when first used (PEP 562), so that a light module of the package
(``analyze.output_policy``, ``analyze.errors``) can be imported without pandas (profile-trace does,
at server start).
"""
from __future__ import annotations

__all__ = ["Analysis", "ReportResult", "analyze_report", "load", "Phase", "PhaseConfig",
           "DEFAULT_PHASES", "load_config"]


def __getattr__(name: str):
    if name in ("DEFAULT_PHASES", "Phase", "PhaseConfig", "load_config"):
        from analyze.attribute import phases as module
    elif name in ("Analysis", "ReportResult"):
        from analyze import results as module
    elif name in ("analyze_report", "load"):
        from analyze.run import api as module
    else:
        raise AttributeError(f"module 'analyze' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)


def load(paths, config=None, **options):
    """Analyze one or more nsys SQLite exports (files or directories) into an :class:`Analysis`:
    :func:`analyze.run.api.load` (the map step per report, the reducer across them; ``options``:
    jobs, progress, cache, memory_budget, scheduler, allow_mixed, strict), then the notes the views
    make about the whole analysis (views/analysis_notes.py: no NVTX range is a phase, a phase matched
    nothing, the skew table left out). The CLI writes exactly this."""
    from analyze.attribute.phases import PhaseConfig
    from analyze.run import api as _api
    from analyze.views.analysis_notes import with_view_notes

    config = config or PhaseConfig()
    return with_view_notes(_api.load(paths, config, **options), config)
