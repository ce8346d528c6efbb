"""Giving freed memory back to the operating system between the stages of a big analysis.

glibc keeps freed heap memory (the reader's batch buffers, pandas' temporaries) in its arenas, so
the resident size stays at its high-water mark even when the arrays are gone; ``malloc_trim(0)``
hands it back (measured: ~210 MB after reading the NVTX events of a 10M-kernel report). A no-op
where glibc is not the allocator.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import sys
from typing import Iterator

_LIBC = None


def _libc():
    """glibc with the prototypes used here (loaded once), or None where it is not the C library."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
            _LIBC.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def release() -> None:
    """``malloc_trim(0)``: the free heap back to the system. No ``gc.collect()`` before it (there was one
    until 2026-12-05): the analysis' arrays are freed by reference counting, not by the cyclic collector,
    and a full collection scans every object of the process (55 ms after the CLI's imports, ~95 ms in
    the test suite, six times per report under ``--memory-budget``). Measured without it (2 pairs each):
    SGLang 10M under ``--memory-budget 1GB`` 13.9-14.0 s / 1.01 GB peak against 14.3-14.5 s / 1.00-1.01
    GB, whole 11.2-11.3 s / 1.66-1.69 GB against 11.4 s / 1.67-1.69 GB, real 1M under 200MB 4.6-4.7 s /
    554-556 MB against 4.6-4.8 s / 556-558 MB; the suite's chunked tests spent 44 s of 149 s in it."""
    libc = _libc()
    if libc:
        libc.malloc_trim(0)


# a report analysed whole with at least this many GPU ops hands its free heap back twice: before its
# per-op table is made (run/mapstep.py) and once its result is (run/api.py); and an analysis of at
# least this many ops once more after its reports are combined (api.load); the map step's freed
# temporaries (a few hundred MB at 10M ops) would otherwise stay resident under every later stage's;
# below it, faulting those pages in again costs more than it saves
TRIM_AFTER_OPS = 4_000_000
# (issue 42, 2026-12-05: never trimming at synth 10M: 1.09x peak, 1970 -> 2148 MiB, 1.06x wall; trimming at
# synth 1M: 0.95x peak, 1.02x wall, real and sglang 1M 1.00x peak)


def small_pages() -> None:
    """Ask numpy not to ``madvise(MADV_HUGEPAGE)`` its big arrays (the analyze-trace CLI calls this;
    ``SPECPROF_HUGEPAGES=1`` keeps numpy's default). Where the kernel compacts memory to fault in
    a huge page (``transparent_hugepage/defrag = madvise``, the usual default), the analysis'
    fresh arrays cost more in page faults than the fewer TLB misses save: measured on the 1M-kernel
    real trace, 0.8-0.9 s of system time instead of 1.4-1.9 s (bench, docs/performance.md)."""
    if os.environ.get("SPECPROF_HUGEPAGES") == "1":
        return
    try:
        import numpy as np
        core = getattr(np, "_core", None) or np.core          # numpy 2 / numpy 1
        core.multiarray._set_madvise_hugepage(False)
    except (ImportError, AttributeError):
        pass


# glibc mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1     # free memory at the heap's top above this is given back at once
M_MMAP_MAX = -4           # how many blocks may have an mmap of their own (0: none)
M_ARENA_MAX = -8
TRIM_THRESHOLD_BYTES = 2**31 - 1      # the largest an int takes: free() never trims (release() does)


def one_heap() -> None:
    """One malloc arena for every thread, and Arrow's buffers from that same malloc (the
    analyze-trace CLI calls this first, before any thread starts; ``SPECPROF_ALLOCATOR=default``
    keeps glibc's and Arrow's defaults). The readers' threads (then connectorx's, the pool's) each got
    an arena of their own, and Arrow its mimalloc heap: memory freed in one was never reused by
    another, so the analysis faulted in fresh pages all along and its peak held every arena's
    high-water mark. Measured on the 10M-kernel file (bench/results.md's file, ``/usr/bin/time``):
    12.8 s wall, 5.6 s system time, 3.12 GB peak with the defaults; 10.4 s, 3.2 s, 2.61 GB with one
    arena and the system pool (docs/performance.md).

    And that one heap keeps what is freed for the next allocation: glibc gives a block above its
    mmap threshold (128 KiB, rising to at most 32 MiB as such blocks are freed: every column of 4M
    int64 and more) an ``mmap`` of its own and unmaps it when freed, so each such temporary of the
    analysis was fresh memory the kernel faulted in and zeroed page by page (the 10M-kernel file:
    1.1-1.5M page faults, 5.6-9.8 s of system time). With no ``mmap`` and no trimming of the heap's
    top at every ``free`` the blocks are reused: 0.63-0.67M faults, 3.6-5.1 s (docs/performance.md,
    eighteenth round). :func:`release` still hands the free pages back between the stages of a big
    analysis, and the peaks stay where they were (1.92 GiB at 10M; 0.85 GiB under a 1GB budget)."""
    if os.environ.get("SPECPROF_ALLOCATOR") == "default":
        return
    libc = _libc()
    if libc:
        libc.mallopt(M_ARENA_MAX, 1)
        libc.mallopt(M_MMAP_MAX, 0)
        libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    try:
        import pyarrow as pa
        pa.set_memory_pool(pa.system_memory_pool())
    except (ImportError, AttributeError, NotImplementedError):
        pass


# the module whose first load marks a process' start-up (modules_load_without_gc)
STARTUP_MODULE = "pandas"


@contextlib.contextmanager
def modules_load_without_gc() -> Iterator[None]:
    """Python's cyclic garbage collector paused while the analysis' modules load. Importing pandas
    creates about 100k container objects and almost no garbage; the collections they trigger scan
    them again and again (generation 0 every 700 allocations, generation 2 once): the import of
    the analysis' modules took 0.12 s less wall time without them (docs/performance.md,
    twenty-third round). When the load is the process' start-up (it brought in
    :data:`STARTUP_MODULE`) what the heap then holds, the modules' objects, is frozen too
    (``gc.freeze``: never scanned by later collections). Only then: a freeze pins every object
    alive at that moment for good, garbage cycles included, and a process that ran something
    before (a notebook, the test suite) may have some. The collector is left as it was found:
    one the user turned off stays off."""
    was_enabled = gc.isenabled()
    start_up = STARTUP_MODULE not in sys.modules
    try:
        gc.disable()
        yield
    finally:
        if start_up and STARTUP_MODULE in sys.modules:
            gc.freeze()
        if was_enabled:
            gc.enable()


def available_bytes() -> int | None:
    """What the kernel says can be allocated without swapping (``MemAvailable``), or None where
    /proc/meminfo is not there."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
