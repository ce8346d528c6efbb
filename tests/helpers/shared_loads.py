"""Real exports analysed once per test process and shared by the tests that read them as they are.

Several test modules analyse the same real fixtures with the default options (the held-out H100 profile 23
times in one run); each analysis of a real export costs 0.2-2 s. :func:`load`, :func:`api_load` and
:func:`load_side` are ``analyze.load(path)``, ``analyze.run.api.load(path)`` and
``analyze.tools.sides.load_side(path)`` of one path with the default options, computed once per process
(an xdist worker; the analysis once, the other two made from it as analyze makes them) and handed out as
a fresh copy each call.

Safe to share because:

* only what lies under the repository's ``fixtures/`` (files no test writes) is shared; any other path (a
  test's temporary copy) is analysed fresh at each call;
* each call returns its own object: its lists, dicts, arrays and dataclasses are new (unpickled), its
  DataFrames and Series shallow copies under pandas' copy-on-write (a column set, a cell written or a frame
  changed in place changes that copy only; an array read from one is read-only; deep copies with pandas 2),
  and a column of mutable objects (the ranks' parsed clock marks: lists) is deep-copied cell by cell; the
  result kept here is never handed out;
* the key holds the path as given (it labels the result), the file's identity (resolved path, inode, size,
  mtime, ctime; a directory's files) and every ``SPECPROF_*`` / ``XDG_CACHE_HOME`` environment variable (the
  analyzer's knobs, all read when it runs);
* a call made while any attribute of an ``analyze`` module or class (or of the ``nvtx_annotate`` modules
  analyze reads), or an entry of a module's dict, differs from what it was at the end of collection
  (:func:`snapshot`: a test's monkeypatch of the reader, of a chunk size, of a registered view) analyses the
  path fresh, and keeps nothing.

Tests that change what a load reads some other way (a patched third-party function) call the analyzer
themselves.
"""
from __future__ import annotations

import copy
import importlib
import io
import os
import pickle
import pkgutil
import sys
from pathlib import Path

import pandas as pd

SHARED_UNDER = Path(__file__).resolve().parents[2] / "fixtures"
"""Only exports under this directory are shared (the repository's fixtures: read, never written, by the tests)."""
PACKAGES = ("analyze",)
"""Packages whose every module is recorded by :func:`snapshot` (imported first)."""
READ_MODULES = ("nvtx_annotate", "nvtx_annotate.protocol", "nvtx_annotate.live.log")
"""Modules of other packages that analyze reads from (their patterns and parsers): recorded too."""
_SNAPSHOT: dict[str, dict] = {}
_STORE: dict[tuple, tuple[bytes, list]] = {}
COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3
"""pandas 3 always copies on write: a shallow copy of a frame is a copy; with pandas 2 each copy is a deep one."""
STATS = {"hits": 0, "misses": 0, "fresh": 0, "unshared": 0}
"""Calls answered from the store, analysed and stored, analysed fresh because analyze was patched, analysed
fresh because the path is not a fixture's."""
IMMUTABLE_CELLS = frozenset({"empty", "string", "bytes", "floating", "integer", "mixed-integer-float", "decimal",
                             "complex", "boolean", "datetime64", "datetime", "date", "timedelta64", "timedelta",
                             "time", "period"})
"""What ``pandas.api.types.infer_dtype`` says of an object column whose cells are immutable scalars (None and
NaN skipped): such a column is shared under copy-on-write; any other (lists, dicts, mixed objects) is deep-copied
for each call."""


RUNTIME_STATE = frozenset({"analyze.memory._LIBC"})
"""Globals analyze sets itself on first use (libc, loaded once): no patch."""


def _recorded(name: str) -> bool:
    return name in READ_MODULES or any(name == p or name.startswith(p + ".") for p in PACKAGES)


def _namespaces() -> dict[str, dict]:
    """Every loaded recorded module's namespace, each class it defines (``module:Class``) and each dict it
    holds (``module[NAME]``: registries such as ``analyze.views.VIEWS``)."""
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not _recorded(name):
            continue
        space = vars(mod)
        out[name] = space
        for attr, value in list(space.items()):
            if isinstance(value, type) and value.__module__ == name:
                out[f"{name}:{attr}"] = vars(value)
            elif type(value) is dict and not attr.startswith("__"):     # not __warningregistry__, __builtins__
                out[f"{name}[{attr}]"] = value
    return out


def _entries(space) -> dict:
    return dict(list(space.items()))


def snapshot() -> None:
    """Records every ``analyze`` module (all imported first), the ``nvtx_annotate`` modules analyze reads, and
    their classes and dicts as they are: conftest calls it once collection is over, before any test runs."""
    for package in PACKAGES:
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            importlib.import_module(info.name)
    for name in READ_MODULES:
        importlib.import_module(name)
    _SNAPSHOT.clear()
    for name, space in _namespaces().items():
        _SNAPSHOT[name] = _entries(space)


def patched() -> list[str]:
    """What is not as :func:`snapshot` recorded it: an attribute of a recorded module or class, or an entry of
    one of its dicts, changed or removed (added ones are not compared: caches fill)."""
    if not _SNAPSHOT:
        snapshot()
    out = []
    for name, space in _namespaces().items():
        before = _SNAPSHOT.get(name)
        if before is None:            # imported since (a module outside the package walk)
            _SNAPSHOT[name] = _entries(space)
            continue
        out += [f"{name}.{k}" for k, v in before.items() if k not in space or space[k] is not v]
    return [x for x in out if x not in RUNTIME_STATE]


def shareable(path) -> bool:
    """Whether ``path`` lies under :data:`SHARED_UNDER` (resolved: a link out of it is not)."""
    return Path(path).resolve().is_relative_to(SHARED_UNDER)


def _identity(path) -> tuple:
    p = Path(path).resolve()
    files = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]

    def one(q: Path) -> tuple:
        st = q.stat()
        return (str(q.relative_to(p)) if p.is_dir() else "", st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return (str(p),) + tuple(one(q) for q in files)


def _environment() -> tuple:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("SPECPROF_") or k == "XDG_CACHE_HOME"))


def _mutable_cells(obj) -> list[int]:
    """The positions of ``obj``'s columns (a Series: [0]) of object dtype whose cells are not all immutable
    scalars (:data:`IMMUTABLE_CELLS`)."""
    columns = [obj] if isinstance(obj, pd.Series) else [obj.iloc[:, i] for i in range(obj.shape[1])]
    return [i for i, col in enumerate(columns)
            if col.dtype == object and pd.api.types.infer_dtype(col, skipna=True) not in IMMUTABLE_CELLS]


def _copy(obj, mutable: list[int]):
    """A copy of a stored frame or series: shallow under copy-on-write (deep with pandas 2), and the columns of
    mutable cells deep-copied cell by cell."""
    out = obj.copy(deep=not COPY_ON_WRITE)
    if isinstance(obj, pd.Series):
        if mutable:
            out = pd.Series([copy.deepcopy(v) for v in obj], index=obj.index, name=obj.name, dtype=object)
            out.attrs = copy.deepcopy(obj.attrs)
        return out
    for i in mutable:
        out.isetitem(i, pd.Series([copy.deepcopy(v) for v in obj.iloc[:, i]], index=obj.index, dtype=object))
    return out


class _Pickler(pickle.Pickler):
    """Pickles the structure of a result; its frames and series go to ``self.shared`` instead (each with the
    positions of its columns of mutable cells)."""

    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.shared: list = []
        self._ids: dict[int, int] = {}

    def persistent_id(self, obj):
        if isinstance(obj, (pd.DataFrame, pd.Series)):
            if id(obj) not in self._ids:
                self._ids[id(obj)] = len(self.shared)
                self.shared.append((obj, _mutable_cells(obj)))
            return self._ids[id(obj)]
        return None


class _Unpickler(pickle.Unpickler):
    """A new structure around copies of the shared frames (one copy per frame: identities kept)."""

    def __init__(self, f, shared: list):
        super().__init__(f)
        self.shared = shared
        self.copies: dict[int, object] = {}

    def persistent_load(self, pid):
        if pid not in self.copies:
            self.copies[pid] = _copy(*self.shared[pid])
        return self.copies[pid]


def _shared(kind: str, path, compute):
    if not shareable(path):
        STATS["unshared"] += 1
        return compute()
    if patched():
        STATS["fresh"] += 1
        return compute()
    key = (kind, os.fspath(path), _identity(path), _environment())     # the path as given: it labels the result
    if key not in _STORE:
        STATS["misses"] += 1
        buf = io.BytesIO()
        p = _Pickler(buf)
        p.dump(compute())
        _STORE[key] = (buf.getvalue(), p.shared)
    else:
        STATS["hits"] += 1
    data, shared = _STORE[key]
    return _Unpickler(io.BytesIO(data), shared).load()


def api_load(path):
    """``analyze.run.api.load(path)``: the map step and the reducer, without the views' notes."""
    from analyze.run import api

    return _shared("api.load", path, lambda: api.load(os.fspath(path)))


def load(path):
    """``analyze.load(path)``: the public API's analysis, made as it makes it (the views' notes added to
    ``api.load``'s), from the shared :func:`api_load`."""
    from analyze.attribute.phases import PhaseConfig
    from analyze.views.analysis_notes import with_view_notes

    return _shared("analyze.load", path, lambda: with_view_notes(api_load(path), PhaseConfig()))


def load_side(path):
    """``analyze.tools.sides.load_side(path)``: what whatif and diff read of a report, labelled ``str(path)``; of
    a report or a directory, made as it makes it, from the shared :func:`api_load` (a directory of separate runs:
    load_side's own refusal, with its advice)."""
    from analyze.errors import MixedInputs
    from analyze.tools import sides

    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".json":       # a saved result: no analysis to share
        return _shared("load_side", path, lambda: sides.load_side(path))

    def compute():
        try:
            return sides.side_from_analysis(api_load(path), str(p))
        except MixedInputs:
            return sides.load_side(path)
    return _shared("load_side", path, compute)
