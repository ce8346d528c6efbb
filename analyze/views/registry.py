"""The registry of views: each derived table of an analysis, by name, computed once.

A view is a pure function ``fn(analysis, **params)`` returning a DataFrame (or a small dict),
registered with :func:`view`. :func:`get` computes it the first time it is asked for with these
parameters and keeps it on the analysis (``Analysis.view_cache``), so the terminal report, the
HTML page, the JSON/CSV/Parquet files, the figures and the notebooks of one run share one
computation of every table they show.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

VIEWS: dict[str, Callable] = {}


class ViewInfo(NamedTuple):
    """What the renderers need to know of a view: ``file`` (its position among the tables
    ``--json``/``--csv``/``--parquet`` write; None: not written), ``title`` (a report section of its
    own in the terminal report and the HTML page, drawn generically as a table; None: a renderer
    shows it its own way or not at all)."""

    name: str
    file: int | None
    title: str | None


INFO: dict[str, ViewInfo] = {}


def view(name: str, *, file: int | None = None, title: str | None = None):
    """Register ``fn(analysis, **params)`` as the view ``name`` (``file``, ``title``: :class:`ViewInfo`)."""
    def register(fn: Callable) -> Callable:
        if name in VIEWS and VIEWS[name] is not fn:
            raise ValueError(f"view {name!r} registered twice")
        taken = [i.name for i in INFO.values() if file is not None and i.file == file and i.name != name]
        if taken:
            raise ValueError(f"view {name!r}: file position {file} is {taken[0]!r}'s")
        VIEWS[name] = fn
        INFO[name] = ViewInfo(name, file, title)
        return fn
    return register


def file_views() -> tuple[str, ...]:
    """The views written as files and JSON tables, in their order."""
    return tuple(i.name for i in sorted((i for i in INFO.values() if i.file is not None), key=lambda i: i.file))


def section_views() -> tuple[ViewInfo, ...]:
    """The views shown as report sections of their own (a title), in registration order."""
    return tuple(i for i in INFO.values() if i.title is not None)


def get(analysis, name: str, **params):
    """The view ``name`` of ``analysis`` (computed on first use, then kept on the analysis)."""
    if name not in VIEWS:
        raise KeyError(f"no view {name!r} (views: {', '.join(sorted(VIEWS))})")
    cache = getattr(analysis, "view_cache", None)
    key = (name, tuple(sorted(params.items())))
    if cache is not None and key in cache:
        return cache[key]
    value = VIEWS[name](analysis, **params)
    if cache is not None:
        cache[key] = value
    return value
