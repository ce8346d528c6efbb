"""A stream gate: the GPU holds a stream until the host says so, so that a CUDA event pair around a graph
launch times the graph's kernels and not the launch call's own host time.

Why: in a host-bound cycle the stream is idle when the start event is recorded, so the event completes at
once while ``cudaGraphLaunch`` still spends its host time building the launch. Under nsys (node-level graph
tracing) that call took 1.0-1.4 ms for real SGLang 0.5.17's 840-kernel verify graph (H100, 2026-12-05), its
first kernel starting 43 us before the call returned: an ungated pair gave verify's replay +35% and draft's
+100% over nsys's span of the same launches' kernels, gated +2% and +9% (12 us). Without a profiler the
launch call is short (0.01-0.03 ms for an 800-kernel graph: ``recipes/gate_check.py``), so the gate matters
most where the timing runs beside nsys; it is exact either way.

How: :meth:`StreamGate.hold` puts a ``cuStreamWaitValue32`` (wait until a pinned host word reaches ``n``)
on the current stream before the start event; :meth:`StreamGate.release` writes ``n`` there once the
launch has returned. The stream then reaches the start event with the graph already queued behind it.
The host never waits for the GPU; the GPU waits at most for the rest of the launch call, on timed
(sampled) cycles only. The wait compares cyclically (``(int32)(*addr - n) >= 0``) and the word only moves
forward (a release of an older number after a newer one writes nothing), so a release frees every earlier
hold, in any thread order.

Never a hang: a launch that waits for the GPU itself (``CUDA_LAUNCH_BLOCKING=1``, a serialising tool such as
Nsight Compute or compute-sanitizer, an old driver's synchronising replay) would wait for a stream that waits
for the host. A watchdog thread releases any hold older than ``timeout_s`` (0.25 s) and marks the gate
``tripped`` (the timer then drops it, counted): the first such launch is late once, none is stuck. The gate is
not made at all under ``CUDA_LAUNCH_BLOCKING`` or with a driver before CUDA 11.4.

Standard library only (ctypes on ``libcuda``); torch looked up in ``sys.modules``, never imported.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Callable

CU_STREAM_WAIT_VALUE_GEQ = 0x0
"""``CUstreamWaitValue_flags``: wait until ``(int32_t)(*addr - value) >= 0``."""
MASK = 0xFFFFFFFF
MIN_DRIVER = 11040
"""``cuDriverGetVersion`` below this (CUDA 11.4): torch's graph replay synchronises the device: no gate."""


class GateError(RuntimeError):
    """The driver refused the wait (the return code of ``cuStreamWaitValue32``)."""


def _ahead(n: int, of: int) -> bool:
    """Is ``n`` after ``of`` in the cyclic 32-bit order the driver's GEQ wait uses?"""
    return 0 < ((n - of) & MASK) < 0x80000000


class StreamGate:
    """``wait(stream, device_address, value, flags) -> CUresult`` (the driver's ``cuStreamWaitValue32``),
    ``stream()`` -> the current stream's handle, ``cell`` a ``ctypes.c_uint32`` over the pinned word whose
    device address is ``device_address``; ``keep``: what owns that memory (kept alive with the gate).
    ``watchdog``: a daemon thread calls :meth:`check` every ``timeout_s / 4`` (tests call it themselves)."""

    def __init__(self, wait: Callable, stream: Callable[[], int], cell, device_address: int, keep=None,
                 timeout_s: float = 0.25, clock: Callable[[], float] = time.monotonic, watchdog: bool = True):
        self._wait, self._stream, self._cell, self._address, self._keep = wait, stream, cell, device_address, keep
        self._n = int(cell.value)
        self.timeout_s, self._clock = timeout_s, clock
        self._hold_lock = threading.Lock()     # one number, one driver call at a time
        self._write_lock = threading.Lock()    # the word moves forward only (release and watchdog)
        self._armed: tuple[int, float] | None = None   # the newest hold not yet released, and its deadline
        self.tripped = False
        self._watchdog = None
        if watchdog:
            self._watchdog = threading.Thread(target=self._watch, name="specprof-gate", daemon=True)
            self._watchdog.start()

    def hold(self) -> int:
        """The current stream waits, from here, for :meth:`release` of the returned number (or a later one)."""
        with self._hold_lock:
            n = (self._n + 1) & MASK
            self._armed = (n, self._clock() + self.timeout_s)      # armed first: a blocking driver call is freed too
            rc = self._wait(ctypes.c_void_p(self._stream()), ctypes.c_uint64(self._address), ctypes.c_uint32(n),
                            ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ))
            if rc != 0:
                self._armed = None
                raise GateError(rc)
            self._n = n
            return n

    def release(self, n: int) -> None:
        """Every hold up to ``n`` may go on."""
        self._advance(n)
        armed = self._armed
        if armed is not None and not _ahead(armed[0], n):
            self._armed = None

    def _advance(self, n: int) -> None:
        with self._write_lock:
            if _ahead(n, int(self._cell.value)):
                self._cell.value = n

    def check(self) -> bool:
        """Release a hold older than ``timeout_s`` (and mark the gate tripped). True when it did."""
        armed = self._armed
        if armed is None or self._clock() < armed[1]:
            return False
        self.tripped = True
        self._advance(armed[0])
        self._armed = None
        return True

    def _watch(self) -> None:
        while True:
            time.sleep(self.timeout_s / 4)
            try:
                self.check()
            except Exception:  # noqa: BLE001 - a watchdog never dies of a hiccup
                pass


def _driver_version(lib) -> int | None:
    version = ctypes.c_int()
    fn = getattr(lib, "cuDriverGetVersion", None)
    if fn is None or fn(ctypes.byref(version)) != 0:
        return None
    return int(version.value)


def torch_stream_gate(environ=None) -> StreamGate | None:
    """A gate on torch's current stream through the CUDA driver, or None (no initialised CUDA in torch, no
    ``libcuda``, ``CUDA_LAUNCH_BLOCKING`` set, a driver before 11.4, no stream memory operations, or any
    error: the launches are then timed ungated)."""
    env = os.environ if environ is None else environ
    if env.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"):
        return None
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_available() or not cuda.is_initialized():
            return None
        lib = ctypes.CDLL("libcuda.so.1")
        version = _driver_version(lib)
        if version is None or version < MIN_DRIVER:
            return None
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
