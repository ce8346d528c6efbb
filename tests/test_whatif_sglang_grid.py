"""whatif and the adaptive config held to a full real grid: SGLang 0.5.17 EAGLE-3 on the H200, V = 2
(a draft token accepted with probability ~1/2), a 64-layer tiny Llama target, CUDA graphs, TP 1,
steps 0..6 x batches 1, 4, 16, 64, every figure unprofiled (recipes/sglang_sweep.sh, 2026-12-05).

fixtures/real/sglang_sweep_v2_l64_b4.json: ``runs`` (steps 0 and 3 on one machine, 1, 2, 4, 5, 6 on a
second: the device lends a fresh one per call) and ``adaptive_runs`` (SGLang's default adaptive config).
sglang_v2_l64_s3_b4.sqlite: profile-trace of the 3-step engine over the same round sizes (1,024 tokens a
request at batches 1 and 4, 256 at 16, 128 at 64).

Measured truth (tokens/s): batch 1 best 4 steps 1.12x; batch 4 best 5 1.02x (break-even); batch 16 best
3 1.20x; batch 64 no step count pays (best 3 at 0.83x). Steps 4-6 at batches 16 and 64 are not smooth
on the grid (batch 16: 5,831 at 3, 5,325 at 4, 5,570 at 5, 4,197 at 6); a third machine
(sglang_sweep_v2_l64_c3.json) measured two of those cells again: 64/4 15% higher, 16/6 too noisy to pin
(rounds under a second at batch 16): engine-to-engine spread, not physics. docs/whatif.md shows the table.
"""
import json
from pathlib import Path

import pytest

from analyze.tools.whatif import model as W
from analyze.tools.whatif import per_batch as PB
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_v2_l64_s3_b4.sqlite"
SWEEP = REAL / "sglang_sweep_v2_l64_b4.json"
need = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="real SGLang grid fixtures not unpacked")
BATCHES = (1, 4, 16, 64)


def grid():
    """{(steps, batch): tokens/s} of the unprofiled sweep, steps 0 = no speculation (whatif's own sweep
    reader, command.read_measured)."""
    out = {}
    for b in BATCHES:
        measured, base = read_measured(SWEEP, b)
        out.update({(s, b): tps for s, tps in measured.items()})
        out[(0, b)] = base
    return out


@pytest.fixture(scope="module")
def side():
    return shared_loads.load_side(PROFILE)


def test_the_grid_is_complete():
    """A data check of the fixture, read by whatif's sweep reader: every cell of the grid is there."""
    if not SWEEP.exists():
        pytest.skip("sweep fixture absent")
    g = grid()
    assert sorted(g) == sorted((s, b) for s in range(7) for b in BATCHES)
    # every cell is the median of >= 3 long rounds (1,024 tokens a request at batch 1)
    data = json.loads(SWEEP.read_text())
    assert {b["batch"] for run in data["runs"] for b in run["batches"]} == set(BATCHES)
    assert all(len(b["rounds"]) >= 3 for run in data["runs"] for b in run["batches"])
    assert {run["sglang"] for run in data["runs"]} == {"0.5.17"}


@need
@pytest.mark.parametrize("batch", BATCHES)
def test_calibrated_prediction_gives_the_right_decision_at_every_batch(side, batch):
    """One profile + the unprofiled tokens/s at its step count + the measured no-speculation tokens/s:
    whether speculation pays is right at every batch size, the speed-up within 10% of the measured best,
    and where it pays the predicted best step count measures within 5% of the best (regret <= 5%)."""
    g = grid()
    base = g[(0, batch)]
    measured = {s: g[(s, batch)] for s in range(1, 7)}
    best_measured = max(measured.values())
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=g[(3, batch)], baseline_tps=base)
    assert (r["best"]["speedup"] > 1) == (best_measured > base)
    assert r["best"]["speedup"] == pytest.approx(best_measured / base, rel=0.10)
    if best_measured > base:               # where it does not pay (64) the step count is moot: off
        assert measured[r["best"]["steps"]] >= 0.95 * best_measured
    # the recommended step count is the measured best at 1 and 16 (4 and 3); at 4, where the measured top
    # is flat, it measures within 1% of the best
    if batch in (1, 16):
        assert r["best"]["steps"] == max(measured, key=measured.get)
    elif batch == 4:
        assert measured[r["best"]["steps"]] >= 0.99 * best_measured


# steps 0 and 3 ran on one machine, 1, 2, 4, 5 and 6 on another (each device call may get a fresh one);
# calibrated at 5 steps, the predictions of the other cells of that machine. Cells where they are more
# than 10% off (issue 40 open): batch 16 at 6 steps (4,197 measured after 5,570 at 5: a cliff) and batch 64
# at 4 (the 4 < 5 inversion, 11,154 against 12,246 on the same machine)
MACHINE_B = (1, 2, 4, 5, 6)
OFF = {(16, 6), (64, 4)}


@need
@pytest.mark.parametrize("batch", BATCHES)
def test_calibrated_prediction_per_step_count_on_one_machine(side, batch):
    """Calibrated with the unprofiled tokens/s at 5 steps (measured on the machine of steps 1, 2, 4 and 6):
    every other step count of that machine within 10% (5% at batches 1 and 4), the listed cells aside;
    step 3, measured on the other machine, within 10% too (that machine was 3-8% faster at 16 and 64)."""
    g = grid()
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=g[(5, batch)], calibrate_steps=5,
                 baseline_tps=g[(0, batch)])
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    tol = 0.05 if batch in (1, 4) else 0.10
    for s in MACHINE_B:
        if (batch, s) not in OFF:
            assert p[s] == pytest.approx(g[(s, batch)], rel=tol), s
    assert p[3] == pytest.approx(g[(3, batch)], rel=0.10)


@need
@pytest.mark.xfail(strict=True, reason="issue 40: cells the smooth cost model misses (docs/whatif.md, the full grid)")
@pytest.mark.parametrize("batch, steps", sorted(OFF))
def test_cells_off_by_more_than_ten_percent(side, batch, steps):
    g = grid()
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=g[(5, batch)], calibrate_steps=5,
                 baseline_tps=g[(0, batch)])
    assert r["predictions"].set_index("steps")["tokens_per_s"][steps] == pytest.approx(g[(steps, batch)], rel=0.10)


@need
@pytest.mark.parametrize("batch", BATCHES)
def test_plain_step_estimated_from_the_speculative_profile(side, batch):
    """The no-speculation step from the 3-step profile alone (GPU work without draft/draft_extend, the
    verify's extend attention swapped for decode attention at the draft forwards' cost a layer) within
    10% of the unprofiled plain decode step of the sweep, on GPU time measured under the profiler.
    Before the swap: 4,876 us against 3,293 at batch 1 (+48%), 6,585 against 4,036 at 64 (+63%)."""
    c = W.step_costs(side, batch=batch)
    plain = W.plain_step(c)
    assert plain["attention"] is not None and plain["attention"]["layers"] == pytest.approx(64)
    measured_ns = batch / grid()[(0, batch)] * 1e9
    assert plain["gpu_ns"] == pytest.approx(measured_ns, rel=0.10)
    assert plain["attention"]["decode_attention_per_layer_ns"] < plain["attention"]["verify_attention_ns"] / 64


@need
@pytest.mark.parametrize("batch", (1, 4, 16))
def test_one_profile_alone_speedup_within_25_percent(side, batch):
    """No unprofiled figure at all (issue 40: the speed-up within 25%). Batch 1 says 0.95x where 1.12x was
    measured: inside that error, so the report asks for the unprofiled figures before turning it off."""
    g = grid()
    base = g[(0, batch)]
    best_measured = max(g[(s, batch)] for s in range(1, 7)) / base
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch)
    assert r["baseline"]["source"] == "estimated"
    assert r["best"]["speedup"] == pytest.approx(best_measured, rel=0.25)
    # every one of these verdicts is inside the profile-alone error: said so, never a flat "does not pay"
    assert r["best"]["verdict_uncertain"]


@need
def test_uncertain_verdict_is_said_and_goes_with_measured_figures(side):
    from analyze.tools.whatif.render import render_whatif as render

    g = grid()
    r = W.whatif(side, range(1, 7), n_boot=0, batch=1)
    assert r["best"]["speedup"] < 1 < max(g[(s, 1)] for s in range(1, 7)) / g[(0, 1)]   # the flip
    assert "Uncertain verdict" in render(r)
    hint = "profile with profile-trace --delay or --capture cudaprofilerapi: the profile then carries its own unprofiled clock"
    assert hint in " ".join(render(r).split())                 # uncalibrated: how to get a profile that is not
    # calibrated, the baseline still estimated: still uncertain (the calibration does not measure the plain
    # step), and the text asks for the baseline only
    cal = W.whatif(side, range(1, 7), n_boot=0, batch=1, calibrate_tps=g[(3, 1)])
    assert cal["best"]["verdict_uncertain"] and "Uncertain verdict: against an estimated baseline (calibrated)" \
        in render(cal).replace("\n", " ")
    assert "--calibrate-tps" not in render(cal).split("Uncertain verdict")[1].split("Assumptions")[0]
    assert hint not in " ".join(render(cal).split())
    given = W.whatif(side, range(1, 7), n_boot=0, batch=1, calibrate_tps=g[(3, 1)], baseline_tps=g[(0, 1)])
    assert not given["best"]["verdict_uncertain"] and "Uncertain verdict" not in render(given)
    assert given["best"]["speedup"] > 1          # the sweep's verdict
    assert not W.verdict_uncertain(0.70, "estimated", False) and not W.verdict_uncertain(1.25, "estimated", False)
    assert not W.verdict_uncertain(1.0, "given", False)


@need
def test_one_profile_alone_at_batch_64(side):
    """Batch 64 from the profile alone: speculation does not pay, 0.81x predicted, 0.83x measured (before
    the round tail and the scheduler's wait: 1.23x). The rounds of 128 tokens a request end with their
    slowest request (whatif/rounds.py: 80 cycles for a 57-cycle median) and the plain step is GPU bound
    once its host time leaves out the wait for the GPU (host_wait_ns, 1,751 us a cycle here). Inside the
    profile-alone band, so said to be uncertain."""
    g = grid()
    r = W.whatif(side, range(1, 7), n_boot=0, batch=64)
    assert r["rounds"]["source"] == "profile" and r["rounds"]["request_tokens"] == [64, 128]
    assert r["best"]["speedup"] < 1.0
    assert r["best"]["speedup"] == pytest.approx(max(g[(s, 64)] for s in range(1, 7)) / g[(0, 64)], rel=0.10)
    # the estimated plain step carries the round's gap as profiled (nsys-stretched host time, spread over the
    # round's 64-128 steps): 13,114 tokens/s against 15,858 measured (within 5% before the gap was modelled);
    # the speed-up, both sides carrying it, stays within 10%
    assert r["baseline"]["tokens_per_s"] == pytest.approx(13114, rel=0.01)
    assert r["best"]["verdict_uncertain"]


@need
def test_per_batch_table_and_config_from_the_grid(side, tmp_path):
    """--per-batch with the sweep's unprofiled figures: speculation pays at 1, 4, 16 and not at 64, as
    measured; the best step count differs (4, 4, 3, 2: the measured bests are 4, 5 (flat: 4 within 0.3%),
    3 and none); the written config keeps a step count >= 1 at 64 (SGLang's adaptive 0 steps still
    verifies: measured below every fixed step count there, next test), lists 64 as not paying, and is
    the committed recipes/adaptive/v2_l64_grid.json the device recipe runs."""
    g = grid()
    t = PB.per_batch([side], range(1, 7), n_boot=0, baselines_tps={b: g[(0, b)] for b in BATCHES},
                     calibrate={b: g[(3, b)] for b in BATCHES})
    assert t["batch"].tolist() == list(BATCHES)
    assert t["best_or_off"].gt(0).tolist() == [True, True, True, False]
    cfg = PB.adaptive_config(t)
    # every bucket holds its predicted best step count, 64 too (not 0)
    assert [cfg[str(b)]["candidate_steps"] for b in BATCHES] == [[int(s)] for s in t["best_steps"]]
    assert t["best_steps"].iloc[-1] >= 1 and t["best_or_off"].iloc[-1] == 0
    assert cfg["specprof"]["not_paying"] == [64]
    # 64: 2 since the round's gap is modelled (3 before, and measured: 13,213 against 11,535 at 2, neither paying)
    assert t["best_steps"].tolist() == [4, 4, 3, 2] and PB.differs(t)
    committed = json.loads((Path(__file__).resolve().parents[1] / "recipes" / "adaptive" / "v2_l64_grid.json").read_text())
    # the committed config (run on the device with 3 at 64) is today's but for that bucket
    assert {k: v for k, v in committed.items() if k.isdigit() and k != "64"} == \
        {k: v for k, v in cfg.items() if k.isdigit() and k != "64"}
    assert committed["64"]["candidate_steps"] == [3] and cfg["64"]["candidate_steps"] == [2]


def test_sglang_adaptive_zero_steps_is_not_speculation_off():
    """A data check of the fixture (the reason adaptive_config never writes 0; no project code runs):
    SGLang's default adaptive config runs batch 64 at 0 steps (trivial verify + draft extend): measured 8,748 tokens/s, below every fixed step count (10,997-13,213) and 0.55x no speculation."""
    if not SWEEP.exists():
        pytest.skip("sweep fixture absent")
    g = grid()
    data = json.loads(SWEEP.read_text())
    (run,) = data["adaptive_runs"]
    assert run["adaptive"]["mode"] == "default" and run["adaptive"]["config"]["64"]["candidate_steps"] == [0]
    at64 = next(b for b in run["batches"] if b["batch"] == 64)
    assert at64["tokens_per_request_cycle"] == pytest.approx(1.0, abs=0.02)   # 0 draft tokens accepted
    assert at64["tokens_per_s"] < min(g[(s, 64)] for s in range(1, 7)) < g[(0, 64)]
    assert at64["tokens_per_s"] / g[(0, 64)] == pytest.approx(0.55, abs=0.02)


@need
def test_advise_does_not_claim_an_uncertain_verdict():
    """advise on the grid profile with no unprofiled figure: the pooled speed-up against the estimated
    baseline is ~1.0x, inside the profile-alone error, so the speculation rule states no verdict (before:
    "speculation does not pay" ranked first); with the measured figures of batch 1 it is certain."""
    from analyze import findings as F
    from analyze.tools.advise.model import advise

    a = shared_loads.api_load(str(PROFILE))
    adv = advise(a).to_dict()
    assert not [f for f in adv["findings"] if f["rule"] == "speculation"]
    # the per-batch rule states no verdict either where it is uncertain
    (adaptive,) = [f for f in adv["findings"] if f["rule"] == "adaptive_steps"]
    assert "uncertain whether speculation pays" in adaptive["suggestion"]
    assert "speculation does not pay" not in adaptive["suggestion"]
    check = next(c for c in adv["checks"] if c["rule"] == "speculation")
    assert check["status"] == F.NO_DATA and check["reason"].startswith("uncertain")
    g = grid()
    adv = advise(a, baseline_tps=g[(0, 1)], calibrate_tps=g[(3, 1)], batch=1).to_dict()
    check = next(c for c in adv["checks"] if c["rule"] == "speculation")
    assert check["status"] == F.BELOW_THRESHOLD and "speculation pays" in check["reason"]


THIRD = REAL / "sglang_sweep_v2_l64_c3.json"


def third_machine():
    """{(steps, batch): (tokens/s, spread)} of the third machine (2026-12-05, one device call: fixed 3, 4 and
    6 steps at batches 16 and 64) and its run of the written adaptive config per batch."""
    data = json.loads(THIRD.read_text())
    fixed = {(r["steps"], b["batch"]): (b["tokens_per_s"], b["spread"]) for r in data["runs"] for b in r["batches"]}
    adaptive = {b["batch"]: (b["tokens_per_s"], b["spread"]) for r in data["adaptive_runs"] for b in r["batches"]}
    return fixed, adaptive


@need
def test_the_missed_cells_measured_again_on_a_third_machine(side):
    """The two cells the model missed on the grid (64/4 measured 11,154 there, 16/6 4,197) measured again on a
    third machine: 64/4 12,884 tokens/s (spread 0.3%), 15% above the grid's figure; 16/6 4,688 with a spread
    of 40% (rounds of 4,096 tokens last under a second at batch 16: the sweep cannot pin that cell).
    Calibrated on the third machine's own 3 steps at 64 (12,380, spread 3%), its 4 and 6 steps are predicted
    within 5%; at 16 (its 3 steps too noisy: 17%), calibrated on the grid's, its 4 steps within 5%. The
    cells were engine-to-engine spread, larger than the model's error."""
    if not THIRD.exists():
        pytest.skip("third-machine sweep absent")
    g = grid()
    fixed, _ = third_machine()
    assert fixed[(4, 64)][0] == pytest.approx(12884.3, rel=1e-4) and fixed[(4, 64)][0] > 1.15 * g[(4, 64)]
    assert fixed[(6, 16)][1] > 0.3 and fixed[(3, 16)][1] > 0.1 and fixed[(3, 64)][1] < 0.05
    for batch, calibrate, cells in ((64, fixed[(3, 64)][0], (4, 6)), (16, g[(3, 16)], (4,))):
        r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=calibrate, baseline_tps=g[(0, batch)])
        p = r["predictions"].set_index("steps")["tokens_per_s"]
        for steps in cells:
            tps, spread = fixed[(steps, batch)]
            assert spread <= 0.05 and p[steps] == pytest.approx(tps, rel=0.05), (steps, batch, p[steps], tps)
    assert abs(g[(4, 64)] / fixed[(4, 64)][0] - 1) > 0.10          # the grid's cell vs the same cell elsewhere


@need
def test_the_written_adaptive_config_against_sglangs_default_and_fixed_steps():
    """Issue 41's comparison, unprofiled: the config whatif wrote from the grid profile (4 / 4 / 3 / 3 steps at
    batches 1 / 4 / 16 / 64, recipes/adaptive/v2_l64_grid.json) run as SGLang's adaptive engine on the third
    machine, against SGLang's default adaptive config (grid, first machine) and the best fixed step count
    (>= 1; on the same machine where it ran fixed steps: batches 16 and 64). At least the default at 1, 4
    and 64 (+4%, +1%, +45%: the default's 0 steps at 64 is a trivial verify plus the draft extend), within
    its round-to-round spread at 16 (-2%, spread 13%); within the spread of the best fixed step count
    everywhere (1: -1%, 4: +1%, 16: -2%, 64: -1.6%). At 64 no speculation is faster still: adaptive mode
    cannot turn speculation off."""
    if not THIRD.exists():
        pytest.skip("third-machine sweep absent")
    g = grid()
    fixed, written = third_machine()
    default = {b["batch"]: b["tokens_per_s"] for r in json.loads(SWEEP.read_text())["adaptive_runs"]
               for b in r["batches"]}
    run = json.loads(THIRD.read_text())["adaptive_runs"][0]["adaptive"]
    assert [run["config"][k]["candidate_steps"] for k in ("1", "4", "16", "64")] == [[4], [4], [3], [3]]
    for batch in BATCHES:
        tps, spread = written[batch]
        tol = max(spread, 0.02)
        same = [v[0] for (s, b), v in fixed.items() if b == batch]
        best_fixed = max(same) if same else max(g[(s, batch)] for s in range(1, 7))
        assert tps >= default[batch] * (1 - tol), batch
        assert tps >= best_fixed * (1 - tol), (batch, tps, best_fixed)
    assert written[1][0] > 1.04 * default[1] and written[64][0] > 1.4 * default[64]
    assert g[(0, 64)] > written[64][0]


ONE_MACHINE = REAL / "sglang_sweep_h100_v2_l64_adaptive.json"


def test_the_written_config_on_one_machine_against_the_default_and_each_fixed_step_count():
    """Issue 41's real check on ONE machine (an H100, 2026-12-06, recipes/device_plan.md): the config whatif
    writes from the grid profile (recipes/adaptive/v2_l64_grid.json: 4 / 4 / 3 / 3 steps at batches 1 / 4 /
    16 / 64, the previous test ties it to the code) run as SGLang's adaptive engine, SGLang's default adaptive
    config, and fixed 3 and 4 steps, each at batches 1, 4, 16 and 64, unprofiled. Measured: the best fixed
    step count is 4 / 4 / 3 / 3, the written config's own; the written config is within the larger of the
    two rounds' spreads (and 2%) of the best fixed at every batch size, at least the default everywhere and
    above it beyond the spreads at 1 (+5.8%) and 64 (+51%: the default's 0 steps), and above each single
    fixed step count beyond the spreads somewhere (3 steps at batch 1, 4 steps at batch 64)."""
    if not ONE_MACHINE.exists():
        pytest.skip("one-machine adaptive sweep absent")
    data = json.loads(ONE_MACHINE.read_text())
    fixed = {(r["steps"], b["batch"]): (b["tokens_per_s"], b["spread"]) for r in data["runs"] for b in r["batches"]}
    runs = {("written" if r["adaptive"]["config_path"] else "default"): r for r in data["adaptive_runs"]}
    written = {b["batch"]: (b["tokens_per_s"], b["spread"]) for b in runs["written"]["batches"]}
    default = {b["batch"]: (b["tokens_per_s"], b["spread"]) for b in runs["default"]["batches"]}
    cfg = runs["written"]["adaptive"]["config"]
    committed = json.loads((Path(__file__).resolve().parents[1] / "recipes" / "adaptive" / "v2_l64_grid.json").read_text())
    assert {k: v["candidate_steps"] for k, v in cfg.items() if k.isdigit()} == \
        {k: v["candidate_steps"] for k, v in committed.items() if k.isdigit()}
    assert runs["default"]["adaptive"]["mode"] == "default"
    assert sorted({s for s, _ in fixed}) == [3, 4] and sorted(written) == list(BATCHES) == sorted(default)

    def beyond(a, b):       # a above b by more than both rounds' spreads
        return a[0] > b[0] * (1 + max(a[1], b[1]))

    best = {}
    for batch in BATCHES:
        best[batch] = max((3, 4), key=lambda s: fixed[(s, batch)][0])
        tol = max(written[batch][1], fixed[(best[batch], batch)][1], 0.02)
        assert written[batch][0] >= fixed[(best[batch], batch)][0] * (1 - tol), batch
        assert written[batch][0] >= default[batch][0] * (1 - max(written[batch][1], default[batch][1])), batch
    assert [best[b] for b in BATCHES] == [int(committed[str(b)]["candidate_steps"][0]) for b in BATCHES]
    assert beyond(written[1], default[1]) and beyond(written[64], default[64])
    assert written[64][0] > 1.4 * default[64][0]
    assert beyond(written[1], fixed[(3, 1)]) and beyond(written[64], fixed[(4, 64)])


@need
def test_the_grid_profile_calibrated_on_another_machine_predicts_its_other_step_count(side):
    """A check the profile never saw: the H200 grid profile, calibrated with the H100's own unprofiled 3-step
    tokens/s at each batch size (the one-machine sweep), predicts that machine's 4-step tokens/s within 5%
    (-1.3 / +0.8 / +1.8 / +3.5% at batches 1 / 4 / 16 / 64), and its recommended step count (over 1..6) is the
    machine's better of 3 and 4 at batches 1 / 4 / 16 (4 / 4 / 3; at 64, 2 since the round's gap is modelled)."""
    if not ONE_MACHINE.exists():
        pytest.skip("one-machine adaptive sweep absent")
    data = json.loads(ONE_MACHINE.read_text())
    fixed = {(r["steps"], b["batch"]): b["tokens_per_s"] for r in data["runs"] for b in r["batches"]}
    for batch in BATCHES:
        r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=fixed[(3, batch)])
        pred = {int(p.steps): p.tokens_per_s for p in r["predictions"].itertuples()}
        assert pred[4] == pytest.approx(fixed[(4, batch)], rel=0.05), batch
        better = 4 if fixed[(4, batch)] > fixed[(3, batch)] else 3
        # the fewest steps within 1% of the highest prediction; at 64 (speculation pays at no step count there) 2
        # since the round's gap is modelled
        assert r["best"]["steps"] == (2 if batch == 64 else better), batch
