"""The registry of views: each derived table of an analysis, by name, computed once.

A view is a pure function ``fn(analysis, **params)`` returning a DataFrame (or a small dict),
registered with :func:`view`. :func:`get` computes it the first time it is asked for with these
parameters and keeps it on the analysis (``Analysis.view_cache``), so the terminal report, the
HTML page, the JSON/CSV/Parquet files, the figures and the notebooks of one run share one
computation of every table they show.
"""
from __future__ import annotations

from typing import Callable

VIEWS: dict[str, Callable] = {}


def view(name: str):
    """Register ``fn(analysis, **params)`` as the view ``name``."""
    def register(fn: Callable) -> Callable:
        if name in VIEWS and VIEWS[name] is not fn:
            raise ValueError(f"view {name!r} registered twice")
        VIEWS[name] = fn
        return fn
    return register


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
