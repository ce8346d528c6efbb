"""Real exports altered for a test."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"


def kernels_newest_first(dst: Path, src: Path = REAL / "h200_4proc_eager.sqlite") -> Path:
    """A copy of ``src`` whose kernel rows are written in descending start order (not the start
    order nsys writes: rowid ranges are then no time slices)."""
    shutil.copy(src, dst)
    db = sqlite3.connect(dst)
    db.execute("CREATE TEMP TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC")
    db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM temp.k")
    db.commit()
    db.close()
    return dst
