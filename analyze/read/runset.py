"""The reports of one run: the inputs expanded (files as given, directories to the reports inside,
``.nsys-rep`` exported), then three checks before any analysis.

* The same report given twice (the same file, through a link, a directory and a file in it): refused
  (MixedInputs, exit 11) unless ``allow_mixed``, which analyses it once with a note.
* A report of a directory that cannot be analysed (not SQLite, truncated, no nsys tables, a failed
  capture without GPU activity, ...) is left out with a note naming why, and the others are analysed;
  ``strict`` fails instead. A report named on its own is never left out.
* Reports that do not belong to one run (recorded on different hosts, or sessions that never ran at
  the same time) are refused (MixedInputs) unless ``allow_mixed``, which analyses them with a note.
"""
from __future__ import annotations

import datetime as _dt
import os
import sqlite3
from typing import NamedTuple

from analyze import notes as N
from analyze.errors import MixedInputs, TraceError
from analyze.notes import Note
from analyze.read import capture, report
from analyze.read.connection import open_report, table_columns
from analyze.read.inputs import display_path
from analyze.read.nsys_export import expand_inputs

# sessions of one run overlap in time; this much slack between them is still one run (clocks of
# separate machines, a report without its session length)
OVERLAP_SLACK_NS = 10 * 60 * 10**9


class RunSet(NamedTuple):
    files: list[str]            # the reports to analyse, in the order given
    notes: list[Note]           # reports left out or analysed once, mixed reports allowed


class Session(NamedTuple):
    path: str
    host: str | None
    utc_start_ns: int | None
    duration_ns: int | None


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def collect(paths, *, allow_mixed: bool = False, strict: bool = False) -> RunSet:
    """The reports of ``paths`` (files or directories) checked as the module doc says."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    entries: list[tuple[str, bool]] = []
    for p in paths:
        from_dir = os.path.isdir(p)
        entries += [(f, from_dir) for f in expand_inputs([p])]
    notes: list[Note] = []
    unique: list[tuple[str, bool]] = []
    first_of: dict[tuple[int, int], str] = {}
    for f, from_dir in entries:
        ident = _identity(f)
        if ident is not None and ident in first_of:
            if not allow_mixed:
                raise MixedInputs(f"{display_path(f)} and {display_path(first_of[ident])} are the same report: give "
                                  "each report once (or --allow-mixed to analyse it once)", f)
            notes.append(Note(N.DUPLICATE_INPUT, f"{display_path(f)} is the same report as "
                              f"{display_path(first_of[ident])}: analysed once", 1))
            continue
        if ident is not None:
            first_of[ident] = f
        unique.append((f, from_dir))
    files, skipped = [], []
    for f, from_dir in unique:
        if from_dir and len(unique) > 1 and not strict:
            try:
                screen(f)
            except TraceError as exc:
                skipped.append(exc)
                notes.append(Note(N.SKIPPED_INPUT, f"left out (--strict to stop instead): {exc}", 1,
                                  input=display_path(f)))
                continue
        files.append(f)
    if not files and skipped:
        raise skipped[0]
    mixed = mismatch([session(f) for f in files]) if len(files) > 1 else None
    if mixed:
        if not allow_mixed:
            reason = f"these reports do not belong to one run: {mixed}"
            raise MixedInputs(f"{reason}; analyse them one by one, or give --allow-mixed to combine them anyway",
                              files[0], reason=reason)
        notes.append(Note(N.MIXED_INPUTS, f"reports from different runs combined (--allow-mixed): {mixed}",
                          len(files)))
    return RunSet(files, notes)


def screen(path: str) -> None:
    """Raise the error the analysis of ``path`` would stop with at once (cheap checks only: the header,
    the nsys tables, GPU activity); return when it can be analysed."""
    open_report(path, quick_check=False).close()
    capture.require_gpu_activity(path)


def session(path: str) -> Session:
    """The host, the UTC start and the length of the capture session of ``path`` (None when the export
    does not say or cannot be read: the analysis then says why)."""
    try:
        conn = open_report(path, quick_check=False)
    except TraceError:
        return Session(path, None, None, None)
    try:
        utc = None
        if "utcEpochNs" in table_columns(conn, "TARGET_INFO_SESSION_START_TIME"):
            row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
            utc = int(row[0]) if row and isinstance(row[0], int) else None
        return Session(path, report.read_hostname(conn), utc, report.session_end_ns(conn))
    except sqlite3.Error:
        return Session(path, None, None, None)
    finally:
        conn.close()


def _when(ns: int) -> str:
    return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _gap(ns: int) -> str:
    s = ns / 1e9
    if s >= 2 * 86400:
        return f"{s / 86400:.0f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.0f} hours"
    return f"{s / 60:.0f} minutes"


def mismatch(sessions: list[Session]) -> str | None:
    """Why these sessions are not one run, or None: different hosts, or sessions that never ran at the
    same time (every session must overlap the others, within OVERLAP_SLACK_NS)."""
    hosts = {}
    for s in sessions:
        if s.host:
            hosts.setdefault(s.host, s.path)
    if len(hosts) > 1:
        shown = ", ".join(f"{h} ({display_path(p)})" for h, p in list(hosts.items())[:3])
        return f"recorded on different hosts: {shown}"
    timed = [s for s in sessions if s.utc_start_ns is not None]
    if len(timed) > 1:
        latest = max(timed, key=lambda s: s.utc_start_ns)
        first_end = min(timed, key=lambda s: s.utc_start_ns + (s.duration_ns or 0))
        end = first_end.utc_start_ns + (first_end.duration_ns or 0)
        if latest.utc_start_ns - end > OVERLAP_SLACK_NS:
            return (f"sessions that never ran at the same time: {display_path(first_end.path)} started "
                    f"{_when(first_end.utc_start_ns)}, {display_path(latest.path)} {_when(latest.utc_start_ns)}, "
                    f"{_gap(latest.utc_start_ns - end)} after the first ended")
    return None
