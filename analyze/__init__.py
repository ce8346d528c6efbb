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
