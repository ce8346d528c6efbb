"""The SELECT of a report's API calls, shared by the reader (report.py) and the early read of the
CLI (prefetch.py, which runs before pandas is imported: this module imports nothing but the
standard library)."""
from __future__ import annotations

RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
CALL_COLUMNS = ("globalTid", "correlationId", "start", "end")


def calls_statement(columns: list[str]) -> str | None:
    """The SELECT of the CUDA runtime/driver API calls for a RUNTIME table with ``columns``
    (None: the table lacks what the analysis needs)."""
    if not set(CALL_COLUMNS) <= set(columns):
        return None
    name = "nameId" if "nameId" in columns else "NULL"
    return f"SELECT globalTid, correlationId, {name}, start, end FROM {RUNTIME_TABLE}"
