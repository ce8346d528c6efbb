"""The cycle table's host_wait_ns (timeline.cycles.host_wait_by_cycle): synchronize calls in a cycle's
host period (its range's start to the next cycle's, on its thread) outside every phase range, against
hand-made calls with known answers, and on the real grid profile (SGLang's one cudaEventSynchronize a
cycle, after the cycle's range)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.timeline import cycles

STRINGS = pd.Series(["cudaEventSynchronize_v3020", "cudaLaunchKernel_v7000", "cuStreamSynchronize",
                     "cudaStreamSynchronizeLater"], index=[10, 11, 12, 13])


def test_waits_fall_to_the_cycle_whose_period_holds_them():
    ranges = pd.DataFrame({"global_tid": [1, 1, 2], "start_ns": [100, 200, 150]}, index=[7, 8, 9])
    #        sync in 7's period, launch, sync in a phase, sync in 8's, other thread's, before any cycle, thread 3
    name = np.array([10, 11, 10, 12, 10, 10, 10])
    pid = np.array([1, 1, 1, 1, 2, 1, 3])                  # thread ids (3: a thread without cycles)
    start = np.array([150, 160, 170, 250, 400, 50, 300])
    end = start + np.array([30, 5, 40, 7, 11, 99, 13])
    phase = np.array([-1, -1, 3, -1, -1, -1, -1])
    w = cycles.host_wait_by_cycle(name, pid, start, end, phase, ranges, STRINGS)
    assert w.to_dict() == {7: 30, 8: 7, 9: 11}
    # a name that only starts like a synchronize call's prefix is one (nsys' version suffixes): 13 counts
    assert cycles.sync_name_ids(STRINGS).tolist() == [10, 12, 13]
    assert cycles.host_wait_by_cycle(name, pid, start, end, phase, ranges.iloc[0:0], STRINGS).empty


PROFILE = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_v2_l64_s3_b4.sqlite"


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang grid profile not unpacked")
def test_the_real_scheduler_wait():
    """Every cudaEventSynchronize of the export (SQL over CUPTI_ACTIVITY_KIND_RUNTIME) is in some cycle's
    period: the cycle table's waits add up to their total; per steady cycle at batches 1/4/16/64 the
    wait is 172 / 990 / 11 / 1,751 us (the GPU-bound batch 64 waits most)."""
    import sqlite3

    from analyze.tools import sides

    with sqlite3.connect(f"file:{PROFILE}?mode=ro", uri=True) as db:
        total, = db.execute("SELECT sum(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                            "ON s.id = r.nameId WHERE s.value LIKE 'cudaEventSynchronize%'").fetchone()
    c = sides.load_side(PROFILE).cycles
    assert int(c["host_wait_ns"].sum()) == pytest.approx(total, rel=0.01)
    c = c[~c["warmup"].astype(bool)]
    mean = c.groupby(pd.to_numeric(c["requests"]))["host_wait_ns"].mean()
    assert mean.loc[[1, 4, 16, 64]].div(1e3).round(0).tolist() == [172, 990, 11, 1751]
