"""Processes: SIGTERM handled as SIGINT is (temporary files removed on the way out), worker processes
that die with their parent, and a bounded number of them.

* :func:`terminate_as_interrupt`: while open, SIGTERM raises :class:`Terminated` in the main thread,
  so every ``except BaseException``/``finally`` that removes a temporary output (analyze/atomic.py,
  the chunked analysis' spill directory, the cache's staging directory) runs, exactly as on Ctrl-C.
* :func:`worker_pool`: a process pool whose workers ask the kernel to send them SIGTERM when their
  parent dies (``PR_SET_PDEATHSIG``, Linux) and handle it as above; when the parent leaves the pool
  on an exception (SIGTERM, Ctrl-C, an error) it kills the workers instead of waiting for them.
* :func:`bounded_jobs`: never more workers than CPU cores or reports.
* :func:`single_threaded_blas`: NumPy's OpenBLAS without its thread pool (the CLI, before NumPy loads).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from typing import Iterator

__all__ = ["Terminated", "terminate_as_interrupt", "worker_pool", "bounded_jobs", "die_with_parent",
           "single_threaded_blas", "EXIT_TERMINATED"]

EXIT_TERMINATED = 128 + signal.SIGTERM      # 143, what a shell reports for a process ended by SIGTERM
PR_SET_PDEATHSIG = 1


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt (not an Exception: nothing swallows it)."""


def _raise_terminated(signum, frame):
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits (Linux
    ``prctl(PR_SET_PDEATHSIG)``); False where that is not available. A parent that is already gone
    (re-parented to init before this call) ends this process at once."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        ok = libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    if ok and os.getppid() == 1:
        os._exit(EXIT_TERMINATED)
    return ok


# a worker on SIGTERM: this long for the unwinding (temporary files removed), then it exits
WORKER_EXIT_AFTER_S = 2.0


def _worker_terminated(signum, frame):
    # the pool's worker loop catches every exception of a task and waits for the next one: exit
    # once the task's clean-up has run, whatever the loop does with the exception
    timer = threading.Timer(WORKER_EXIT_AFTER_S, os._exit, (EXIT_TERMINATED,))
    timer.daemon = True
    timer.start()
    raise Terminated(f"signal {signum}")


def _worker_init() -> None:
    signal.signal(signal.SIGTERM, _worker_terminated)
    die_with_parent(signal.SIGTERM)


@contextlib.contextmanager
def worker_pool(max_workers: int):
    """A ``ProcessPoolExecutor`` of ``max_workers`` processes that die with this one; on an exception
    leaving the block its workers are killed, not waited for."""
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=max(1, int(max_workers)), initializer=_worker_init)
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)


def kill_workers(pool) -> None:
    """End every worker of ``pool`` now (SIGKILL) and drop its pending work."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.kill()
    with contextlib.suppress(Exception):
        pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.join(timeout=5)


def bounded_jobs(jobs: int | None, n_reports: int) -> int:
    """Workers to start: ``jobs`` (default: the CPU cores), at most the cores and the reports, at least 1."""
    cores = os.cpu_count() or 1
    want = cores if jobs is None else int(jobs)
    return max(1, min(want, cores, max(int(n_reports), 1)))


# the variables OpenBLAS reads its thread count from, in its order of precedence
OPENBLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def single_threaded_blas() -> None:
    """Ask NumPy's OpenBLAS for no thread pool of its own (``OPENBLAS_NUM_THREADS=1`` where the
    environment sets none of :data:`OPENBLAS_THREAD_VARIABLES`: a user's own thread count stands;
    effective only before NumPy is first imported: the analyze-trace CLI calls this first).
    OpenBLAS starts a thread per further core when it loads, and each spins a while waiting for
    work the analysis never gives it (its matrix products are the whatif model's few fits over a
    few thousand cycles, below OpenBLAS' size for threads: results are the same): on a 2-core
    machine ``import numpy`` took 0.26 s of CPU time instead of 0.15 s, the spin taken from the
    report's early read on the other core. Measured with ``/usr/bin/time`` over ``analyze-trace
    FILE``, 8 alternating pairs on the benchmark's real tiled and synthetic 1M-kernel files: 4%
    less CPU time each, wall time median 0.96x (docs/performance.md, twentieth round)."""
    if not any(name in os.environ for name in OPENBLAS_THREAD_VARIABLES):
        os.environ[OPENBLAS_THREAD_VARIABLES[0]] = "1"
