"""A configuration measured after the model was written (2026-12-07, H100, recipes/device_plan.md "twenty-first
session"): real SGLang 0.5.17 EAGLE-3, V = 2 (about half the draft tokens accepted), a 32-layer target, CUDA graphs,
TP 1, batches 1 and 16. One profile at 3 steps (`sglang_h100_v2_l32_s3`, with the shim's clock of 3 uncaptured rounds
a batch size) and an unprofiled sweep of 0..4 steps, engines one after another on one machine, 2, 3, 4 and 0 steps
twice (`sglang_sweep_h100_v2_l32.json`). The host was noisy: two engines of one step count differed by up to 40%
(3 steps at batch 1: 402 and 562 tokens/s) and few cells converged to 3%; the sweep's figure a cell is the mean of
its engines (`read_measured`). Speculation does not pay at either batch size (best 0.84x / 0.80x of no speculation).
Nothing in the model was changed for this sweep."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze.cli import main
from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_h100_v2_l32_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v2_l32.json"
need = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="fixture not unpacked")


@pytest.fixture(scope="module")
def side():
    return sides.load_side(PROFILE)


@need
def test_the_sweep_says_speculation_does_not_pay(side):
    for batch, want in ((1, 0.845), (16, 0.801)):
        m, base = read_measured(SWEEP, batch)
        assert sorted(m) == [1, 2, 3, 4]
        assert max(m.values()) / base == pytest.approx(want, abs=0.001)
    assert W.infer_steps(side)[0] == 3


@need
@pytest.mark.parametrize("batch", (1, 16))
def test_calibrated_with_both_figures_the_verdict_and_the_speedup_hold(side, batch):
    """Issue 40's bar from one profile + the unprofiled tokens/s at its step count + the measured no-speculation
    tokens/s: the verdict (off), the speed-up within 10% of the measured best's (0.855x against 0.845x at batch 1,
    0.764x against 0.801x at 16), the predicted best among the measured best's step counts within its noise (batch 1:
    3 and 4 measured 0.6% apart, 4 predicted; batch 16: 4 measured 4.9% above 3, inside its engines' 7-18% round
    spreads, 3 predicted), and each step count within 10% but the 2-step cell at batch 16 (its two engines 11% apart,
    round spreads 12% and 34%: +18%)."""
    m, base = read_measured(SWEEP, batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    assert r["best"]["speedup"] < 1 and not r["best"]["verdict_uncertain"]
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / base, rel=0.10)
    assert r["best"]["steps"] == {1: 4, 16: 3}[batch]
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    for s in m:
        if (batch, s) != (16, 2):
            assert p[s] == pytest.approx(m[s], rel=0.10), s


@need
@pytest.mark.parametrize("batch", (1, 16))
def test_from_the_profile_and_its_clock_the_verdict_leans_off_uncertain(tmp_path, batch):
    """No figure given: the profile's own clock calibrates it (455 / 5,507 tokens/s at 3 steps; the sweep's engines
    402-562 / 5,586-7,392), the baseline is estimated (594 / 6,262 tokens/s against 571 / 8,498 measured: the plain
    step's host time at batch 16 taken from the speculative cycle's scheduler work is too long; 601 / 6,603 before the
    round's gap was modelled) and the verdict is the measured one's direction but said to be uncertain (0.77x / 0.77x
    against 0.85x / 0.80x: inside the estimated baseline's band)."""
    out = tmp_path / "w.json"
    assert main(["whatif", str(PROFILE), "--batch", str(batch), "--steps", "1..6", "--boot", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    m, base = read_measured(SWEEP, batch)
    best = doc["best"]
    assert best["speedup"] < 1 and best["verdict_uncertain"]
    clock, est, speedup = {1: (455.2, 594.5, 0.769), 16: (5507, 6262, 0.771)}[batch]
    assert doc["calibration"]["tokens_per_s"] == pytest.approx(clock, abs=1)
    assert doc["baseline"]["tokens_per_s"] == pytest.approx(est, abs=1)
    assert best["speedup"] == pytest.approx(speedup, abs=0.005)
    lo, hi = W.PROFILE_ALONE_RATIO
    assert lo <= best["speedup"] / (max(m.values()) / base) <= hi
    assert doc["calibration"]["source"]["kind"] == "profile_clock" and doc["calibration"]["steps"] == 3


@need
def test_advise_names_verify_on_the_unprofiled_cycle_and_leans_off(tmp_path):
    """advise at batch 1 (calibrated by the profile's clock): verify is 27.7% of the 8.9 ms profiled cycle and 62.4%
    of the 3.9 ms it runs without the profiler; the verify_dominated rule takes the latter (the profiler stretches
    host time, not kernels), names whatif's step count with the caution that whatif leans to no speculation, and the
    draft_steps rule leaves the step count to it."""
    out = tmp_path / "a.json"
    assert main(["advise", str(PROFILE), "--batch", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    v = [f for f in doc["findings"] if f["rule"] == "verify_dominated"]
    ev = v[0]["evidence"]
    assert v and ev["calibrated_cycle"] is True
    assert ev["verify_share"] == pytest.approx(0.624, abs=0.001) and ev["profiled_share"] == pytest.approx(0.277, abs=0.001)
    assert ev["cycle_ns"] == pytest.approx(3_929_100, rel=1e-4) and ev["profiled_cycle_ns"] == pytest.approx(8_865_100, rel=1e-4)
    assert v[0]["title"] == "verify dominates the cycle (62.4%, without the profiler)"
    assert "Verify takes 62.4% of the cycle without the profiler (whatif's calibration)." in v[0]["suggestion"]
    assert "whatif leans to no speculation (0.77x at its best, a verdict it cannot make" in v[0]["suggestion"]
    assert not [f for f in doc["findings"] if f["rule"] == "draft_steps"]
