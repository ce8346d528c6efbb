"""What the timing mode costs, from its own log, on real SGLang 0.5.17 (H100, 2026-12-06; docs/live.md "Sixth
GPU run", run 5): two logs written with events in one cycle of 41 and each cycle's own shim time logged
(``shim_ns``, ``sink_ns``). V = 3 / 32 layers / 3 steps (host bound, 3.2-3.4 ms cycles), rounds alternating the
timing on and paused inside one engine (its ``.sweep.json``: tokens/s of each round); V = 2 / 128 layers
(8.8-10.6 ms), with its engine's /metrics scrape."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import analyze
from analyze import views
from analyze.timeline import own_cost

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
SMALL = REAL / "sglang_live_h100_v3_l32_s3_cost.live"
DEEP = REAL / "sglang_live_h100_v2_l128_s3_cost.live"


def cost(path):
    return views.get(analyze.load(path), "timing_cost").set_index("requests")


def test_the_host_bound_log_says_the_mode_costs_about_3_percent():
    t = cost(SMALL)
    assert list(t.index) == [1, 16] and (t["basis"] == own_cost.ALL).all()
    # the timed cycles (1 in 41) run 0.24 / 0.37 ms longer: significantly (the interval excludes 0)
    assert (t["timed_extra_ns"] - t["timed_extra_ci_ns"] > 0).all()
    assert (t["timed_extra_ns"] / t["period_ns"]).between(0.05, 0.15).all()
    # the shim's own time, every cycle: ~85 us; the sink's ~9 us
    assert t["shim_ns"].between(70_000, 100_000).all() and t["sink_ns"].between(5_000, 15_000).all()
    assert t.loc[1, "cost_pct"] == pytest.approx(2.90, abs=0.01) and t.loc[16, "cost_pct"] == pytest.approx(3.30, abs=0.01)
    assert (t["cost_pct_low"] > 2.7).all() and (t["cost_pct_high"] < 3.5).all()


def test_the_interleaved_rounds_see_the_events_share_and_less_than_the_whole():
    """The rounds alternating the timing on and paused in the same engine (a paused round still runs the shim's
    wrappers, without the timer's work and the events): their 95% interval holds the events' share the log
    measures (the timed cycles' extra at one in 41: 0.17% / 0.29%) and lies below the log's whole figure (2.9% /
    3.3%: the wrappers' part, which a paused round pays too, is in it)."""
    doc = json.loads(SMALL.with_suffix(".sweep.json").read_text())
    t = cost(SMALL)
    for b in doc["runs"][0]["batches"]:
        logs = np.log(b["timing_pair_ratios"])
        mean, half = logs.mean(), 2.365 * logs.std(ddof=1) / math.sqrt(len(logs))     # t(7), 95%
        lo, hi = 100 * (1 - math.exp(mean + half)), 100 * (1 - math.exp(mean - half))
        r = t.loc[b["batch"]]
        events = 100 * r["timed_cycles"] / r["cycles"] * r["timed_extra_ns"] / r["period_ns"]
        assert lo < events < hi < r["cost_pct"]


def test_a_longer_cycle_pays_a_smaller_share_about_1_percent():
    """128 layers (8.8-10.6 ms cycles): the shim's time a cycle is about the same (~90 us), its share a third;
    the timed cycles' extra is within its noise there (no significant events' cost)."""
    deep, small = cost(DEEP), cost(SMALL)
    assert list(deep.index) == [1, 16] and (deep["period_ns"] > 2 * small["period_ns"]).all()
    assert (deep["timed_extra_ns"].abs() < deep["timed_extra_ci_ns"]).all()
    assert (deep["shim_ns"] - small["shim_ns"]).abs().max() < 15_000
    assert deep.loc[1, "cost_pct"] == pytest.approx(0.88, abs=0.01) and deep.loc[16, "cost_pct"] == pytest.approx(1.09, abs=0.01)


def test_the_engines_metrics_count_the_shims_seconds_as_its_log_does():
    """specprof:shim_seconds_total of the 128-layer engine's last /metrics scrape (every 3 s while it ran): the
    worker's and the sink's seconds, no more than the log's sums (the scrape came before the last rows) and
    most of them."""
    scrape = (REAL / "sglang_live_h100_v2_l128_s3_cost.metrics.txt").read_text()
    served = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^specprof:shim_seconds_total\{rank="0",thread="(\w+)"\} (\S+)$', scrape, re.M)}
    a = analyze.load(DEEP)
    logged = {"worker": a.cycles["shim_ns"].sum() * 1e-9, "sink": a.cycles["sink_ns"].sum() * 1e-9}
    for thread in ("worker", "sink"):
        assert 0.8 * logged[thread] <= served[thread] <= logged[thread] + 1e-9, thread


def test_the_headline_says_what_the_timing_cost_and_what_that_counts():
    """The one sentence on top: the range over batch sizes, and for a log without shim_ns (the held-out log of
    2026-12-06's morning) that it is the events' part only."""
    assert views.get(analyze.load(SMALL), "headline").endswith(
        "the timing mode itself cost 2.9-3.3% of tokens/s (its log's own measure, 'What the timing mode costs').")
    old = views.get(analyze.load(REAL / "sglang_live_h100_v3_l32_s3.live"), "headline")
    assert old.endswith("its CUDA events cost 0.2-0.4% of tokens/s (its log's own measure, 'What the timing mode "
                        "costs'; this log has no shim_ns).")
    nsys = views.get(analyze.load(REAL / "sglang_live_h100_e2_on"), "headline")       # every cycle timed, no shim_ns
    assert "cost" not in nsys.split("no kernel tables")[-1]


AB_NEW = REAL / "sglang_live_h100_v3_l32_s3_ab_new.live"
AB_OLD = REAL / "sglang_live_h100_v3_l32_s3_ab_old.live"


def test_the_cut_untimed_path_costs_a_quarter_less_on_one_machine():
    """One H100 host, one call, engines in turn (docs/live.md "Seventh GPU run"): the shim of commit e9d092f
    (``recipes/sglang_live.sh`` mode ``onold``) in the first and third engine, the shim with the untimed cycle's
    path cut in the second. Its own time a cycle fell from 101 / 106 us to 75 / 81 us (batch 1 / 16); the whole
    cost, events and sink included, from 2.87% / 3.21% to 2.54% / 2.87% of tokens/s."""
    new, old = cost(AB_NEW), cost(AB_OLD)
    assert list(new.index) == list(old.index) == [1, 16]
    assert (new["shim_ns"] < 0.8 * old["shim_ns"]).all()
    assert new.loc[1, "shim_ns"] == pytest.approx(75_234, abs=1) and old.loc[1, "shim_ns"] == pytest.approx(101_445, abs=1)
    assert new.loc[1, "cost_pct"] == pytest.approx(2.54, abs=0.01) and new.loc[16, "cost_pct"] == pytest.approx(2.87, abs=0.01)
    assert old.loc[1, "cost_pct"] == pytest.approx(2.87, abs=0.01) and old.loc[16, "cost_pct"] == pytest.approx(3.21, abs=0.01)
    assert (new["cost_ns"] < old["cost_ns"]).all()


AB2 = REAL / "sglang_live_h100_v2_l128_s3_ab2"


def test_the_records_handed_to_the_sink_cut_the_worker_threads_share_under_1_percent():
    """One H100 host, one call, V = 2 / 128 layers (8.8-10.6 ms cycles), engines in turn: the shim of commit 83521e8
    (``onold``), the shim that hands an untimed cycle's record to the sink (its row made there), 83521e8 again
    (docs/live.md "Eighth GPU run"). The worker's time a cycle fell from 75 / 79 and 70 / 77 us to 59 / 64 us (batch
    1 / 16); the sink's rose by 1-3 us (the rows are made there now); the whole cost fell from 0.78% / 0.95% and
    0.72% / 0.94% to 0.64% / 0.82% of tokens/s, its 95% interval under 1% at both batch sizes (the old's reached
    1.1% at 16). The engines' tokens/s agreed within 0.1% (GPU bound: 177 / 2,937)."""
    new = cost(AB2.with_name(AB2.name + "_new.live"))
    olds = [cost(AB2.with_name(AB2.name + f"_old_{k}.live")) for k in "ab"]
    assert new.loc[1, "shim_ns"] == pytest.approx(59_146, abs=1) and new.loc[16, "shim_ns"] == pytest.approx(63_761, abs=1)
    for old in olds:
        assert list(old.index) == list(new.index) == [1, 16]
        assert (new["shim_ns"] < 0.85 * old["shim_ns"]).all()
        assert (new["sink_ns"] > old["sink_ns"]).all()
        assert (new["cost_ns"] < old["cost_ns"]).all() and (new["cost_pct"] < old["cost_pct"]).all()
        assert (old["cost_pct_high"] > 0.9).all()
    assert new.loc[1, "cost_pct"] == pytest.approx(0.643, abs=0.001) and new.loc[16, "cost_pct"] == pytest.approx(0.818, abs=0.001)
    assert (new["cost_pct_high"] < 1.0).all()
    runs = {r["engine"]: {b["batch"]: b["tokens_per_s"] for b in r["batches"]}
            for r in json.loads(AB2.with_suffix(".sweep.json").read_text())["runs"]}
    assert set(runs) == {"e1_onold", "e2_on", "e3_onold"}
    for b in (1, 16):
        v = [r[b] for r in runs.values()]
        assert max(v) / min(v) - 1 < 0.0015


AB3 = REAL / "sglang_live_h100_v3_l32_s3_ab3"


def test_on_3_ms_cycles_the_current_shim_costs_2_3_to_2_7_percent_above_the_1_percent_bar():
    """One H100 host, one call (2026-12-07, recipes/device_plan.md "twentieth session"), V = 3 / 32 layers / 3 steps
    (3.0-3.3 ms cycles), engines in turn: 83521e8's shim (``onold``), the current one (its hooks add their own time
    inline, the untimed record made on the sink's thread), 83521e8 again. The worker's time a cycle: 56 / 61 us
    against 69 / 69 and 60 / 69 (batch 1 / 16); the whole cost 2.29% / 2.66% of tokens/s against 2.49% / 2.82% and
    2.33% / 2.94%: a tenth less, and still above issue 43's 1% on cycles this short (~10 ms cycles are under it,
    AB2 above). The engines' own tokens/s spread 5-9% (a noisy host), so the bar rests on the log's own measure."""
    new = cost(AB3.with_name(AB3.name + "_new.live"))
    olds = [cost(AB3.with_name(AB3.name + f"_old_{k}.live")) for k in "ab"]
    assert list(new.index) == [1, 16]
    assert new.loc[1, "shim_ns"] == pytest.approx(56_234, abs=1) and new.loc[16, "shim_ns"] == pytest.approx(61_186, abs=1)
    assert new.loc[1, "cost_pct"] == pytest.approx(2.29, abs=0.01) and new.loc[16, "cost_pct"] == pytest.approx(2.66, abs=0.01)
    for old in olds:
        assert (new["shim_ns"] < old["shim_ns"]).all() and (new["cost_pct"] < old["cost_pct"]).all()
    assert (new["cost_pct_low"] > 2.0).all()          # not under 1%: the bar is not met on 3 ms cycles
    runs = {r["engine"]: {b["batch"]: b["tokens_per_s"] for b in r["batches"]}
            for r in json.loads(AB3.with_suffix(".sweep.json").read_text())["runs"]}
    assert set(runs) == {"e1_onold", "e2_on", "e3_onold"}


SERVER = REAL / "sglang_server_h100_v8_l32_s3"


@pytest.mark.parametrize("how", ["liveterm", "liveint"])
def test_a_real_server_stopped_by_sigterm_or_sigint_leaves_its_log_complete(how):
    """`python -m sglang.launch_server` with SPECPROF_TIMING=1 on an H100 (2026-12-07, recipes/sglang_server_clock.sh,
    V = 8 / 32 layers / 3 steps, 16 requests in flight): stopped by SIGTERM to its main process (`kill PID`, `docker
    stop`: SGLang 0.5.17 drains, then kills its process tree) or by SIGINT to its process group (Ctrl-C), the
    scheduler's log is a complete Parquet file (no open .arrows stream left), and analyze-trace reads it whole:
    2,588 / 2,598 steady cycles at 16 requests. The SIGTERM server's log says 10,111 tokens/s where its client's
    rounds after the first ran 10,023-10,398 (the steady rate has no round tails)."""
    d = SERVER.with_name(SERVER.name + f"_{how}.live")
    files = sorted(p.name for p in d.iterdir())
    assert len(files) == 1 and files[0].endswith(".parquet")
    a = analyze.load(d)
    sm = views.get(a, "decode_summary")
    steady = {"liveterm": 2588, "liveint": 2598}[how]
    assert int(sm["steady_cycles"].iloc[0]) == steady
    rounds = json.loads(SERVER.with_name(SERVER.name + f"_{how}.rounds.json").read_text())["rounds"]
    if how == "liveterm":
        assert float(sm["tokens_per_s"].iloc[0]) == pytest.approx(10_111, abs=1)
        warm = [r["tokens_per_s"] for r in rounds[1:]]
        assert min(warm) * 0.95 < sm["tokens_per_s"].iloc[0] < max(warm) * 1.01


EAGER = REAL / "sglang_live_h100_v2_l16_s3_eager_cost.live"


def test_eager_mode_costs_under_1_percent_by_its_own_log():
    """SGLang with ``--disable-cuda-graph`` (recipes/device_plan.md "twenty-first session": ``GRAPH_BS=none
    ENGINES=on CONFIG=2:16 STEPS=3 BATCHES=1,16``, H100, 2026-12-07): V = 2 / 16 eager layers, cycles of 15.9 / 17.5 ms
    (every kernel launched from Python: host bound). The shim's own time a cycle is higher than with graphs (86 /
    106 us against 56 / 61 on 3 ms graph cycles: more wrapped calls run per cycle), the sink's 33 us (a batch a
    second, over fewer cycles); the timed cycles' extra is inside its noise at both batch sizes. The whole cost:
    0.82% [0.65, 1.00] / 0.77% [0.59, 0.95] of tokens/s, under issue 43's 1% (batch 1's interval reaches it). The
    engine's /metrics served the worker's and the sink's seconds as the log sums them."""
    t = cost(EAGER)
    assert list(t.index) == [1, 16] and (t["basis"] == own_cost.ALL).all()
    assert (t["period_ns"] > 15_000_000).all()
    assert t.loc[1, "shim_ns"] == pytest.approx(86_119, abs=1) and t.loc[16, "shim_ns"] == pytest.approx(105_681, abs=1)
    assert (t["timed_extra_ns"].abs() < t["timed_extra_ci_ns"]).all()
    assert t.loc[1, "cost_pct"] == pytest.approx(0.824, abs=0.001) and t.loc[16, "cost_pct"] == pytest.approx(0.773, abs=0.001)
    assert (t["cost_pct_high"] < 1.0).all() and (t["cost_pct_low"] > 0.5).all()
    assert views.get(analyze.load(EAGER), "headline").endswith(
        "the timing mode itself cost 0.8% of tokens/s (its log's own measure, 'What the timing mode costs').")
    scrape = EAGER.with_suffix(".metrics.txt").read_text()
    served = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^specprof:shim_seconds_total\{rank="0",thread="(\w+)"\} (\S+)$', scrape, re.M)}
    a = analyze.load(EAGER)
    logged = {"worker": a.cycles["shim_ns"].sum() * 1e-9, "sink": a.cycles["sink_ns"].sum() * 1e-9}
    for thread in ("worker", "sink"):
        assert 0.8 * logged[thread] <= served[thread] <= logged[thread] + 1e-6, thread
    runs = json.loads(EAGER.with_suffix(".sweep.json").read_text())["runs"]
    assert runs[0]["engine_args"]["disable_cuda_graph"] is True and not runs[0]["profiled"]
