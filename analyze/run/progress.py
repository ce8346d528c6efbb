"""Progress of long work (the reports of an analysis, whatif's bootstrap): a tqdm bar on stderr when enabled
(and tqdm there)."""
from __future__ import annotations


def progress(items, enabled: bool, total: int | None = None, desc: str = "reports", unit: str = "report"):
    """``items``, with a bar on stderr that shows once the work has taken a second (nothing when not enabled)."""
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return items
    return tqdm(items, total=total, desc=desc, unit=unit, file=None, leave=False, delay=1.0)
