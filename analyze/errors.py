"""The error vocabulary of specprof: every problem a user can fix is a :class:`TraceError` subclass
with its own process exit code (exit code 1 is reserved for internal bugs); ``str(err)`` is one line.

====  ==================  =====================================================================
code  class               situation
====  ==================  =====================================================================
2     MissingInput        path does not exist / directory holding no ``.sqlite`` report; its
                          subclass NotAFile: a FIFO, device or socket given as a report
2     SchedulerError      ``--scheduler``: Dask missing or the scheduler cannot be reached
3     NsysRepGiven        a ``.nsys-rep`` / ``.qdrep`` was given (or ``nsys export`` failed)
4     NotSqlite           the file is not an SQLite database (text, binary, ...)
5     NotNsysExport       an SQLite database without any Nsight Systems table
6     CorruptReport       truncated / corrupt / empty file: SQLite cannot read it
7     NoCudaActivity      a valid export that holds no GPU activity (read/capture.py); its
                          subclasses NvtxOnly (NVTX ranges or marks but no CUDA activity) and
                          KernelsMissing (kernel launches traced, no kernel rows)
8     OutputError         an output cannot be written (read-only, not a directory, ...)
9     RankConflict        two processes or reports claim the same rank
10    UsageError          a bad option or option value, on every subcommand (argparse's own
                          errors included: :class:`ArgumentParser` raises it instead of exiting 2)
11    MixedInputs         reports that do not belong together (same file twice, other host, ...)
12    UnsuitableInput     a valid export that lacks what the subcommand needs (``whatif`` without
                          decode cycles or accept marks, a ``diff`` side that is not a result)
====  ==================  =====================================================================
"""
from __future__ import annotations

import argparse
import os

__all__ = ["EXIT_INTERNAL_ERROR", "TraceError", "MissingInput", "NotAFile", "NsysRepGiven", "NotSqlite",
           "NotNsysExport", "CorruptReport", "NoCudaActivity", "NvtxOnly", "KernelsMissing", "OutputError",
           "RankConflict", "UsageError", "MixedInputs", "SchedulerError", "SchemaWarning", "UnsuitableInput",
           "ArgumentParser"]

EXIT_INTERNAL_ERROR = 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class TraceError(Exception):
    """A problem with the user's input or output that the user can fix. ``exit_code`` is the
    process exit status the CLI returns; ``str(err)`` is a single line."""

    exit_code = EXIT_INTERNAL_ERROR

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        self.path = None if path is None else str(path)
        self.message = _one_line(message)
        super().__init__(self.message)


class MissingInput(TraceError):
    exit_code = 2


class NotAFile(MissingInput):
    """The input exists but is not a regular file (a FIFO, a device such as /dev/zero, a socket):
    refused at once, before anything reads from it (a FIFO would block)."""


class NsysRepGiven(TraceError):
    exit_code = 3


class NotSqlite(TraceError):
    exit_code = 4


class NotNsysExport(TraceError):
    exit_code = 5


class CorruptReport(TraceError):
    exit_code = 6


class NoCudaActivity(TraceError):
    exit_code = 7


class NvtxOnly(NoCudaActivity):
    """NVTX ranges or marks but no CUDA activity: the CLI shows what the NVTX holds, then this error."""


class KernelsMissing(NoCudaActivity):
    """Kernel launches were traced but the export holds no kernel rows: kernel time would read 0."""


class OutputError(TraceError):
    exit_code = 8


class RankConflict(TraceError):
    exit_code = 9


class UsageError(TraceError, ValueError):
    """A bad option or option value (phase configuration, plot request, argparse's own errors):
    exit code 10. A ValueError too, for callers that catch those."""

    exit_code = 10


class MixedInputs(TraceError):
    """Reports that do not belong to one run (the same file twice, different hosts, sessions that
    never overlapped in time): refused unless ``--allow-mixed``; exit code 11. ``reason``: what differs, without
    the advice (a command that takes no ``--allow-mixed`` gives its own)."""
    exit_code = 11

    def __init__(self, message: str, path: str | os.PathLike | None = None, reason: str | None = None):
        super().__init__(message, path)
        self.reason = reason


class UnsuitableInput(TraceError, ValueError):
    """A readable export that lacks what the command needs (no decode cycles, no accept marks, no
    draft steps for ``whatif``; a ``diff`` side that is not a result): exit code 12."""

    exit_code = 12


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are a :class:`UsageError` (exit 10, one line) instead of a usage
    message and exit 2; ``--help`` still exits 0."""

    def __init__(self, *args, **kwargs):
        # no abbreviations: `--plot out` taken as `--plots` (an option of another meaning) surprised users
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # noqa: D401 - argparse's hook
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""     # "analyze-trace diff"
        raise UsageError(f"{sub}{message}{self._suggestion(message)} (see {self.prog} --help)")

    def _suggestion(self, message: str) -> str:
        """``; did you mean --json?`` for an unrecognized option close to one of this parser's (``--jsno``), as
        Python 3.12's argparse does for choices; "" otherwise."""
        import difflib

        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for word in message.split(":", 1)[1].split():
            if word.startswith("--"):
                close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.75)
                if close:
                    return f"; did you mean {close[0]}?"
        return ""


def whole_number(text: str, least: int) -> int:
    """An option's whole-number value, at least ``least``; argparse.ArgumentTypeError otherwise (the
    parser's error: analyze-trace's exit 10, one line; plain argparse's exit 2 in profile-trace)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: give at least {least}")
    return value


def positive_int(text: str) -> int:
    """``--jobs``, ``--top``, ``--boot``: an integer >= 1."""
    return whole_number(text, 1)


def positive_float(text: str) -> float:
    """``--baseline-tps``, ``--calibrate-tps``: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number > 0")
    return value


def request_tokens_arg(text: str):
    """``--request-tokens`` (whatif, advise): 'auto', 'steady' or a number of tokens >= 1."""
    t = str(text).strip().lower()
    if t in ("auto", "steady"):
        return t
    try:
        n = int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of tokens, 'steady' or 'auto'") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of tokens >= 1, 'steady' or 'auto'")
    return n


def non_negative_int(text: str) -> int:
    """An integer >= 0 (a count that may be none, e.g. ``--warmup-requests``)."""
    return whole_number(text, 0)


class SchedulerError(TraceError):
    exit_code = 2


class SchemaWarning(UserWarning):
    """The export schema is newer than the newest one specprof was tested with."""
