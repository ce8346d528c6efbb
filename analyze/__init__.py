"""specprof's analyzer: nsys SQLite exports in, per-phase / per-kernel / per-rank GPU time out.

    >>> import analyze
    >>> result = analyze.load("report.sqlite")
    >>> result.phases            # pandas DataFrame, one row per (rank, phase)
"""
from analyze.attribute.phases import DEFAULT_PHASES, Phase, PhaseConfig, load_config
from analyze.results import Analysis, ReportResult
from analyze.run.api import analyze_report, load

__all__ = ["Analysis", "ReportResult", "analyze_report", "load", "Phase", "PhaseConfig",
           "DEFAULT_PHASES", "load_config"]
