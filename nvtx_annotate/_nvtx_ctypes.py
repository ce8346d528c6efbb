"""The NVTX v3 client written with ctypes (see ``_nvtx``): loads the injection library the
profiler names in ``NVTX_INJECTION64_PATH`` (or a preloaded one), hands it the NVTX v3 export
tables (``InitializeInjectionNvtx2(getExportTable)``) and calls the function pointers the
injection writes back. Imported only when a backend is made, so that the shim does not load
ctypes at interpreter start."""

from __future__ import annotations

import ctypes as C
import os
import threading

from ._nvtx import COLORS, Backend
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


class CtypesBackend(Backend):
    """NVTX v3 client over ctypes (see module doc)."""

    name = "ctypes"

    def __init__(self, injection_path: str | None = None, domain: str = DOMAIN):
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
    def _new_attr(name: str, payload: int | None = None) -> _Attr:
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

    def push(self, name: str, payload: int | None = None) -> None:
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

    def mark(self, text: str, payload: int | None = None) -> None:
        if self._use_domain and self._dmark:
            # marks carry per-cycle text: a fresh struct each, never cached
            self._dmark(self._domain, C.byref(self._new_attr(text, payload)))
        elif self._mark_a:
            self._mark_a(text.encode())


def injection_present() -> bool:
    """A profiler's NVTX injection is there (named by NVTX_INJECTION64_PATH, or preloaded)."""
    if os.environ.get("NVTX_INJECTION64_PATH"):
        return True
    try:
        C.CDLL(None).InitializeInjectionNvtx2  # noqa: B018 - preloaded injection
        return True
    except (OSError, AttributeError):
        return False
