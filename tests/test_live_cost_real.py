"""What the timing mode costs, from its own log, on real SGLang 0.5.17 (H100, 2026-12-06; docs/live.md "Sixth
GPU run"): two logs written with events in one cycle of 41 and the shim's own time logged (``shim_ns``,
``sink_ns``). V = 3 / 32 layers / 3 steps (host bound, 4.0-4.7 ms cycles), rounds alternating the timing on and
paused inside one engine (its ``.sweep.json``: tokens/s of each round); V = 2 / 128 layers (8.8-10.5 ms)."""
from __future__ import annotations

import json
import math
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


def test_the_host_bound_log_says_the_mode_costs_about_4_percent():
    t = cost(SMALL)
    assert list(t.index) == [1, 16] and (t["basis"] == own_cost.ALL).all()
    # the timed cycles (1 in 41) run ~0.5 ms longer: significantly (the interval excludes 0)
    assert (t["timed_extra_ns"] - t["timed_extra_ci_ns"] > 0).all()
    assert (t["timed_extra_ns"] / t["period_ns"]).between(0.08, 0.16).all()
    # the shim's own time, every cycle: ~130 us; the sink's ~20 us
    assert t["shim_ns"].between(100_000, 160_000).all() and t["sink_ns"].between(10_000, 40_000).all()
    assert t.loc[1, "cost_pct"] == pytest.approx(3.63, abs=0.01) and t.loc[16, "cost_pct"] == pytest.approx(3.91, abs=0.01)
    assert (t["cost_pct_low"] > 3.0).all() and (t["cost_pct_high"] < 4.5).all()


def test_the_interleaved_rounds_agree_with_the_logs_estimate_within_their_spread():
    """The rounds alternating the timing on and paused in the same engine: their pair ratios spread +-19%, so
    they bound the cost only loosely; the log's estimate lies inside their 95% interval at both batch sizes."""
    doc = json.loads(SMALL.with_suffix(".sweep.json").read_text())
    t = cost(SMALL)
    for b in doc["runs"][0]["batches"]:
        logs = np.log(b["timing_pair_ratios"])
        mean, half = logs.mean(), 2.365 * logs.std(ddof=1) / math.sqrt(len(logs))     # t(7), 95%
        lo, hi = 100 * (1 - math.exp(mean + half)), 100 * (1 - math.exp(mean - half))
        assert lo < t.loc[b["batch"], "cost_pct"] < hi
        assert hi - lo > 10            # the rounds cannot resolve 1%: why the log measures it itself


def test_a_longer_cycle_pays_a_smaller_share():
    """128 layers (9-10 ms cycles): the shim's time a cycle is about the same (~120-170 us), its share about half;
    the timed cycles' extra is within its noise there (no significant events' cost)."""
    deep, small = cost(DEEP), cost(SMALL)
    assert list(deep.index) == [1, 16] and (deep["period_ns"] > 2 * small["period_ns"]).all()
    assert (deep["timed_extra_ns"].abs() < deep["timed_extra_ci_ns"]).all()
    assert (deep["cost_pct"] < small["cost_pct"]).all()
    assert deep.loc[1, "cost_pct"] == pytest.approx(1.44, abs=0.01) and deep.loc[16, "cost_pct"] == pytest.approx(2.12, abs=0.01)
