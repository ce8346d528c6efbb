"""specprof's analyzer: nsys SQLite exports in, per-phase / per-kernel / per-rank GPU time out.

    >>> import analyze
    >>> result = analyze.load("report.sqlite")
    >>> result.phases            # pandas DataFrame, one row per (rank, phase)
"""
from .api import Analysis, ReportResult, analyze_report, load
from .phases import DEFAULT_PHASES, Phase, PhaseConfig, load_config

__all__ = ["Analysis", "ReportResult", "analyze_report", "load", "Phase", "PhaseConfig",
           "DEFAULT_PHASES", "load_config"]
