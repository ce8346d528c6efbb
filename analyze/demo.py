"""The demo trace ``analyze-trace`` runs with no argument: a real 4-process H200 export (nsys
2025.3.1), shipped xz-compressed as package data and unpacked once into the user's cache."""
from __future__ import annotations

import hashlib
import lzma
import os
import tempfile
from importlib import resources

DEMO_NAME = "h200_4proc_eager.sqlite"
_CHUNK = 1 << 20


def _cache_dirs():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    yield os.path.join(base, "specprof", "demo")
    yield os.path.join(tempfile.gettempdir(), f"specprof-demo-{os.getuid() if hasattr(os, 'getuid') else 0}")


def unpack_xz(src, dest: str) -> str:
    """Decompresses ``src`` (a path or a ``resources`` file) to ``dest`` unless ``dest`` already
    holds it (same size and sha256 as recorded in ``dest + '.sha256'``); atomic (temporary file in
    the same directory, then rename), so a reader never sees half a file."""
    stamp = dest + ".sha256"
    if os.path.isfile(dest) and os.path.isfile(stamp):
        with open(stamp) as f:
            want = f.read().split()
        if len(want) == 2 and str(os.path.getsize(dest)) == want[1]:
            return dest
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".unpack-", dir=os.path.dirname(dest) or ".")
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, (src.open("rb") if hasattr(src, "open") and not isinstance(src, str)
                                          else open(src, "rb")) as raw, lzma.open(raw) as xz:
            while True:
                block = xz.read(_CHUNK)
                if not block:
                    break
                digest.update(block)
                out.write(block)
        os.chmod(tmp, 0o444)
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    with open(stamp + ".tmp", "w") as f:
        f.write(f"{digest.hexdigest()} {os.path.getsize(dest)}\n")
    os.replace(stamp + ".tmp", stamp)
    return dest


def demo_trace() -> str:
    """Path of the unpacked demo trace (unpacked on first use)."""
    src = resources.files("analyze") / "data" / (DEMO_NAME + ".xz")
    last_error = None
    for d in _cache_dirs():
        try:
            return unpack_xz(src, os.path.join(d, DEMO_NAME))
        except OSError as exc:  # cache not writable: try the next place
            last_error = exc
    raise last_error  # pragma: no cover
