"""The cycle table's host_wait_ns (timeline.cycles.host_wait_by_cycle): synchronize calls in a cycle's
host period (its range's start to the next cycle's, on its thread) outside every phase range, against
hand-made calls with known answers, and on the real grid profile (SGLang's one cudaEventSynchronize a
cycle, after the cycle's range)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.timeline import cycles
from helpers import shared_loads

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

    with sqlite3.connect(f"file:{PROFILE}?mode=ro", uri=True) as db:
        total, = db.execute("SELECT sum(r.end - r.start) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                            "ON s.id = r.nameId WHERE s.value LIKE 'cudaEventSynchronize%'").fetchone()
    c = shared_loads.load_side(PROFILE).cycles
    assert int(c["host_wait_ns"].sum()) == pytest.approx(total, rel=0.01)
    c = c[~c["warmup"].astype(bool)]
    mean = c.groupby(pd.to_numeric(c["requests"]))["host_wait_ns"].mean()
    assert mean.loc[[1, 4, 16, 64]].div(1e3).round(0).tolist() == [172, 990, 11, 1751]


LAUNCH_STRINGS = pd.Series(["cudaGraphLaunch_v10000", "cudaLaunchKernel_v7000", "cuGraphLaunch",
                            "cudaEventSynchronize_v3020"], index=[20, 21, 22, 23])


def test_graph_launches_excess_over_the_fastest_falls_to_their_cycle():
    """launch_excess_ns: each graph launch's duration beyond the fastest launch among the calls (the runtime's and
    the driver's alike), summed per cycle's host period on its thread, inside the phases too; kernel launches and
    synchronize calls are not counted."""
    ranges = pd.DataFrame({"global_tid": [1, 1, 2], "start_ns": [100, 200, 150]}, index=[7, 8, 9])
    #        graph launch, kernel launch, driver graph launch, sync, launch in 8, other thread, the fastest launch on
    #        a thread without cycles (it still sets the fastest: 10)
    name = np.array([20, 21, 22, 23, 20, 20, 20])
    tid = np.array([1, 1, 1, 1, 1, 2, 3])
    start = np.array([110, 120, 130, 140, 210, 160, 300])
    dur = np.array([20, 500, 470, 900, 520, 35, 10])
    x = cycles.launch_excess_by_cycle(name, tid, start, start + dur, ranges, LAUNCH_STRINGS)
    assert x.to_dict() == {7: 10 + 460, 8: 510, 9: 25}
    assert cycles.launch_excess_by_cycle(name[[1, 3]], tid[[1, 3]], start[[1, 3]], (start + dur)[[1, 3]], ranges,
                                         LAUNCH_STRINGS).empty


HELD_OUT = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_h100_v3_l32_s3.sqlite"
DEEP = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_h100_v2_l128_s3.sqlite"


@pytest.mark.skipif(not (HELD_OUT.exists() and DEEP.exists()), reason="real H100 SGLang profiles not unpacked")
def test_the_real_launch_excess_and_whatifs_note():
    """Under nsys' node-level graph tracing (real SGLang 0.5.17, H100, CUDA graphs): the host-bound held-out profile's
    launches took 573 us a cycle beyond the fastest at batch 16 (the profiled cycle 4,707 us, 3,330 unprofiled), the
    GPU-bound 128-layer one's 2,624 us (9,550 profiled, 9,350 unprofiled: the GPU hid it). The excess matches the
    export's own cudaGraphLaunch rows (SQL); whatif says it, uncalibrated, and not once calibrated."""
    import sqlite3

    from analyze.tools.whatif import model as W

    side = shared_loads.load_side(HELD_OUT)
    c = side.cycles
    steady = c[~c["warmup"].astype(bool) & (c["requests"] == 16)]
    assert steady["launch_excess_ns"].mean() == pytest.approx(573_000, rel=0.01)
    # every graph launch of the export: the column's sum over all cycles is its excess inside cycle periods
    con = sqlite3.connect(f"file:{HELD_OUT}?mode=ro", uri=True)
    durs = np.array([r[0] for r in con.execute(
        "SELECT r.end - r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON r.nameId = s.id "
        "WHERE s.value LIKE 'cudaGraphLaunch%'")])
    assert c["launch_excess_ns"].sum() <= (durs - durs.min()).sum()
    assert c["launch_excess_ns"].sum() > 0.9 * (durs - durs.min()).sum()
    r = W.whatif(side, range(1, 7), n_boot=0, batch=16)
    note = next(a for a in r["assumptions"] if a.startswith("NOT calibrated"))
    assert "graph launches took 573.0 us a cycle at 3 steps (12% of its 4,707.1 us cycle)" in note
    cal = W.whatif(side, range(1, 7), n_boot=0, batch=16, calibrate_tps=7163.9)
    assert not any("graph launches took" in a for a in cal["assumptions"])
    deep = shared_loads.load_side(DEEP).cycles
    deep = deep[~deep["warmup"].astype(bool) & (deep["requests"] == 16)]
    assert deep["launch_excess_ns"].mean() == pytest.approx(2_624_000, rel=0.01)
