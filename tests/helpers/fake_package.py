"""A fake SGLang-like package written into a temporary directory and importable for one test, with the
shim's NVTX calls recorded (``_nvtx.RecordingBackend``); on exit the shim is uninstalled from it, its
modules forgotten and the backend restored (tests/test_nvtx_annotate.py, tests/test_live_timing.py)."""
from __future__ import annotations

import contextlib
import sys
import textwrap

from nvtx_annotate import _nvtx, shim, wrappers


def write_package(tmp_path, monkeypatch, name: str, files: dict[str, str]) -> str:
    """Writes package ``name`` under ``tmp_path`` (``files``: {relative path: source, dedented}, plus an
    empty ``__init__.py``) and puts ``tmp_path`` first on sys.path; returns ``name``."""
    for rel, src in files.items():
        p = tmp_path / name / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@contextlib.contextmanager
def fake_package(tmp_path, monkeypatch, prefix: str, files: dict[str, str]):
    """Yields (package name, recording backend); ``files``: {relative path: source (dedented)}."""
    name = write_package(tmp_path, monkeypatch, prefix + tmp_path.name.replace("-", "_")[-20:], files)
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    wrappers.reset_for_tests()
    try:
        yield name, rec
    finally:
        shim.uninstall(name)
        for m in [m for m in sys.modules if m.startswith(name)]:
            del sys.modules[m]
        _nvtx.set_backend(prev)
        wrappers.reset_for_tests()
