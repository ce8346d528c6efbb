"""A configuration measured after the model (2026-12-07, H100, recipes/device_plan.md "twenty-third session"): real
SGLang 0.5.17 EAGLE-3, V = 2 (about half the draft tokens accepted), a 48-layer target (a depth not profiled before),
CUDA graphs at every batch size 1..64 (SGLang's default list), TP 1, batches 1, 8 and 32 (two batch sizes not profiled
before). One profile at 3 steps with the shim's clock of 3 uncaptured rounds a batch size
(`sglang_h100_v2_l48_s3`), then an unprofiled sweep on the same machine: 0, 1, 2, 3, 5 steps, 2 and 3 steps again
at batches 8 and 32 (`sglang_sweep_h100_v2_l48.json`; the sweep's figure a cell is the mean of its engines).

The host was noisy at batch 32: the first 2-step engine ran 7,317 tokens/s (round spread 1%), the next two 10,463
and 9,148 (spreads 32% and 4.5%); the 5-step engine's rounds spread 19% at 8 and 34% at 32. Measured: speculation
pays a little at batch 1 (3 steps 1.06x), nothing at 8 (1.00x), and not at 32 (best 1 step, 0.91x). 4 and 6 steps
were not measured (the session's device time). Nothing in the model was changed for this sweep."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze.cli import main
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_h100_v2_l48_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v2_l48.json"
need = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="fixture not unpacked")
SETTLED = {1: (1, 2, 3), 8: (1, 2, 3), 32: (1, 3)}
"""Cells to hold a prediction to: every engine's rounds converged or the cell's engines within 3% of each other
(the 5-step engine did not converge at 8 and 32 and spread 4.7% at 1; batch 32's three 2-step engines 7,317 to
10,463)."""


@pytest.fixture(scope="module")
def side():
    return shared_loads.load_side(PROFILE)


def test_the_sweep_as_recorded():
    """A data check of the fixture: SGLang 0.5.17, the cells and engines listed above, the measured verdicts."""
    data = json.loads(SWEEP.read_text())
    assert {r["sglang"] for r in data["runs"]} == {"0.5.17"}
    engines = [(r["steps"], tuple(b["batch"] for b in r["batches"])) for r in data["runs"]]
    assert sorted(engines) == [(0, (1, 8, 32)), (1, (1, 8, 32)), (2, (1, 8, 32)), (2, (8, 32)), (2, (8, 32)),
                               (3, (1, 8, 32)), (3, (8, 32)), (5, (1, 8, 32))]
    for batch, best, ratio in ((1, 3, 1.060), (8, 3, 1.001), (32, 1, 0.914)):
        m, base = read_measured(SWEEP, batch)
        assert max(m, key=m.get) == best and max(m.values()) / base == pytest.approx(ratio, abs=0.001)


@need
def test_the_step_count_is_the_flag_and_the_batches_are_the_profiles(side):
    assert W.infer_steps(side)[0] == 3 and side.spec_config.steps == 3
    assert side.spec_config.cuda_graph and side.spec_config.tp == 1


@need
@pytest.mark.parametrize("batch", (1, 8, 32))
def test_calibrated_with_both_figures_every_settled_cell_within_10_percent(side, batch):
    """Issue 40's bar from one profile + the unprofiled tokens/s at its step count + the measured no-speculation
    tokens/s: each settled cell within 10% (worst: +6.1% at 1 / 2 steps, +1.7% at 8 / 1, -8.6% at 32 / 1), the
    speed-up within 10% of the measured best's (1.079x against 1.060x, 1.001x against 1.001x, 0.910x against 0.914x),
    the verdict's direction (32: off) and the best: 3 at 8 (measured 3), 3 at 32 (measured 1, 0.5% above 3: the
    measured best's noise), 4 at 1 (not measured; 3 measured, 5 below it)."""
    m, base = read_measured(SWEEP, batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    for s in SETTLED[batch]:
        assert p[s] == pytest.approx(m[s], rel=0.10), s
    measured_speedup = max(m.values()) / base
    assert r["best"]["speedup"] == pytest.approx(measured_speedup, rel=0.10)
    assert r["best"]["steps"] == {1: 4, 8: 3, 32: 3}[batch]
    if batch == 32:
        assert r["best"]["speedup"] < 1 and not r["best"]["verdict_uncertain"]
        assert m[3] >= 0.99 * m[1]        # the predicted best inside the measured best's noise
    # the unsettled 5-step cells all measured below the prediction (+9% / +11% / +31%): recorded, not held
    assert p[5] > m[5]


@need
@pytest.mark.parametrize("batch", (1, 8, 32))
def test_from_the_profile_and_its_clock_alone(tmp_path, batch):
    """No figure given: the profile's own clock calibrates it, the baseline is estimated (427 / 3,158 / 11,048 tokens/s
    against 408 / 3,211 / 10,868 measured), and the speed-up is within 6% of the measured best's (0.95x / 1.01x / 0.96x
    of it; the issue allows 25%), said uncertain where it is near 1 (all three: inside the estimated baseline's band)."""
    out = tmp_path / "w.json"
    assert main(["whatif", str(PROFILE), "--batch", str(batch), "--steps", "1..6", "--boot", "0", "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    m, base = read_measured(SWEEP, batch)
    assert doc["calibration"]["source"]["kind"] == "profile_clock" and doc["calibration"]["steps"] == 3
    clock, est = {1: (424.4, 427), 8: (3457.8, 3158), 32: (12119, 11048)}[batch]
    assert doc["calibration"]["tokens_per_s"] == pytest.approx(clock, rel=0.001)
    assert doc["baseline"]["tokens_per_s"] == pytest.approx(est, rel=0.002)
    assert doc["baseline"]["tokens_per_s"] == pytest.approx(base, rel=0.05)
    ratio = doc["best"]["speedup"] / (max(m.values()) / base)
    assert ratio == pytest.approx({1: 0.948, 8: 1.009, 32: 0.963}[batch], abs=0.005)
    assert doc["best"]["verdict_uncertain"]
    assert doc["best"]["steps"] == {1: 4, 8: 3, 32: 3}[batch]
