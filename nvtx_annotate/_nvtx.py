"""NVTX emitters: push/pop ranges and marks in domain ``sglang``.

The default backend (``ctypes``) is a tiny NVTX v3 *client* written with ctypes: it loads the
injection library that the profiler names in ``NVTX_INJECTION64_PATH`` (nsys sets it in every
process it traces), hands it the export tables of the NVTX v3 protocol
(``InitializeInjectionNvtx2(getExportTable)``) and then calls the function pointers the
injection wrote into our slot tables.  This is what the NVTX header does in C; doing it in
Python needs no compiled code and no libnvToolsExt, works without torch and without the
``nvtx`` package, and supports domains and int64 payloads.  Both nsys 2022.4 (schema 3.0) and
2025.3 record these events (checked, see docs/nvtx_annotate.md).

Why not the ``nvtx`` package: nvtx 0.2.17 is built against newer NVTX headers; under nsys
2022.4 only its domain creations are recorded, its ranges and marks are dropped.
``torch.cuda.nvtx`` is recorded by both but has no domains and is absent in CPU builds of
torch; it is the fallback backend.

When no profiler is attached (no injection library) every backend call is a no-op.

Backends (env ``SPECPROF_NVTX_BACKEND``): ``auto`` (default: none when no profiler injection is
present, else ctypes, then torch),
``ctypes``, ``torch``, ``nvtx`` (the nvtx package), ``record`` (in-memory, for tests), ``none``.
"""

from __future__ import annotations

import os
from _thread import allocate_lock, get_ident  # threading's, without importing threading at start

from .protocol import DOMAIN

# Colors (ARGB) per range name, so the timeline is readable.
COLORS = {
    "decode_cycle": 0xFF808080,
    "prefill": 0xFFA0A0A0,
    "draft": 0xFF2E86DE,
    "draft_extend": 0xFF54A0FF,
    "verify": 0xFFEE5253,
    "allreduce": 0xFF10AC84,
    "graph_replay_draft": 0xFF48DBFB,
    "graph_replay_draft_extend": 0xFF0ABDE3,
    "graph_replay_verify": 0xFFFF9F43,
}


class Backend:
    """Interface: push(name, payload=None), pop(), start(name) -> id, end(id),
    mark(text, payload=None). Payloads are int64."""

    name = "none"
    active = False

    def push(self, name: str, payload: int | None = None) -> None:  # pragma: no cover - trivial
        pass

    def pop(self) -> None:  # pragma: no cover - trivial
        pass

    def start(self, name: str) -> int:  # pragma: no cover - trivial
        return 0

    def end(self, range_id: int) -> None:  # pragma: no cover - trivial
        pass

    def mark(self, text: str, payload: int | None = None) -> None:  # pragma: no cover
        pass


class NullBackend(Backend):
    name = "none"


class TorchBackend(Backend):
    """torch.cuda.nvtx: default domain only (no ``sglang`` domain), no payloads."""

    name = "torch"

    def __init__(self):
        self.active = False
        try:
            import torch

            nv = torch.cuda.nvtx
            if type(getattr(nv, "_nvtx", None)).__name__ == "_NVTXStub":
                return  # CPU build of torch: no NVTX
            self._push, self._pop, self._mark = nv.range_push, nv.range_pop, nv.mark
            self._start, self._end = nv.range_start, nv.range_end
            self.active = True
        except Exception:
            pass

    def push(self, name, payload=None):
        self._push(name)

    def pop(self):
        self._pop()

    def start(self, name):
        return self._start(name)

    def end(self, range_id):
        self._end(range_id)

    def mark(self, text, payload=None):
        self._mark(text)


class NvtxPackageBackend(Backend):
    """The ``nvtx`` package (domain ``sglang``). Not recorded by nsys 2022.4."""

    name = "nvtx"

    def __init__(self, domain: str = DOMAIN):
        self.active = False
        try:
            import nvtx

            self._nvtx = nvtx
            self._domain = domain
            self.active = True
        except Exception:
            pass

    def push(self, name, payload=None):
        self._nvtx.push_range(name, domain=self._domain, color=COLORS.get(name, 0xC8D6E5) & 0xFFFFFF,
                              payload=payload)

    def pop(self):
        self._nvtx.pop_range(domain=self._domain)

    def start(self, name):
        return self._nvtx.start_range(name, domain=self._domain, color=COLORS.get(name, 0xC8D6E5) & 0xFFFFFF)

    def end(self, range_id):
        self._nvtx.end_range(range_id)

    def mark(self, text, payload=None):
        self._nvtx.mark(text, domain=self._domain, payload=payload)


class RecordingBackend(Backend):
    """Keeps events in memory (tests): ``(kind, text, thread id, value)`` with kind ``push``
    (value: payload), ``pop``, ``start`` (value: range id), ``end`` (value: range id), ``mark``
    (value: payload)."""

    name = "record"

    def __init__(self):
        self.active = True
        self.events = []
        self._lock = allocate_lock()
        self._next_id = 0

    def _add(self, kind, text, value):
        with self._lock:
            self.events.append((kind, text, get_ident(), value))

    def push(self, name, payload=None):
        self._add("push", name, payload)

    def pop(self):
        self._add("pop", None, None)

    def start(self, name):
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            self.events.append(("start", name, get_ident(), rid))
        return rid

    def end(self, range_id):
        self._add("end", None, range_id)

    def mark(self, text, payload=None):
        self._add("mark", text, payload)

    def ranges(self):
        """Completed push/pop and start/end ranges as (name, depth) in start order; depth is the
        push/pop nesting on the range's thread (start/end ranges: 0)."""
        out, stacks = [], {}
        for kind, name, tid, _ in self.events:
            if kind == "push":
                st = stacks.setdefault(tid, [])
                out.append((name, len(st)))
                st.append(name)
            elif kind == "pop":
                stacks[tid].pop()
            elif kind == "start":
                out.append((name, 0))
        return out

    def payloads(self, name):
        """Payloads of the pushes of ``name``, in order."""
        return [v for kind, text, _, v in self.events if kind == "push" and text == name]

    def balanced(self) -> bool:
        """Every push popped on its thread, no pop without push, every start ended once."""
        depth, open_ids = {}, set()
        for kind, _, tid, value in self.events:
            if kind == "push":
                depth[tid] = depth.get(tid, 0) + 1
            elif kind == "pop":
                if depth.get(tid, 0) == 0:
                    return False
                depth[tid] -= 1
            elif kind == "start":
                open_ids.add(value)
            elif kind == "end":
                if value not in open_ids:
                    return False
                open_ids.discard(value)
        return not open_ids and not any(depth.values())

    def marks(self):
        return [(t, p) for k, t, _, p in self.events if k == "mark"]


_backend: Backend | None = None
_lock = allocate_lock()


def _reset_after_fork() -> None:
    # a forked child re-initializes its own client on first use (the injection is per process)
    global _backend
    _backend = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def make_backend(kind: str | None = None) -> Backend:
    kind = (kind or os.environ.get("SPECPROF_NVTX_BACKEND") or "auto").lower()
    if kind == "none":
        return NullBackend()
    if kind == "record":
        return RecordingBackend()
    from ._nvtx_ctypes import CtypesBackend, injection_present  # ctypes loaded only here

    order = {
        "auto": [CtypesBackend, TorchBackend],
        "ctypes": [CtypesBackend],
        "torch": [TorchBackend],
        "nvtx": [NvtxPackageBackend],
    }.get(kind)
    if order is None:
        raise ValueError(f"unknown SPECPROF_NVTX_BACKEND={kind!r}")
    if kind == "auto" and not injection_present():
        return NullBackend()  # no profiler attached: every call would be dropped anyway
    for cls in order:
        b = cls()
        if b.active:
            return b
    return NullBackend()


def __getattr__(name):
    """The ctypes client's names (``CtypesBackend``, ``_Attr``), loaded on first use."""
    if name in ("CtypesBackend", "_Attr"):
        from . import _nvtx_ctypes

        return getattr(_nvtx_ctypes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_backend() -> Backend:
    """The process's backend, created on first use (again in a forked child)."""
    global _backend
    b = _backend
    if b is None:
        with _lock:
            if _backend is None:
                _backend = make_backend()
            b = _backend
    return b


def set_backend(backend: Backend | None) -> Backend | None:
    """Replace the process's backend (tests); returns the previous one."""
    global _backend
    prev = _backend
    _backend = backend
    return prev


def push(name: str, payload: int | None = None) -> None:
    (_backend or get_backend()).push(name, payload)


def pop() -> None:
    (_backend or get_backend()).pop()


def start(name: str) -> int:
    return (_backend or get_backend()).start(name)


def end(range_id: int) -> None:
    (_backend or get_backend()).end(range_id)


def mark(text: str, payload: int | None = None) -> None:
    (_backend or get_backend()).mark(text, payload)
