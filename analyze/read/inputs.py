"""Finding the reports to read: a file is itself, a directory stands for the exports inside it; the
names of Nsight Systems' own report files and the command that exports one to SQLite."""
from __future__ import annotations

import os
from pathlib import Path

from analyze.errors import MissingInput, NsysRepGiven

NSYS_REP_SUFFIXES = (".nsys-rep", ".qdrep")
REPORT_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def display_path(path: str | os.PathLike) -> str:
    """``path`` as results and messages name it: the same text, except that bytes of the file name
    that are not UTF-8 (which Python carries as lone surrogates, and which no UTF-8 writer accepts)
    are shown as ``\\xNN`` escapes. Files are always opened by the path itself."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "backslashreplace")


def nsys_export_command(path: str | os.PathLike) -> str:
    """The exact command that turns a .nsys-rep into the .sqlite export specprof reads."""
    p = Path(path)
    out = _sqlite_name_for(p)
    return f"nsys export --type sqlite -o {_shell_quote(str(out))} {_shell_quote(str(p))}"


def _shell_quote(s: str) -> str:
    import shlex
    return shlex.quote(s)


def _sqlite_name_for(rep: Path) -> Path:
    name = rep.name
    for suf in NSYS_REP_SUFFIXES:
        if name.endswith(suf):
            return rep.with_name(name[: -len(suf)] + ".sqlite")
    return rep.with_name(name + ".sqlite")


def refuse_empty(path: str | os.PathLike) -> None:
    """MissingInput for an empty path (``Path("")`` is the current directory: an unset shell
    variable would analyse, or scrub, whatever lies there)."""
    if not os.fspath(path).strip():
        raise MissingInput("an empty path was given as a report (an unset shell variable?)")


def find_reports(path: str | os.PathLike) -> list[Path]:
    """A file -> [file]; a directory -> its ``*.sqlite`` files (not recursive), sorted by name; a
    directory that is itself an export (``nsys export --type parquetdir|arrowdir``: read/columnar.py)
    -> [directory], and a directory of such exports -> them.
    Raises MissingInput when the path is missing or the directory holds no report, and
    NsysRepGiven when a directory holds only .nsys-rep files; an empty path is refused
    (:func:`refuse_empty`)."""
    refuse_empty(path)
    p = Path(path)
    if not p.exists():
        packed = p.with_name(p.name + ".xz")
        hint = (f" ({packed.name} is beside it: unpack it with `xz -dk {packed}`; the project's own fixtures: "
                "`python -m fixtures.unpack`)") if packed.is_file() else ""
        raise MissingInput(f"{p}: no such file or directory{hint}", p)
    if not p.is_dir():
        return [p]
    from analyze.read.columnar import COPY_SUFFIX, table_files

    if table_files(p) is not None:
        return [p]
    exports = [q for q in p.iterdir() if q.is_dir() and table_files(q) is not None]
    copies = {q.name + COPY_SUFFIX for q in exports}      # stand for their export (remade when it changed)
    found = sorted([q for q in p.iterdir() if q.is_file() and q.suffix.lower() in REPORT_SUFFIXES
                    and q.name not in copies] + exports)
    if found:
        return found
    reps = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(NSYS_REP_SUFFIXES))
    if reps:
        raise NsysRepGiven(
            f"{p}: holds {len(reps)} .nsys-rep file(s) but no .sqlite export; run "
            f"`{nsys_export_command(reps[0])}` for each", p)
    unfinished = sorted(q for q in p.iterdir() if q.is_file() and q.name.endswith(".parquet.tmp"))
    if unfinished:
        raise MissingInput(
            f"{p}: holds only {len(unfinished)} unfinished live timing log file(s) (*.parquet.tmp): their process "
            "ended before completing them (killed with SIGKILL, or still running); a Parquet file without its footer "
            "cannot be read. The shim completes its file on SIGINT (Ctrl-C) and after 5 s idle: stop the server with "
            "Ctrl-C, or wait (docs/live.md)", p)
    raise MissingInput(f"{p}: directory holds no .sqlite report (nor an nsys parquetdir export or a specprof live "
                       "timing log: *.parquet)", p)
