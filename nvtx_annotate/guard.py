"""When the shim must not call NVTX: a CUDA graph is being captured on this thread, or
torch.compile / dynamo is tracing (such ranges would be recorded once, at capture, and never at
replay; NVTX calls inside a dynamo trace would be graph breaks).

* Capture: ``torch.cuda.CUDAGraph.capture_begin/capture_end`` (what ``torch.cuda.graph``, SGLang's
  graph runners and torch's cudagraph trees use) are wrapped to count open captures **per
  thread**: a capture on one thread never silences another thread. Reading the count costs one
  thread-local attribute read.
* :func:`skip_exact` (the all-reduce targets, which run inside captured forwards) also asks CUDA
  whether the **current stream** is capturing (``torch.cuda.is_current_stream_capturing``), but
  only once CUDA is initialised in the process (``torch.cuda._initialized``, read at every call):
  before that nothing can be capturing, and CPU builds never ask.
* torch.compile: ``torch.compiler.is_compiling()``.

Nothing negative is cached: until torch (with ``torch.cuda`` and ``torch.compiler``) is imported
the guard answers False and looks again at the next call; the hook is installed the first time
torch is complete.
"""

from __future__ import annotations

import sys
from _thread import _local  # threading.local, without importing threading at interpreter start

_HOOK_FLAG = "__specprof_capture_hook__"


class _Captures(_local):
    depth = 0


_captures = _Captures()
_state = {"compiling": None, "cuda": None, "capturing": None}


def capture_depth() -> int:
    """Open CUDA graph captures on this thread."""
    return _captures.depth


def _hook_graph_capture(torch) -> None:
    cls = getattr(getattr(getattr(torch, "cuda", None), "graphs", None), "CUDAGraph", None)
    if cls is None or getattr(cls, _HOOK_FLAG, False):
        return
    import functools

    begin, end = cls.capture_begin, cls.capture_end

    def capture_begin(self, *a, **k):
        _captures.depth += 1
        try:
            return begin(self, *a, **k)
        except BaseException:
            _captures.depth = max(0, _captures.depth - 1)
            raise

    def capture_end(self, *a, **k):
        try:
            return end(self, *a, **k)
        finally:
            _captures.depth = max(0, _captures.depth - 1)

    functools.update_wrapper(capture_begin, begin)
    functools.update_wrapper(capture_end, end)
    cls.capture_begin, cls.capture_end = capture_begin, capture_end
    setattr(cls, _HOOK_FLAG, True)


def _resolve() -> bool:
    """Finds torch's functions once torch is fully imported; False (and nothing kept) before."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    compiler = getattr(torch, "compiler", None) if torch is not None else None
    compiling = getattr(compiler, "is_compiling", None)
    if cuda is None or compiling is None:
        return False
    try:
        _hook_graph_capture(torch)
    except Exception:  # pragma: no cover - defensive: a torch without CUDAGraph
        pass
    _state["cuda"] = cuda
    _state["capturing"] = getattr(cuda, "is_current_stream_capturing", None)
    _state["compiling"] = compiling
    return True


def install_hook() -> bool:
    """Hook the capture counter now if torch is complete (install() calls it)."""
    return _state["compiling"] is not None or _resolve()


def skip() -> bool:
    """True while this thread captures a CUDA graph or torch.compile traces."""
    if _captures.depth:
        return True
    compiling = _state["compiling"]
    if compiling is None:
        if not _resolve():
            return False
        compiling = _state["compiling"]
    return bool(compiling())


def skip_exact() -> bool:
    """:func:`skip`, or the current CUDA stream is capturing (asked only once CUDA is initialised)."""
    if skip():
        return True
    cuda = _state["cuda"]
    if cuda is None or not getattr(cuda, "_initialized", True):
        return False
    capturing = _state["capturing"]
    if capturing is None:
        return False
    try:
        return bool(capturing())
    except Exception:
        return False
