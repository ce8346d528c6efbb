"""Reports as files the analysis can read: ``nsys export`` of a ``.nsys-rep`` (written atomically beside
it and reused), and the inputs of a run expanded (directories, exports) into a list of SQLite files."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from analyze.atomic import check_dir_writable, replace_when_done, temp_beside
from analyze.errors import MissingInput, NsysRepGiven
from analyze.read import columnar
from analyze.read.connection import open_report
from analyze.read.inputs import NSYS_REP_SUFFIXES, _sqlite_name_for, find_reports, nsys_export_command


def export_nsys_rep(path: str | os.PathLike, progress: bool = True, *,
                    output: str | os.PathLike | None = None, nsys: str | None = None,
                    force: bool = False) -> Path:
    """Run ``nsys export --type sqlite`` on a .nsys-rep and return the .sqlite path.

    The export is written to a temporary name in the target directory and renamed into place
    only when nsys succeeded and the result opens as an nsys export; an existing export is
    reused unless ``force``. nsys's progress goes to stderr when ``progress``. Raises
    NsysRepGiven (with the manual command) when nsys is not on PATH or fails, MissingInput when
    the report is missing and OutputError when the directory is not writable."""
    rep = Path(path)
    if not rep.is_file():
        raise MissingInput(f"{rep}: no such file", rep)
    out = Path(output) if output is not None else _sqlite_name_for(rep)
    if out.exists() and not force:
        return out
    exe = nsys or shutil.which("nsys")
    if not exe:
        raise NsysRepGiven(f"{rep}: is an Nsight Systems report and nsys is not on PATH; run "
                           f"`{nsys_export_command(rep)}` where nsys is installed", rep)
    check_dir_writable(out.parent)
    tmp_p = temp_beside(out, ".tmp.sqlite")
    cmd = [exe, "export", "--type", "sqlite", "--force-overwrite", "true",
           "--quiet", "false" if progress else "true", "-o", str(tmp_p), str(rep)]
    with replace_when_done(tmp_p, out):
        try:
            proc = subprocess.run(cmd, stdout=sys.stderr if progress else subprocess.DEVNULL,
                                  stderr=sys.stderr if progress else subprocess.PIPE, text=True)
        except OSError as e:
            raise NsysRepGiven(f"{rep}: cannot run {exe} ({e.strerror or e}); run "
                               f"`{nsys_export_command(rep)}`", rep) from None
        if proc.returncode != 0 or not tmp_p.exists() or tmp_p.stat().st_size == 0:
            tail = ""
            if not progress and proc.stderr:
                tail = ": " + proc.stderr.strip().splitlines()[-1]
            raise NsysRepGiven(f"{rep}: `nsys export` failed (exit {proc.returncode}){tail}; "
                               f"try `{nsys_export_command(rep)}`", rep)
        open_report(tmp_p).close()
    return out


def expand_inputs(paths, *, export: bool = True) -> list[str]:
    """Files as given; a directory stands for the reports inside it. A ``.nsys-rep``/``.qdrep``
    (given, or the only reports of a directory) is exported to SQLite with ``nsys export`` when nsys
    is on PATH (progress on stderr; the export lands beside it and is reused next time); without
    nsys, NsysRepGiven names the command to run. A columnar export (parquetdir, arrowdir, arrow) is
    read through its SQLite copy (read/columnar.py: made once, reused)."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        try:
            found = find_reports(p)
        except NsysRepGiven:
            if not export or not Path(p).is_dir():
                raise
            found = sorted(q for q in Path(p).iterdir() if q.name.endswith(NSYS_REP_SUFFIXES))
        for f in found:
            if export and str(f).endswith(NSYS_REP_SUFFIXES):
                f = export_nsys_rep(f, progress=sys.stderr.isatty())
            elif export and columnar.is_columnar_export(f):
                f = columnar.sqlite_copy(f, progress=sys.stderr.isatty())   # as the .nsys-rep export
            out.append(str(f))
    return out
