"""Atomic outputs: every file specprof writes goes through :func:`atomic_write`, :func:`atomic_path`
or :func:`atomic_dir_write`: written under a temporary name in the target directory and renamed into
place when complete, removed on any exception (KeyboardInterrupt included), so no output is ever left
half-written and an existing file is only replaced by a complete one. A location that cannot be
written raises OutputError (one line)."""
from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from analyze.errors import OutputError

__all__ = ["atomic_write", "atomic_path", "atomic_dir_write", "AtomicDir", "check_dir_writable"]


def _output_error(path: Path, e: OSError) -> OutputError:
    reason = e.strerror or str(e)
    if e.errno == errno.ENOTDIR:
        reason = "a parent of it is a file, not a directory"
    elif e.errno in (errno.EROFS,):
        reason = "read-only file system"
    return OutputError(f"cannot write {path}: {reason}", path)


def check_dir_writable(d: Path) -> None:
    d = d if str(d) else Path(".")
    if not d.exists():
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise _output_error(d, e) from None
    elif not d.is_dir():
        raise OutputError(f"cannot write into {d}: it is a file, not a directory", d)


def _mkstemp_near(path: Path, binary: bool = True) -> tuple[int, Path]:
    parent = path.parent if str(path.parent) else Path(".")
    check_dir_writable(parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=parent)
    except OSError as e:
        raise _output_error(path, e) from None
    return fd, Path(tmp)


def _commit(tmp: Path, path: Path) -> None:
    try:
        mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)  # mkstemp creates 0600; give the usual permissions
        os.replace(tmp, path)
    except OSError as e:
        raise _output_error(path, e) from None


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` for writers that want a file name (pyarrow,
    sqlite, nsys); on success it is renamed onto ``path``, on any exception (KeyboardInterrupt
    included) it is removed and ``path`` is left as it was."""
    target = Path(path)
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory", target)
    fd, tmp = _mkstemp_near(target)
    os.close(fd)
    try:
        yield tmp
        _commit(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", *, encoding: str | None = "utf-8",
                 newline: str | None = None) -> Iterator[IO]:
    """``with atomic_write(p) as f: f.write(...)``: writes a temp file in the same directory and
    ``os.replace``s it onto ``p`` when the block succeeds; on any exception (KeyboardInterrupt
    included) the temp file is removed and an existing ``p`` is left untouched. Raises
    OutputError (one line) when the location cannot be written."""
    if mode not in ("w", "wb", "wt", "x", "xb", "xt"):
        raise ValueError(f"atomic_write: unsupported mode {mode!r}")
    target = Path(path)
    if mode.startswith("x") and target.exists():
        raise OutputError(f"cannot write {target}: it already exists", target)
    if target.is_dir():
        raise OutputError(f"cannot write {target}: it is a directory", target)
    fd, tmp = _mkstemp_near(target)
    binary = "b" in mode
    try:
        f = os.fdopen(fd, "wb" if binary else "w",
                      **({} if binary else {"encoding": encoding, "newline": newline}))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    try:
        with f:
            yield f
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError as e:
                raise _output_error(target, e) from None
        _commit(tmp, target)
    except OSError as e:  # a failed write/flush of the output (ENOSPC, EIO, ...)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise _output_error(target, e) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class AtomicDir:
    """Files staged by :func:`atomic_dir_write`. ``open(name)`` / ``path(name)`` stage one file;
    all staged files are renamed into place (each rename atomic) when the ``with`` block ends
    without an exception, and all removed otherwise."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._staged: dict[str, Path] = {}
        self._files: list[IO] = []

    def _stage(self, name: str) -> Path:
        if os.sep in name or (os.altsep and os.altsep in name) or name in ("", ".", ".."):
            raise ValueError(f"AtomicDir: plain file name expected, got {name!r}")
        if name in self._staged:
            raise ValueError(f"AtomicDir: {name!r} written twice")
        fd, tmp = _mkstemp_near(self.directory / name)
        os.close(fd)
        self._staged[name] = tmp
        return tmp

    def path(self, name: str) -> Path:
        """A temporary path to hand to a writer that wants a file name (e.g. df.to_parquet)."""
        return self._stage(name)

    def open(self, name: str, mode: str = "w", *, encoding: str | None = "utf-8",
             newline: str | None = None) -> IO:
        if mode not in ("w", "wb", "wt"):
            raise ValueError(f"AtomicDir.open: unsupported mode {mode!r}")
        tmp = self._stage(name)
        try:
            if "b" in mode:
                f = open(tmp, "wb")
            else:
                f = open(tmp, "w", encoding=encoding, newline=newline)
        except OSError as e:
            raise _output_error(self.directory / name, e) from None
        self._files.append(f)
        return f

    def _close_files(self) -> None:
        for f in self._files:
            if not f.closed:
                f.close()
        self._files.clear()

    @property
    def names(self) -> list[str]:
        return list(self._staged)

    def _commit_all(self) -> None:
        try:
            self._close_files()
        except OSError as e:
            raise _output_error(self.directory, e) from None
        for name, tmp in self._staged.items():
            _commit(tmp, self.directory / name)
        self._staged.clear()

    def _discard(self) -> None:
        with contextlib.suppress(OSError):
            self._close_files()
        for tmp in self._staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._staged.clear()


@contextlib.contextmanager
def atomic_dir_write(directory: str | os.PathLike) -> Iterator[AtomicDir]:
    """Write several files into ``directory`` (created if missing)::

        with atomic_dir_write(out) as d:
            df.to_csv(d.open("phases.csv"), index=False)   # caller closes or lets pandas close
            df.to_parquet(d.path("phases.parquet"))

    Every file is staged under a temporary name and renamed into place when the block ends
    successfully; on an exception none of the staged files replaces an existing one."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise OutputError(f"cannot write into {d}: it is a file, not a directory", d)
    check_dir_writable(d)
    staged = AtomicDir(d)
    try:
        yield staged
        staged._commit_all()
    except BaseException:
        staged._discard()
        raise
