"""A stream gate: the GPU holds a stream until the host says so, so that a CUDA event pair around a graph
launch times the graph's kernels and not the launch's own host time.

Why: in a host-bound cycle the stream is idle when the start event is recorded, so the event completes at
once, while ``cudaGraphLaunch`` still spends its host time building the launch (on real SGLang 0.5.17 on an
H100, 2026-12-05: 1.0-1.4 ms for verify's 840-kernel graph, its first kernel 43 us before the call
returned; about 0.1 ms for draft's 46 kernels). An ungated pair gave verify's replay +35% and draft's +100%
over nsys's span of the same launches' kernels.

How: :meth:`StreamGate.hold` puts a ``cuStreamWaitValue32`` (wait until a pinned host word reaches ``n``)
on the current stream before the start event; :meth:`StreamGate.release` writes ``n`` there once the
launch has returned. The stream then reaches the start event with the graph already queued behind it.
The host never waits for the GPU; the GPU waits at most for the rest of the launch call (the graph's first
kernel is delayed by the ~43 us it would have started early), on timed (sampled) cycles only. The wait
compares cyclically (``(int32)(*addr - n) >= 0``), so a release of a later ``n`` frees every earlier hold
and a hold whose release was somehow skipped is freed by the next one. Never held during a capture.

Standard library only (ctypes on ``libcuda``); torch looked up in ``sys.modules``, never imported.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

CU_STREAM_WAIT_VALUE_GEQ = 0x0
"""``CUstreamWaitValue_flags``: wait until ``(int32_t)(*addr - value) >= 0``."""


class GateError(RuntimeError):
    """The driver refused the wait (the return code of ``cuStreamWaitValue32``)."""


class StreamGate:
    """``wait(stream, device_address, value, flags) -> CUresult`` (the driver's ``cuStreamWaitValue32``),
    ``stream()`` -> the current stream's handle, ``cell`` a ``ctypes.c_uint32`` over the pinned word whose
    device address is ``device_address``; ``keep``: what owns that memory (kept alive with the gate)."""

    def __init__(self, wait: Callable, stream: Callable[[], int], cell, device_address: int, keep=None):
        self._wait, self._stream, self._cell, self._address, self._keep = wait, stream, cell, device_address, keep
        self._n = int(cell.value)

    def hold(self) -> int:
        """The current stream waits, from here, for :meth:`release` of the returned number."""
        n = (self._n + 1) & 0xFFFFFFFF
        rc = self._wait(ctypes.c_void_p(self._stream()), ctypes.c_uint64(self._address), ctypes.c_uint32(n),
                        ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ))
        if rc != 0:
            raise GateError(rc)
        self._n = n
        return n

    def release(self, n: int) -> None:
        self._cell.value = n


def torch_stream_gate() -> StreamGate | None:
    """A gate on torch's current stream through the CUDA driver, or None (no initialised CUDA in torch, no
    ``libcuda``, no stream memory operations, or any error: the launches are then timed ungated)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return None
        lib = ctypes.CDLL("libcuda.so.1")
        wait = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
        wait.restype = ctypes.c_int
        wait.argtypes = (ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)
        device_pointer = getattr(lib, "cuMemHostGetDevicePointer_v2", None) or lib.cuMemHostGetDevicePointer
        device_pointer.restype = ctypes.c_int
        device_pointer.argtypes = (ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint)
        word = torch.zeros(1, dtype=torch.int32, pin_memory=True)
        address = ctypes.c_uint64()
        if device_pointer(ctypes.byref(address), ctypes.c_void_p(word.data_ptr()), 0) != 0:
            return None
        cell = ctypes.c_uint32.from_address(word.data_ptr())

        def stream() -> int:
            return cuda.current_stream().cuda_stream
        gate = StreamGate(wait, stream, cell, address.value, keep=word)
        gate.release(gate.hold())      # one round trip now: a driver without stream memory operations says so
        return gate
    except Exception:
        return None
