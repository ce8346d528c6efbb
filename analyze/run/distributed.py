"""Map tasks on a Dask cluster (``analyze-trace --scheduler ADDRESS``).

The same task as on one machine (:func:`analyze.run.api.map_one`: a path and the options in, a
picklable :class:`~analyze.results.ReportResult` out, the memory policy decided where it runs)
runs on the cluster's workers, one task per report; the reduce step
(:func:`analyze.run.multirank.combine`) runs here. Workers must see the report paths (a shared
filesystem) and have specprof installed. ``scheduler`` is a scheduler address
(``tcp://host:8786``) or a ``distributed.Client`` / ``LocalCluster`` object.

    from distributed import LocalCluster
    with LocalCluster(n_workers=2, processes=True) as cluster:
        analysis = analyze.load(["r0.sqlite", "r1.sqlite"], scheduler=cluster.scheduler_address)
"""
from __future__ import annotations

from analyze.errors import SchedulerError
from analyze.run.progress import progress as progress_bar


def _client(scheduler):
    try:
        from distributed import Client
    except ImportError as exc:
        raise SchedulerError("--scheduler needs Dask: pip install 'specprof[dask]'") from exc
    if isinstance(scheduler, Client):
        return scheduler, False
    address = getattr(scheduler, "scheduler_address", scheduler)
    try:
        return Client(address, timeout="20s", set_as_default=False), True
    except (OSError, TimeoutError) as exc:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address} ({exc})") from exc


class DaskExecutor:
    """Tasks on the cluster's workers (executors.py's interface). ``slots``: the most threads
    of one worker, the tasks that may run at once in one worker's memory."""

    def __init__(self, scheduler, progress: bool = False):
        self.client, self._owned = _client(scheduler)
        self.progress = progress
        threads = self.client.nthreads() if hasattr(self.client, "nthreads") else {}
        self.slots = max([int(n) for n in threads.values()] or [1])

    def map(self, fn, items: list, *args) -> list:
        # paths go as given (the workers must see them: give absolute paths for a remote cluster),
        # so every label in the result is the same as in a local run
        futures = [self.client.submit(fn, item, *args, pure=False) for item in items]
        # in item order; the first task error is raised here, as with the process pool
        return [f.result() for f in progress_bar(futures, self.progress, total=len(futures))]

    def close(self) -> None:
        if self._owned:
            self.client.close()
