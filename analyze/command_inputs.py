"""What the analysing commands (``analyze-trace`` and ``analyze-trace advise``) make of their
arguments before anything is loaded: the phase configuration (a bad one is a usage error, exit 10),
the worker count, and the paths no output of the run may replace. One place, so the two commands
cannot drift apart."""
from __future__ import annotations

import os

from analyze.errors import UsageError


def phase_config(config_path, phase_options):
    """The phase configuration from ``--config FILE`` and ``--phase`` options (attribute/phases.py);
    an unreadable or malformed one raises UsageError."""
    from analyze.attribute import phases

    try:
        return phases.load_config(config_path, phase_options)
    except (OSError, ValueError) as exc:
        raise UsageError(f"phase configuration: {exc}") from exc


def worker_count(jobs: int | None) -> int:
    """``--jobs N`` as given, else one worker per core."""
    return jobs if jobs is not None else (os.cpu_count() or 1)


def report_inputs(reports, config_path) -> tuple[list[str], list]:
    """(the report files the arguments stand for: read/nsys_export.expand_inputs, a directory's
    reports, a ``.nsys-rep``'s export; the paths no output may replace: the reports as given,
    those files and the configuration file, for output_policy.protect). Live timing logs
(run/live.py): their ``*.parquet`` files."""
    from analyze.read.nsys_export import expand_inputs
    from analyze.run import live

    logs = live.live_paths(reports) if reports else None
    if logs is not None:              # live timing logs (run/live.py): their files
        from analyze.read.live_log import log_files

        files = [str(f) for p in logs for f in log_files(p)]
        return files, [*reports, *files, config_path]
    files = expand_inputs(reports)
    return files, [*reports, *files, config_path]
