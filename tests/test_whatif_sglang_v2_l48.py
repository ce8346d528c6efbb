"""A configuration measured after the model (2026-12-07, H100, recipes/device_plan.md "twenty-third session" and
"twenty-fourth session"): real SGLang 0.5.17 EAGLE-3, V = 2 (about half the draft tokens accepted), a 48-layer target (a
depth not profiled before), CUDA graphs at every batch size 1..64 (SGLang's default list), TP 1, batches 1, 8 and 32
(two batch sizes not profiled before). One profile at 3 steps with the shim's clock of 3 uncaptured rounds a batch size
(`sglang_h100_v2_l48_s3`), then an unprofiled sweep on the same kind of machine: 0..6 steps, 4 and 6 by two engines, 2
by three at batches 8 and 32, 3 and 5 by two (`sglang_sweep_h100_v2_l48.json`; the sweep's figure a cell is the mean of
its engines). A second profile of the same configuration on another day (`sglang_h100_v2_l48_s3_gap`), with the
shim's clock of the gaps between rounds (0199bcd).

The host was noisy: engines of one step count, each converged to 3%, up to 8% apart at batch 8 (6 steps: 3,197 and
2,948) and 17% at 32 (6 steps: 10,580 and 9,008; 2 steps: 7,317 to 10,463). Measured: speculation pays a little at
batch 1 (3 steps 1.06x, 4 steps 0.2% below), a little at 8 (4 steps 1.04x, 3 steps 3.7% below), not at 32 (best 4
steps, 0.96x). Nothing in the model was changed for this sweep."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze.cli import main
from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_h100_v2_l48_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v2_l48.json"
need = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="fixture not unpacked")
HELD = {1: (1, 2, 3, 4, 5, 6), 8: (1, 2, 3, 4, 5, 6), 32: (1, 2, 3, 4, 6)}
"""Cells to hold a prediction to: every cell but batch 32's 5 steps (its two engines 7,290 and 9,178, neither
converged: rounds spread 34% and 13%)."""


@pytest.fixture(scope="module")
def side():
    return shared_loads.load_side(PROFILE)


def test_the_sweep_as_recorded():
    """A data check of the fixture: SGLang 0.5.17, the cells and engines listed above, the measured verdicts."""
    data = json.loads(SWEEP.read_text())
    assert {r["sglang"] for r in data["runs"]} == {"0.5.17"}
    engines = [(r["steps"], tuple(b["batch"] for b in r["batches"])) for r in data["runs"]]
    assert sorted(engines) == [(0, (1, 8, 32)), (1, (1, 8, 32)), (2, (1, 8, 32)), (2, (8, 32)), (2, (8, 32)),
                               (3, (1, 8, 32)), (3, (8, 32)), (4, (1, 8, 32)), (4, (1, 8, 32)), (5, (1, 8, 32)),
                               (5, (1, 8, 32)), (6, (1, 8, 32)), (6, (1, 8, 32))]
    for batch, best, ratio in ((1, 3, 1.060), (8, 4, 1.038), (32, 4, 0.961)):
        m, base = read_measured(SWEEP, batch)
        assert max(m, key=m.get) == best and max(m.values()) / base == pytest.approx(ratio, abs=0.001)


@need
def test_the_step_count_is_the_flag_and_the_batches_are_the_profiles(side):
    assert W.infer_steps(side)[0] == 3 and side.spec_config.steps == 3
    assert side.spec_config.cuda_graph and side.spec_config.tp == 1


@need
@pytest.mark.parametrize("batch", (1, 8, 32))
def test_calibrated_with_both_figures_every_held_cell_within_10_percent(side, batch):
    """Issue 40's bar from one profile + the unprofiled tokens/s at its step count + the measured no-speculation
    tokens/s: each held cell within 10% (worst: +6.1% at 1 / 2 steps, -3.2% at 8 / 4, +9.0% at 32 / 2), the speed-up
    within 10% of the measured best's (1.079x against 1.060x, 1.001x against 1.038x, 0.910x against 0.961x), the
    verdict's direction (32: off) and the best inside the measured best's noise: 4 at 1 (measured 3, 4 0.2% below),
    3 at 8 (measured 4, 3 3.7% below; engines of 4 steps 3,213 and 3,450), 3 at 32 (measured 4, 3 5.6% below; engines
    of 4 steps 10,026 and 10,855, of 3 steps 9,635 and 10,146)."""
    m, base = read_measured(SWEEP, batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    for s in HELD[batch]:
        assert p[s] == pytest.approx(m[s], rel=0.10), s
    measured_speedup = max(m.values()) / base
    assert r["best"]["speedup"] == pytest.approx(measured_speedup, rel=0.10)
    assert r["best"]["steps"] == {1: 4, 8: 3, 32: 3}[batch]
    assert m[r["best"]["steps"]] >= {1: 0.99, 8: 0.96, 32: 0.94}[batch] * max(m.values())
    if batch == 32:
        assert r["best"]["speedup"] < 1 and not r["best"]["verdict_uncertain"]
    # batch 32's unsettled 5-step cell measured below the prediction (+16%): recorded, not held
    assert (p[5] > 1.1 * m[5]) == (batch == 32)


@need
@pytest.mark.parametrize("batch", (1, 8, 32))
def test_from_the_profile_and_its_clock_alone(tmp_path, batch):
    """No figure given: the profile's own clock calibrates it, the baseline is estimated (427 / 3,158 / 11,048 tokens/s
    against 408 / 3,211 / 10,868 measured), and the speed-up is within 9% of the measured best's (0.95x / 0.97x / 0.92x
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
    assert ratio == pytest.approx({1: 0.948, 8: 0.973, 32: 0.916}[batch], abs=0.005)
    assert doc["best"]["verdict_uncertain"]
    assert doc["best"]["steps"] == {1: 4, 8: 3, 32: 3}[batch]


GAP = REAL / "sglang_h100_v2_l48_s3_gap.sqlite"
need_gap = pytest.mark.skipif(not (GAP.exists() and SWEEP.exists()), reason="fixture not unpacked")


@pytest.fixture(scope="module")
def gap_side():
    return shared_loads.load_side(GAP)


@need_gap
def test_the_clock_measured_the_gaps_between_rounds_without_the_profiler(gap_side):
    """The shim's clock of the uncaptured rounds (0199bcd) on a real server: the gap before each round, end of the last
    decode cycle with requests to the next round's first (7 / 11 / 26 rounds at batches 1 / 8 / 32), 31-33 ms
    unprofiled at every batch size; the profile's own rounds under nsys paid the same at batch 1 (30.3 ms) but 43.3 ms at
    8 and 61.4 ms at 32 (the profiler slows the rounds' prefill of more requests more)."""
    got = {b: sides.clock_round_gap_ns(gap_side, b) for b in (1, 8, 32)}
    assert {b: g["round_gaps"] for b, g in got.items()} == {1: 7, 8: 11, 32: 26}
    assert {b: g["round_gap_ns"] for b, g in got.items()} == {1: 30_707_000.0, 8: 33_082_000.0, 32: 31_665_000.0}
    assert sides.clock_round_gap_ns(gap_side, 16) is None


@need_gap
@pytest.mark.parametrize("batch, profiled_gap_ms", ((1, 30.27), (8, 43.28), (32, 61.43)))
def test_whatif_takes_the_clock_gap_and_holds_to_the_sweep(tmp_path, gap_side, batch, profiled_gap_ms):
    """whatif from the second profile: its rounds pay the clock's gap, not the profiled one (the JSON says both); with
    both figures every held cell within 10% (worst +6.6% at 1 / 2 steps, -3.2% at 8 / 4, +9.2% at 32 / 2); from the
    profile and its clock alone the speed-up within 14% of the measured best's (0.93x / 0.87x / 0.95x of it: this
    engine's clock at batch 8 ran 3,054 tokens/s of steady cycles where the sweep's 3-step engines measured 3,123 and
    3,306 rounds), said uncertain."""
    out = tmp_path / "w.json"
    assert main(["whatif", str(GAP), "--batch", str(batch), "--steps", "1..6", "--boot", "0", "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    clock = sides.clock_round_gap_ns(gap_side, batch)["round_gap_ns"]
    assert doc["rounds"]["round_gap_source"] == "profile_clock" and doc["rounds"]["round_gap_ns"] == clock
    assert doc["rounds"]["round_gap_profiled_ns"] / 1e6 == pytest.approx(profiled_gap_ms, abs=0.01)
    m, base = read_measured(SWEEP, batch)
    ratio = doc["best"]["speedup"] / (max(m.values()) / base)
    assert ratio == pytest.approx({1: 0.931, 8: 0.868, 32: 0.951}[batch], abs=0.005)
    assert doc["best"]["verdict_uncertain"]
    r = W.whatif(gap_side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    for s in HELD[batch]:
        assert p[s] == pytest.approx(m[s], rel=0.10), s
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / base, rel=0.10)
