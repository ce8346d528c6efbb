"""advise names whatif's step count where no other rule does (rule draft_steps), and the adaptive rule only where
speculation is predicted to pay at some batch size, with the batch size asked for among its sizes.

A newcomer's decision run over five real SGLang 0.5.17 profiles (2026-12-07) found advise silent on the step count
("no finding: every rule is below its threshold") on a 5-step profile whose verify is 25% of the cycle, while whatif
predicted 2 steps 5.9% faster; the sweep measured 2 steps within 0.9% of the best (3), 5 steps 1.5% below it.
Before, only the verify rule (verify >= 50% of the cycle) and the draft_extend rule (fewer steps) named a step count.
Since 2026-12-07 verify's share is taken of the calibrated cycle where whatif was calibrated (advise.model.phase_share):
that profile calibrated has verify at 65% of its unprofiled cycle, so the verify rule names its step count there.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze import findings as F
from analyze.tools.advise.command import main_advise
from analyze.tools.advise.model import STEP_GAIN, advise
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
S5 = REAL / "sglang_h100_v3_l32_s5.sqlite"           # 5 steps, V = 3, 32 layers, batches 1 and 16
S5_SWEEP = REAL / "sglang_sweep_h100_v3_l32.json"
GRID = REAL / "sglang_v2_l64_s3_b4.sqlite"           # 3 steps, V = 2, 64 layers: verify 76% of the cycle
L8 = REAL / "sglang_v2_l8_s3.sqlite"                 # 3 steps, 8 layers: speculation pays at no batch size


def need(*paths):
    return pytest.mark.skipif(not all(p.exists() for p in paths), reason="real SGLang fixtures not unpacked")


def check(adv, rule):
    return next(c for c in adv.checks if c.rule == rule)


@need(S5, S5_SWEEP)
def test_a_host_bound_five_step_profile_gets_its_step_count_and_the_sweep_agrees(tmp_path):
    """Calibrated, verify is 67% of the unprofiled cycle (65% before the round's gap was modelled) (25% of the profiled one: the profiler stretched the host
    time): the verify_dominated finding names whatif's 2 steps (+5.9%) and the draft_steps rule leaves it to it.
    Until 2026-12-07 verify's share was taken of the profiled cycle and draft_steps named the step count here."""
    measured, _ = read_measured(S5_SWEEP, 16)
    out = tmp_path / "a.json"
    assert main_advise([str(S5), "--batch", "16", "--calibrate-tps", f"{measured[5]:.1f}", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    f = [x for x in doc["findings"] if x["rule"] == F.VERIFY_DOMINATED]
    assert len(f) == 1
    ev = f[0]["evidence"]
    assert ev["profiled_steps"] == 5 and ev["recommended_steps"] == 2 and ev["calibrated_cycle"] is True
    assert ev["verify_share"] == pytest.approx(0.669, abs=0.002)
    assert ev["tokens_per_s_profiled"] == pytest.approx(measured[5], rel=1e-3)       # the calibration pins it
    assert ev["tokens_per_s_recommended"] / ev["tokens_per_s_profiled"] == pytest.approx(1.059, abs=0.005)
    assert [s["value"] for s in f[0]["settings"]] == ["2", "1", "3"]
    # the sweep: 2 steps within 1% of the measured best (3), and faster than the profiled 5
    assert measured[2] >= 0.99 * max(measured.values()) and measured[2] > measured[5]
    checks = {c["rule"]: c for c in doc["checks"]}
    assert checks[F.DRAFT_STEPS]["status"] == F.NOT_APPLICABLE
    assert "names the step count (verify is 66.9% of the cycle without the profiler)" in checks[F.DRAFT_STEPS]["reason"]


@need(S5)
def test_where_the_speculation_finding_says_no_step_count_pays_it_names_none():
    """The 5-step profile alone at batch 16: 0.60x at whatif's best (outside the estimate's error: the speculation
    rule's finding, which names whatif's best itself): no second finding with a step count beside it."""
    adv = advise(shared_loads.api_load(str(S5)), batch=16)
    assert check(adv, F.SPECULATION).status == F.TRIGGERED
    c = check(adv, F.DRAFT_STEPS)
    assert c.status == F.NOT_APPLICABLE and "no step count pays" in c.reason


@need(L8)
def test_a_lean_to_no_speculation_inside_the_error_and_an_extrapolated_pick_are_said():
    """8 layers, batch 1, the profile alone: 0.75x (inside the estimated baseline's error: the speculation rule says
    'uncertain'), whatif's best 4 steps, one beyond the profiled 3 (extrapolated): the finding names 4 and says all
    three: extrapolated, the lean to no speculation, not calibrated."""
    adv = advise(shared_loads.api_load(str(L8)), batch=1)
    assert check(adv, F.SPECULATION).status == F.NO_DATA
    f = next(x for x in adv.findings if x.rule == F.DRAFT_STEPS)
    assert f.evidence["best_steps"] == 4 and f.evidence["best_extrapolated"] is True
    assert f.evidence["calibrated"] is False and f.evidence["speedup_best"] == pytest.approx(0.75, abs=0.01)
    assert f.title.endswith("(+1.9% tokens/s predicted, extrapolated)")
    assert "extrapolated: acceptance beyond the profiled 3 draft positions" in f.suggestion
    assert "If speculation is kept: whatif leans to no speculation (0.75x at its best, a verdict it cannot make" in f.suggestion
    assert "--calibrate-tps X" in f.suggestion
    # the saving is a share of batch 1's cycle (advise --batch 1: the cycles are batch 1's alone)
    assert f.cycle_ns == pytest.approx(adv.cycle_ns) and adv.cycles_batch == 1


@need(GRID)
def test_where_verify_dominates_the_verify_rule_names_the_step_count_alone():
    adv = advise(shared_loads.api_load(str(GRID)), batch=16)
    c = check(adv, F.DRAFT_STEPS)
    assert c.status == F.NOT_APPLICABLE and "verify_dominated" in c.reason
    assert not [x for x in adv.findings if x.rule == F.DRAFT_STEPS]


@need(GRID)
def test_the_profiled_step_count_predicted_best_is_below_threshold():
    """At batch 1 whatif's best is the profiled count or within STEP_GAIN of it: no finding, and the check says which."""
    adv = advise(shared_loads.api_load(str(GRID)), batch=64, calibrate_tps=13213.5, baseline_tps=15858.4)
    w = adv.whatif
    c = check(adv, F.DRAFT_STEPS)
    assert c.status in (F.NOT_APPLICABLE, F.BELOW_THRESHOLD)
    if c.status == F.BELOW_THRESHOLD:
        assert w["best_steps"] == w["profiled_steps"] or w["tokens_per_s_best"] < (1 + STEP_GAIN) * w["tokens_per_s_profiled"]


@need(L8)
def test_adaptive_rule_needs_a_batch_size_where_speculation_is_predicted_to_pay():
    """8 layers: 0.75x at batch 1 (inside the estimate's error, so not 'does not pay') and 0.73x at 16 (0.65x before
    the round's gap was modelled): every batch
    size leans to no speculation, so no adaptive config (docs/advise.md: speculation paying at one or more)."""
    adv = advise(shared_loads.api_load(str(L8)), batch=1)
    c = check(adv, F.ADAPTIVE_STEPS)
    assert c.status == F.BELOW_THRESHOLD and "predicted to pay at no batch size" in c.reason
    assert "1: 0.75x" in c.reason and "16: 0.73x" in c.reason
    assert not [x for x in adv.findings if x.rule == F.ADAPTIVE_STEPS]


@need(GRID)
def test_the_batch_size_asked_for_is_among_the_adaptive_rules_sizes():
    """--batch 64: 83 steady cycles (6% of them, under the visited share) but 20 or more: modelled, so the
    adaptive rule lists it beside the visited 1, 4 and 16 (it left it out before)."""
    adv = advise(shared_loads.api_load(str(GRID)), batch=64, calibrate_tps=13213.5, baseline_tps=15858.4)
    rows = {r["batch"]: r for r in adv.whatif["per_batch"]}
    assert sorted(rows) == [1, 4, 16, 64]
    assert rows[64]["baseline_source"] == "given" and rows[64]["tokens_per_s_baseline"] == pytest.approx(15858.4)
    f = next(x for x in adv.findings if x.rule == F.ADAPTIVE_STEPS)
    # 64: 2 since the round's gap is modelled (3 before; measured 3 at 0.83x, 2 at 0.73x: speculation pays at neither)
    assert f.title.endswith("1: 4, 4: 4, 16: 3, 64: 2")


@need(GRID)
def test_with_batch_the_cycle_figures_are_of_that_batch_size(tmp_path):
    """advise --batch 1 on a profile of batches 1, 4 and 16 (and 64's few): the header's mean cycle and the verify
    share are batch 1's (they pooled every batch size, 'verify dominates (76.1%)' under a batch-1 step count); the
    cycles and mean period equal the report's per-batch row of 1 (one steady rule, one clock: host start to next)."""
    from analyze import views

    a = shared_loads.api_load(str(GRID))
    row = views.get(a, "decode_per_batch").set_index("batch").loc[1]
    adv = advise(a, batch=1)
    assert adv.cycles_batch == 1 and adv.cycles == row["cycles"] == 575
    assert adv.cycle_ns == pytest.approx(row["period_mean_ns"], rel=1e-12)
    pooled = advise(a, whatif=False)
    assert pooled.cycles_batch is None and pooled.cycles == 1451
    share_1 = check(adv, F.VERIFY_DOMINATED).figures["verify_share"]
    assert share_1 == pytest.approx(0.728, abs=0.001) and check(pooled, F.VERIFY_DOMINATED).figures["verify_share"] \
        == pytest.approx(0.761, abs=0.001)
    out = tmp_path / "a.txt"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main_advise([str(GRID), "--batch", "1"]) == 0
    assert "over 575 cycles at batch 1, host start to next start" in " ".join(buf.getvalue().split())
