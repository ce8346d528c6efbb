"""Progress over the reports of an analysis: a tqdm bar on stderr when enabled (and tqdm there)."""
from __future__ import annotations


def progress(items, enabled: bool, total: int | None = None):
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return items
    return tqdm(items, total=total, desc="reports", unit="report", file=None, leave=False, delay=1.0)
