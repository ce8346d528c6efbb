"""The map step on a Dask cluster (``analyze-trace --scheduler ADDRESS``).

The same pure function as on one machine (:func:`analyze.run.api.analyze_report`: path and config in,
a picklable :class:`~analyze.results.ReportResult` out) runs on the cluster's workers, one task per
report; the reduce step (:func:`analyze.run.multirank.combine`) runs here. Workers must see the report
paths (a shared filesystem) and have specprof installed. ``scheduler`` is a scheduler address
(``tcp://host:8786``) or a ``distributed.Client`` / ``LocalCluster`` object.

    from distributed import LocalCluster
    with LocalCluster(n_workers=2, processes=True) as cluster:
        analysis = analyze.load(["r0.sqlite", "r1.sqlite"], scheduler=cluster.scheduler_address)
"""
from __future__ import annotations

from analyze.attribute.phases import PhaseConfig
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


def map_reports(mapper, files: list[str], config: PhaseConfig, scheduler, *, progress: bool = False,
                cache: bool = False, memory_budget: int | None = None) -> list:
    """``mapper(file, config=..., cache=..., memory_budget=...)`` (the map step,
    :func:`analyze.run.api.analyze_report`) of every file on the cluster; results in file order."""
    client, owned = _client(scheduler)
    try:
        # paths go as given (the workers must see them: give absolute paths for a remote cluster),
        # so every label in the result is the same as in a local run
        futures = client.map(mapper, list(files), config=config, cache=cache,
                             memory_budget=memory_budget, pure=False)
        # in file order; the first task error is raised here, as with the process pool
        results = [f.result() for f in progress_bar(futures, progress, total=len(futures))]
        return results
    finally:
        if owned:
            client.close()
