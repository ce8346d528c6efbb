"""Where map tasks run: in this process, in a process pool (``--jobs``) or on a Dask cluster
(``--scheduler``, distributed.py). Each executor has one method, ``map(fn, items, *args)``
(results in the order of ``items``; the first task error is raised), and says how many tasks may
run at once where each one runs (``slots``: the memory policy shares the available memory among
them). The tasks themselves do not know where they run."""
from __future__ import annotations

from analyze.processes import bounded_jobs, worker_pool
from analyze.run.progress import progress as progress_bar


class Inline:
    """One task after the other, in this process."""

    slots = 1

    def __init__(self, progress: bool = False):
        self.progress = progress

    def map(self, fn, items: list, *args) -> list:
        return [fn(item, *args) for item in progress_bar(items, self.progress and len(items) > 1)]

    def close(self) -> None:
        pass


class ProcessPool:
    """Worker processes on this machine (tasks and results are pickled): ``jobs``, at most the cores
    and the items (processes.bounded_jobs); they die with this process, and are killed, not waited
    for, when a task fails or the run is interrupted (processes.worker_pool)."""

    def __init__(self, jobs: int, n_items: int, progress: bool = False):
        self.progress = progress
        self.slots = bounded_jobs(jobs, n_items)

    def map(self, fn, items: list, *args) -> list:
        with worker_pool(self.slots) as pool:
            futures = [pool.submit(fn, item, *args) for item in items]
            return [f.result() for f in progress_bar(futures, self.progress, total=len(items))]

    def close(self) -> None:
        pass


def executor(jobs: int = 1, scheduler=None, n_items: int = 1, progress: bool = False):
    """The executor for ``jobs`` / ``scheduler`` (a Dask scheduler address or client), to be
    closed after use."""
    if scheduler:
        from analyze.run import distributed
        return distributed.DaskExecutor(scheduler, progress=progress)
    if jobs <= 1 or bounded_jobs(jobs, n_items) <= 1:
        return Inline(progress)
    return ProcessPool(jobs, n_items, progress)
