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

import ctypes as C
import os
import threading
from typing import Optional

from .protocol import DOMAIN

# NVTX v3 protocol constants (nvtxTypes.h)
_MODULE_SIZES = {1: 16, 2: 9, 3: 15, 4: 7, 5: 16, 6: 7}  # CORE, CUDA, OPENCL, CUDART, CORE2, SYNC
_CORE_MARK_A, _CORE_RANGE_START_A, _CORE_RANGE_END, _CORE_RANGE_PUSH_A, _CORE_RANGE_POP = 2, 5, 7, 9, 11
_CORE2_MARK_EX, _CORE2_START_EX, _CORE2_END, _CORE2_PUSH_EX, _CORE2_POP, _CORE2_CREATE_A = 1, 2, 3, 4, 5, 12
_ETID_CALLBACKS, _ETID_VERSIONINFO = 1, 3
_NVTX_VERSION = 3
_COLOR_ARGB = 1
_PAYLOAD_INT64 = 2
_MESSAGE_ASCII = 1


class _Attr(C.Structure):
    """nvtxEventAttributes_v2 (48 bytes on 64-bit)."""

    _fields_ = [
        ("version", C.c_uint16),
        ("size", C.c_uint16),
        ("category", C.c_uint32),
        ("colorType", C.c_int32),
        ("color", C.c_uint32),
        ("payloadType", C.c_int32),
        ("reserved0", C.c_int32),
        ("payload", C.c_int64),
        ("messageType", C.c_int32),
        ("message", C.c_char_p),
    ]


_GETMOD = C.CFUNCTYPE(C.c_int, C.c_int, C.POINTER(C.c_void_p), C.POINTER(C.c_uint))
_SETVER = C.CFUNCTYPE(None, C.c_uint32)
_GETET = C.CFUNCTYPE(C.c_void_p, C.c_uint32)


class _Callbacks(C.Structure):
    _fields_ = [("struct_size", C.c_size_t), ("GetModuleFunctionTable", _GETMOD)]


class _VersionInfo(C.Structure):
    _fields_ = [
        ("struct_size", C.c_size_t),
        ("version", C.c_uint32),
        ("reserved0", C.c_uint32),
        ("SetInjectionNvtxVersion", _SETVER),
    ]


# Colors (ARGB) per range name, so the timeline is readable.
COLORS = {
    "decode_cycle": 0xFF808080,
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

    def push(self, name: str, payload: Optional[int] = None) -> None:  # pragma: no cover - trivial
        pass

    def pop(self) -> None:  # pragma: no cover - trivial
        pass

    def start(self, name: str) -> int:  # pragma: no cover - trivial
        return 0

    def end(self, range_id: int) -> None:  # pragma: no cover - trivial
        pass

    def mark(self, text: str, payload: Optional[int] = None) -> None:  # pragma: no cover
        pass


class NullBackend(Backend):
    name = "none"


class CtypesBackend(Backend):
    """NVTX v3 client over ctypes (see module doc)."""

    name = "ctypes"

    def __init__(self, injection_path: Optional[str] = None, domain: str = DOMAIN):
        self.active = False
        self._keep = []  # keeps ctypes objects (callbacks, tables) alive
        lib_init = self._find_init(injection_path)
        if lib_init is None:
            return
        slots = {m: (C.c_void_p * (n + 1))() for m, n in _MODULE_SIZES.items()}
        tables = {}
        psize = C.sizeof(C.c_void_p)
        for m, n in _MODULE_SIZES.items():
            t = (C.c_void_p * (n + 1))()
            base = C.addressof(slots[m])
            for i in range(1, n + 1):
                t[i] = base + i * psize
            tables[m] = t

        def getmod(module, out_table, out_size):
            if module not in tables:
                return 0
            if out_size:
                out_size[0] = _MODULE_SIZES[module]
            if out_table:
                out_table[0] = C.addressof(tables[module])
            return 1

        getmod_c = _GETMOD(getmod)
        setver_c = _SETVER(lambda v: None)
        cb = _Callbacks(C.sizeof(_Callbacks), getmod_c)
        vi = _VersionInfo(C.sizeof(_VersionInfo), _NVTX_VERSION, 0, setver_c)

        def getet(i):
            if i == _ETID_CALLBACKS:
                return C.addressof(cb)
            if i == _ETID_VERSIONINFO:
                return C.addressof(vi)
            return None

        getet_c = _GETET(getet)
        self._keep += [slots, tables, getmod_c, setver_c, cb, vi, getet_c, getmod, getet]
        lib_init.argtypes = [_GETET]
        lib_init.restype = C.c_int
        if not lib_init(getet_c):
            return
        core, core2 = slots[1], slots[5]
        self._push_a = self._fn(core[_CORE_RANGE_PUSH_A], C.c_int, C.c_char_p)
        self._pop = self._fn(core[_CORE_RANGE_POP], C.c_int)
        self._start_a = self._fn(core[_CORE_RANGE_START_A], C.c_uint64, C.c_char_p)
        self._end = self._fn(core[_CORE_RANGE_END], None, C.c_uint64)
        self._mark_a = self._fn(core[_CORE_MARK_A], None, C.c_char_p)
        create = self._fn(core2[_CORE2_CREATE_A], C.c_void_p, C.c_char_p)
        self._dpush = self._fn(core2[_CORE2_PUSH_EX], C.c_int, C.c_void_p, C.POINTER(_Attr))
        self._dpop = self._fn(core2[_CORE2_POP], C.c_int, C.c_void_p)
        self._dstart = self._fn(core2[_CORE2_START_EX], C.c_uint64, C.c_void_p, C.POINTER(_Attr))
        self._dend = self._fn(core2[_CORE2_END], None, C.c_void_p, C.c_uint64)
        self._dmark = self._fn(core2[_CORE2_MARK_EX], None, C.c_void_p, C.POINTER(_Attr))
        self._domain = create(domain.encode()) if create else None
        self._use_domain = bool(self._domain and self._dpush and self._dpop)
        if not (self._use_domain or (self._push_a and self._pop)):
            return
        self._attr_cache = {}
        self._tls = threading.local()  # per thread: one attribute struct per name for payload pushes
        self.active = True

    @staticmethod
    def _fn(addr, restype, *argtypes):
        if not addr:
            return None
        return C.CFUNCTYPE(restype, *argtypes)(addr)

    @staticmethod
    def _find_init(path):
        path = path or os.environ.get("NVTX_INJECTION64_PATH")
        try:
            if path:
                return C.CDLL(path).InitializeInjectionNvtx2
            # A pre-loaded injection (LD_PRELOAD) exports the symbol globally.
            return C.CDLL(None).InitializeInjectionNvtx2
        except (OSError, AttributeError):
            return None

    @staticmethod
    def _new_attr(name: str, payload: Optional[int] = None) -> _Attr:
        a = _Attr()
        a.version = _NVTX_VERSION
        a.size = C.sizeof(_Attr)
        a.colorType = _COLOR_ARGB
        a.color = COLORS.get(name, 0xFFC8D6E5)
        if payload is not None:
            a.payloadType = _PAYLOAD_INT64
            a.payload = int(payload)
        a.messageType = _MESSAGE_ASCII
        a.message = name.encode("utf-8", "replace")
        return a

    def _attr(self, name: str):
        """The (cached) attributes of a range name without payload."""
        a = self._attr_cache.get(name)
        if a is None:
            a = C.byref(self._new_attr(name))
            if len(self._attr_cache) < 4096:
                self._attr_cache[name] = a
        return a

    def _payload_attr(self, name: str, payload: int):
        """This thread's attribute struct of ``name`` with its payload set to ``payload``."""
        cache = self._tls.__dict__
        entry = cache.get(name)
        if entry is None:
            a = self._new_attr(name, 0)
            entry = cache[name] = (a, C.byref(a))
        entry[0].payload = payload
        return entry[1]

    def push(self, name: str, payload: Optional[int] = None) -> None:
        if self._use_domain:
            self._dpush(self._domain, self._attr(name) if payload is None else self._payload_attr(name, payload))
        else:
            self._push_a(name.encode())

    def pop(self) -> None:
        if self._use_domain:
            self._dpop(self._domain)
        else:
            self._pop()

    def start(self, name: str) -> int:
        if self._use_domain and self._dstart:
            return self._dstart(self._domain, self._attr(name))
        if self._start_a:
            return self._start_a(name.encode())
        return 0

    def end(self, range_id: int) -> None:
        if self._use_domain and self._dend:
            self._dend(self._domain, range_id)
        elif self._end:
            self._end(range_id)

    def mark(self, text: str, payload: Optional[int] = None) -> None:
        if self._use_domain and self._dmark:
            # marks carry per-cycle text: a fresh struct each, never cached
            self._dmark(self._domain, C.byref(self._new_attr(text, payload)))
        elif self._mark_a:
            self._mark_a(text.encode())


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
        self._lock = threading.Lock()
        self._next_id = 0

    def _add(self, kind, text, value):
        with self._lock:
            self.events.append((kind, text, threading.get_ident(), value))

    def push(self, name, payload=None):
        self._add("push", name, payload)

    def pop(self):
        self._add("pop", None, None)

    def start(self, name):
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            self.events.append(("start", name, threading.get_ident(), rid))
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


_backend: Optional[Backend] = None
_lock = threading.Lock()


def _reset_after_fork() -> None:
    # a forked child re-initializes its own client on first use (the injection is per process)
    global _backend
    _backend = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)


def make_backend(kind: Optional[str] = None) -> Backend:
    kind = (kind or os.environ.get("SPECPROF_NVTX_BACKEND") or "auto").lower()
    if kind == "none":
        return NullBackend()
    if kind == "record":
        return RecordingBackend()
    order = {
        "auto": [CtypesBackend, TorchBackend],
        "ctypes": [CtypesBackend],
        "torch": [TorchBackend],
        "nvtx": [NvtxPackageBackend],
    }.get(kind)
    if order is None:
        raise ValueError(f"unknown SPECPROF_NVTX_BACKEND={kind!r}")
    if kind == "auto" and not _injection_present():
        return NullBackend()  # no profiler attached: every call would be dropped anyway
    for cls in order:
        b = cls()
        if b.active:
            return b
    return NullBackend()


def _injection_present() -> bool:
    if os.environ.get("NVTX_INJECTION64_PATH"):
        return True
    try:
        C.CDLL(None).InitializeInjectionNvtx2  # noqa: B018 - preloaded injection
        return True
    except (OSError, AttributeError):
        return False


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


def set_backend(backend: Optional[Backend]) -> Optional[Backend]:
    """Replace the process's backend (tests); returns the previous one."""
    global _backend
    prev = _backend
    _backend = backend
    return prev


def push(name: str, payload: Optional[int] = None) -> None:
    (_backend or get_backend()).push(name, payload)


def pop() -> None:
    (_backend or get_backend()).pop()


def start(name: str) -> int:
    return (_backend or get_backend()).start(name)


def end(range_id: int) -> None:
    (_backend or get_backend()).end(range_id)


def mark(text: str, payload: Optional[int] = None) -> None:
    (_backend or get_backend()).mark(text, payload)
