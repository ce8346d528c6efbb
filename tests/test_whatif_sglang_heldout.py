"""A configuration the model was not built on, where speculation does not pay at any batch size: real SGLang
0.5.17 EAGLE-3 on one H100 (2026-12-06, recipes/device_plan.md, tenth session), V = 3 (a draft token accepted
with probability ~1/3: SGLang's own 1.33 / 1.45 / 1.49 / 1.50 tokens a request a cycle at 1 / 2 / 3 / 4
steps), a 32-layer tiny Llama target, CUDA graphs, TP 1.

fixtures/real/sglang_sweep_h100_v3_l32.json: unprofiled tokens/s, steps 0..6 x batches 1, 4, 16, 64, one
engine a step count, all on that machine (rounds repeated until the last three agree within 3%).
sglang_h100_v3_l32_s3.sqlite: profile-trace of the 3-step engine over the sweep's round sizes, the same
machine, before the sweep. sglang_live_h100_v3_l32_s3.live: the shim's timing mode in a 3-step engine,
batches 1 and 16 (its own unprofiled tokens/s in sglang_live_h100_v3_l32_s3.sweep.json); its rows carry
the per-request accept lengths (``accept_lens``), the first real log that does.

Measured: no step count pays at any batch size (best 3 / 2 / 3 / 2 steps at 0.78x / 0.74x / 0.81x / 0.68x
of no speculation). docs/whatif.md ("A held-out configuration") shows the tables.
"""
import json
from pathlib import Path

import pytest

from analyze.tools import sides
from analyze.tools.advise.command import main_advise
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import main_whatif, read_measured
from helpers import cli_process, shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_h100_v3_l32_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v3_l32.json"
LOG = REAL / "sglang_live_h100_v3_l32_s3.live"
BATCHES = (1, 4, 16, 64)
need_profile = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="held-out fixtures not unpacked")


def truth(batch):
    """({steps: tokens/s}, no-speculation tokens/s) at ``batch``, read by whatif's own sweep reader."""
    return read_measured(SWEEP, batch)


@pytest.fixture(scope="module")
def side():
    return shared_loads.load_side(PROFILE)


def test_the_sweep_is_complete_and_speculation_never_pays():
    """A data check of the fixture: every cell 0..6 x 1, 4, 16, 64, SGLang 0.5.17; the best
    step count is slower than no speculation at every batch size (the case the issue asks for)."""
    data = json.loads(SWEEP.read_text())
    cells = {(r["steps"], b["batch"]) for r in data["runs"] for b in r["batches"]}
    assert cells == {(s, b) for s in range(7) for b in BATCHES}
    # every cell converged (last three rounds within 3%) but 3 steps at batch 16: 3.2% after the recipe's 6 rounds
    loose = {(r["steps"], b["batch"]): b["spread"] for r in data["runs"] for b in r["batches"] if not b["converged"]}
    assert list(loose) == [(3, 16)] and loose[(3, 16)] < 0.035
    assert all(b["spread"] <= 0.03 for r in data["runs"] for b in r["batches"] if b["converged"])
    assert {r["sglang"] for r in data["runs"]} == {"0.5.17"}
    for b in BATCHES:
        m, base = truth(b)
        assert max(m.values()) < 0.85 * base


@need_profile
@pytest.mark.parametrize("batch", BATCHES)
def test_calibrated_the_verdict_and_the_speedup_hold(side, batch):
    """One profile + the unprofiled tokens/s at its step count + the measured no-speculation tokens/s: the
    verdict (off) at every batch size, the speed-up within 10% of the measured best's, and every step count
    within 6%."""
    m, base = truth(batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    assert r["best"]["speedup"] < 1
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / base, rel=0.10)
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    for s in range(1, 7):
        assert p[s] == pytest.approx(m[s], rel=0.06), s


@need_profile
def test_one_step_keeps_the_host_work_around_the_draft(side):
    """At 1 step SGLang runs no draft graph (its draft_forward runs no forward, eagerly), but the unprofiled
    cycle less its GPU work stays what it is at 2 and 3 steps (batch 16: 1,072 / 1,075 / 1,036 us): the host
    work around the draft is not removed with the graph. The model keeps it in the overhead at every step
    count; it took the draft replay's host time out at 1 step until 2026-12-06, which predicted 1 step too
    fast at every batch size here (+5.3 / +1.5 / +10.8 / +3.7%). Now within 5% everywhere."""
    for b in BATCHES:
        m, base = truth(b)
        r = W.whatif(side, range(1, 7), n_boot=0, batch=b, calibrate_tps=m[3], baseline_tps=base)
        assert r["predictions"].set_index("steps")["tokens_per_s"][1] == pytest.approx(m[1], rel=0.05), b
        assert "draft_replay_ns" not in r["predictions"].columns


@need_profile
@pytest.mark.parametrize("batch", BATCHES)
def test_from_the_profile_alone_the_verdict_is_off(side, batch):
    """No unprofiled figure at all: speculation does not pay at every batch size (the estimated no-speculation
    tokens/s above every step count's), the claimed speed-up below the measured one (the profiler stretched
    this host-bound cycle by 0.9-1.4 ms: 4.5-5.4 ms profiled against 3.2-5.0 unprofiled) and within 25% of it
    (batch 16 since the round's gap is modelled: next test)."""
    m, base = truth(batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch)
    sp, want = r["best"]["speedup"], max(m.values()) / base
    assert sp < want < 1
    assert sp == pytest.approx(want, rel=0.25)


@need_profile
def test_from_the_profile_alone_batch_16_within_25_percent(side):
    """0.60x against 0.81x measured (-26%) until the round's gap was modelled (2026-12-07): the rounds of 256-token
    requests pay their gap in every speculative prediction and in the plain step alike; now within 25%."""
    m, base = truth(16)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=16)
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / base, rel=0.25)


@need_profile
def test_advise_ranks_speculation_does_not_pay(tmp_path):
    """advise on the profile alone says speculation does not pay (its rule fires on a sweep where it does not),
    at the batch size most of the profile's cycles ran."""
    out = tmp_path / "advise.json"
    assert main_advise([str(PROFILE), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    spec = [f for f in doc["findings"] if f["rule"] == "speculation"]
    assert spec and spec[0]["title"].startswith("speculation does not pay")
    # the profile ran batches 1, 4, 16 and 64: advise models the one most cycles ran (16), says so, and its
    # figures are whatif --batch 16's (they were pooled over every batch size: 18.4 requests, of no batch run)
    assert doc["whatif"]["batch"] == 16 and doc["whatif"]["batches_visited"] == 4
    assert spec[0]["evidence"]["batch"] == 16 and spec[0]["evidence"]["requests"] == 16
    assert "batch 16, the batch size most decode cycles ran of the 4" in spec[0]["suggestion"]
    assert spec[0]["evidence"]["tokens_per_s_best"] == pytest.approx(
        W.whatif(shared_loads.load_side(PROFILE), range(1, 11), n_boot=0, batch=16)["best"]["tokens_per_s"], rel=1e-6)
    # given a whole run's figure without --batch, the batch sizes stay pooled (the figure is of all of them)
    assert main_advise([str(PROFILE), "--baseline-tps", "9000", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["whatif"]["batch"] is None


pytest_live = pytest.mark.skipif(not (LOG.exists() and SWEEP.exists()), reason="held-out live log absent")


@pytest_live
def test_the_real_log_carries_one_accept_length_a_request():
    """The accept_lens column on real SGLang: one length per request, summing to the cycle's accepted tokens,
    in every cycle the shim saw the lengths (99.7%: the first cycles of an engine come before the hook)."""
    c = shared_loads.api_load(str(LOG)).cycles
    lens = c["accept_lengths"].dropna()
    assert len(lens) > 0.99 * len(c)
    parsed = lens.map(lambda s: [int(x) for x in s.split(",")])
    assert (parsed.map(len) == c.loc[lens.index, "requests"]).all()
    assert (parsed.map(sum) == c.loc[lens.index, "accepted_tokens"]).all()
    assert set(c.loc[lens.index, "requests"].unique()) >= {1, 16}


@pytest_live
@pytest.mark.parametrize("batch", (1, 16))
def test_the_log_alone_predicts_the_sweep(tmp_path, batch):
    """whatif on the live log alone (no profile, no given figure): a draft step costs the draft graph's GPU
    time a forward (its replay events), not the draft phase's span a forward (that span holds the host work
    around the replay, which does not grow with the steps: 193 us a step at batch 16 instead of 85 us before,
    -15% at 6 steps). Every step count within 10% (8% before the round's gap) of the sweep's engines (another engine than the log's,
    whose own figures are 3-7% lower), acceptance from the per-request lengths, and the best step count
    within the measured best's spread."""
    out = tmp_path / "w.json"
    assert main_whatif([str(LOG), "--batch", str(batch), "--steps", "1..6", "--boot", "0", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    m, _ = truth(batch)
    pred = {p["steps"]: p["tokens_per_s"] for p in r["predictions"]}
    for s in range(1, 7):
        # 10%: at batch 16, 5 steps 9% low since the round's gap (the log's own, unprofiled) is modelled (8% before)
        assert pred[s] == pytest.approx(m[s], rel=0.10), s
    assert m[r["best"]["steps"]] >= 0.97 * max(m.values())
    assert r["acceptance_method"] == "lens"
    # the step cost is the profile's GPU draft-step period of the same configuration (71 / 84 us at 1 / 16)
    prof = r["profiles"][0]
    assert prof["draft_step_ns"] == pytest.approx({1: 71.2e3, 16: 83.8e3}[batch], rel=0.10)
    assert "replay" in prof["draft_step_source"]


# ------------------------------------------------------------------ two profiled runs of one configuration
# sglang_h100_v3_l32_s5.sqlite: the same configuration profiled at 5 steps, batch 16 only (2026-12-06,
# recipes/device_plan.md, eleventh session), a separate profiled run on the same kind of machine. Four runs
# (2, 3, 5, 6 steps) measured 4.7 / 2.4 / 5.6 / 4.2 ms of overhead a cycle under nsys where each run's
# unprofiled tokens/s leaves 0.83 / 0.77 / 0.67 / 0.57 ms: each run carries its own profiler
# stretch, and a line through the profiled overheads predicted +550% at 1 step (3 and 5 steps, calibrated).
SECOND = REAL / "sglang_h100_v3_l32_s5.sqlite"
need_two = pytest.mark.skipif(not (PROFILE.exists() and SECOND.exists() and SWEEP.exists()),
                              reason="held-out fixtures not unpacked")


@pytest.fixture(scope="module")
def second():
    return shared_loads.load_side(SECOND)


@need_two
def test_two_runs_calibrated_each_fit_the_unprofiled_overhead(side, second):
    """Each profile calibrated with the unprofiled tokens/s at its own step count: the overhead line runs
    through unprofiled overheads and falls as the GPU work grows (a host-bound cycle hides part of a step's
    GPU work: measured, the cycle grows ~60 us a step where the GPU work grows ~80-140 us). Every step count
    1..6 within 1.5% of the sweep, the speed-up within 2%, the best within the measured best's spread."""
    m, base = truth(16)
    r = W.whatif([side, second], range(1, 7), n_boot=0, batch=16, calibrate_tps={3: m[3], 5: m[5]},
                 baseline_tps=base)
    p = r["predictions"].set_index("steps")
    for s in range(1, 7):
        assert p.loc[s, "tokens_per_s"] == pytest.approx(m[s], rel=0.015), s
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / base, rel=0.02)
    assert m[r["best"]["steps"]] >= 0.97 * max(m.values())
    over = p["overhead_ns"].to_numpy()
    assert (over[1:] < over[:-1]).all() and over[-1] > 0            # falls with the steps, stays positive
    cal = r["calibration"]
    assert [x["steps"] for x in cal["per_profile"]] == [3, 5]
    for x in cal["per_profile"]:                                    # each run's own stretch taken off
        assert 0 < x["overhead_ns"] < x["profiled_cycle_ns"] - x["shift_ns"] and x["shift_ns"] > 1e6
    assert "overhead_held" not in r


@need_two
def test_two_runs_without_a_figure_each_hold_the_overhead(side, second):
    """Without an unprofiled figure for each run the overhead is not fitted across them: it is held at the
    3-step profile's (the one the no-speculation step is estimated from) at every step count, and a note
    lists each run's. Speculation still does not pay; the 3-step prediction is the 3-step profile's own."""
    r = W.whatif([side, second], range(1, 7), n_boot=0, batch=16)
    p = r["predictions"].set_index("steps")
    assert p["overhead_ns"].max() - p["overhead_ns"].min() < 1.0          # ns: one value
    held = r["overhead_held"]
    assert held["from"] == "baseline_profile" and held["steps"] == 3
    assert set(held["profiles"]) == {3, 5} and held["profiles"][5] > 2 * held["profiles"][3]
    assert p.loc[3, "overhead_ns"] == pytest.approx(held["profiles"][3])
    assert any("ran separately" in n for n in r["notes"])
    assert r["best"]["speedup"] < 1
    one = W.whatif(side, range(1, 7), n_boot=0, batch=16)
    assert r["best"]["speedup"] == pytest.approx(one["best"]["speedup"], rel=0.03)


@need_two
def test_the_command_takes_one_figure_a_profiled_step_count(tmp_path):
    """--calibrate-tps K:X once for each profile; a figure missing for one step count, or one without K,
    is one usage line (exit 10, docs/bad_input.md)."""
    m, base = truth(16)
    out = tmp_path / "w.json"
    args = [str(PROFILE), str(SECOND), "--batch", "16", "--steps", "1..6", "--boot", "0"]
    assert main_whatif(args + ["--calibrate-tps", f"3:{m[3]}", "--calibrate-tps", f"5:{m[5]}",
                               "--baseline-tps", str(base), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [x["steps"] for x in doc["calibration"]["per_profile"]] == [3, 5]
    pred = {p["steps"]: p["tokens_per_s"] for p in doc["predictions"]}
    assert pred[6] == pytest.approx(m[6], rel=0.015)
    for bad in (["--calibrate-tps", f"3:{m[3]}", "--calibrate-tps", f"4:{m[4]}"],
                ["--calibrate-tps", f"3:{m[3]}", "--calibrate-tps", str(m[5])]):
        proc = cli_process.run(["whatif", *args, *bad], cwd=Path(__file__).resolve().parents[1])
        assert proc.returncode == 10 and proc.stderr.count("\n") == 1 and "--calibrate-tps" in proc.stderr, proc.stderr


def test_parts_of_one_run_are_not_separate_runs():
    """The step-count parts split_by_steps cuts from one report (an adaptive run) carry that report as their
    run although their labels differ: their overheads share one profiler stretch and are fitted across, not
    held; two reports are two runs; live logs are never (no profiler)."""
    base = {"cycles": 100, "overhead_ns": 1e6, "cycle_ns": 3e6}
    one = [dict(base, steps=3, label="a.sqlite [3 steps]", run="a.sqlite"),
           dict(base, steps=5, label="a.sqlite [5 steps]", run="a.sqlite")]
    two = [dict(base, steps=3, label="a.sqlite", run="a.sqlite"), dict(base, steps=5, label="b.sqlite", run="b.sqlite")]
    live = [dict(c, live=True) for c in two]
    assert not W.separate_runs(one) and W.separate_runs(two) and not W.separate_runs(live)
    assert not W.separate_runs([two[0], dict(two[1], steps=3)])       # one step count: nothing is fitted


@need_profile
def test_split_parts_keep_their_run(side):
    """split_by_steps labels each part by its step count and keeps the report as the parts' run."""
    marked = side.cycles.assign(steps=[3 if i % 2 else 5 for i in range(len(side.cycles))])
    cut = sides.split_by_steps(sides.Side(side.label, marked, side.kernels, side.phase_names, side.ranges,
                                          side.gpu_ops, [], side.spec_config))
    assert len(cut) == 2 and {p.run for p in cut} == {side.label} and len({p.label for p in cut}) == 2


@need_two
def test_loaded_analyses_are_separate_runs_and_each_calibration_is_exact():
    """Two loaded analyses (no label: each its own run) hold the overhead as two paths do; calibrated each,
    the bootstrap recalibrates every resample on each run's clock, so the interval at each calibrated step
    count has zero width (the figure is taken as exact, as with one calibration)."""
    a, b = shared_loads.api_load(str(PROFILE)), shared_loads.api_load(str(SECOND))
    assert W.whatif([a, b], range(1, 7), n_boot=0, batch=16)["overhead_held"]["from"] == "baseline_profile"
    m, _ = truth(16)
    r = W.whatif([a, b], range(1, 7), n_boot=20, batch=16, calibrate_tps={3: m[3], 5: m[5]})
    p = r["predictions"].set_index("steps")
    for k in (3, 5):
        assert p.loc[k, "tokens_per_s_lo"] == pytest.approx(m[k], rel=1e-3)
        assert p.loc[k, "tokens_per_s_hi"] == pytest.approx(m[k], rel=1e-3)
    assert p.loc[1, "tokens_per_s_hi"] > p.loc[1, "tokens_per_s_lo"]       # elsewhere an interval


@need_two
def test_one_run_calibrated_puts_the_baseline_run_on_that_clock(side, second):
    """One figure for the 5-step run only: the overhead is held at its calibrated value and the no-speculation
    step, estimated from the 3-step run, is put on that clock through the model's cycle at 3 steps (not by the
    5-step run's own profiled/unprofiled ratio, which is another run's stretch)."""
    m, _ = truth(16)
    r = W.whatif([side, second], range(1, 7), n_boot=0, batch=16, calibrate_tps=m[5], calibrate_steps=5)
    three = W.whatif([side, second], range(1, 7), n_boot=0, batch=16, calibrate_tps=m[3], calibrate_steps=3)
    assert r["overhead_held"]["from"] == "calibrated"
    # the plain step's host time scaled by (the model's 3-step cycle on the calibrated clock) / (the 3-step run's
    # profiled cycle): the two calibrations differ by the ratio of their predicted 3-step cycles
    cyc = {k: x["predictions"].set_index("steps").loc[3, "cycle_ns"] for k, x in ((5, r), (3, three))}
    assert r["baseline"]["host_ns"] / three["baseline"]["host_ns"] == pytest.approx(cyc[5] / cyc[3], rel=1e-9)
    assert cyc[5] != pytest.approx(cyc[3], rel=0.01)          # (the two clocks do differ here)
    # +7.6% since the round's gap is modelled (within 6% before): the bar (10%) still met
    assert r["best"]["speedup"] == pytest.approx(max(m.values()) / truth(16)[1], rel=0.10)


@need_two
def test_per_batch_over_two_runs_models_each_batch_from_the_runs_that_ran_it(side, second):
    """--per-batch over the 3-step profile (batches 1, 4, 16, 64) and the 5-step one (16 only): each batch size
    from the profiles that hold it (it stopped with 'no decode cycle of batch 4' in the 5-step profile): 16 from
    both, the others from the 3-step one alone, each as whatif --batch B gives it."""
    from analyze.tools.whatif.per_batch import per_batch

    t = per_batch([side, second], range(1, 7), n_boot=0).set_index("batch")
    assert {1, 4, 16, 64} <= set(t.index)
    both = W.whatif([side, second], range(1, 7), n_boot=0, batch=16)
    assert t.loc[16, "tokens_per_s_best"] == pytest.approx(both["best"]["tokens_per_s"], rel=1e-9)
    one = W.whatif(side, range(1, 7), n_boot=0, batch=4)
    assert t.loc[4, "tokens_per_s_best"] == pytest.approx(one["best"]["tokens_per_s"], rel=1e-9)


@need_two
def test_per_batch_refuses_one_figure_for_two_profiled_step_counts(tmp_path):
    """--batch-tps 16=X over a 3- and a 5-step profile of batch 16: one figure cannot calibrate two runs; one
    usage line (exit 10) naming the way that can (whatif --batch with --calibrate-tps K:X each)."""
    proc = cli_process.run(["whatif", str(PROFILE), str(SECOND), "--per-batch", "--batch-tps", "16=7164", "--boot",
                            "0"], cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 10 and proc.stderr.count("\n") == 1
    assert "[3, 5]" in proc.stderr and "--calibrate-tps K:X" in proc.stderr


@need_profile
def test_a_directory_of_separate_runs_is_refused_with_the_arguments_to_give(tmp_path):
    """whatif takes no --allow-mixed (separate runs are separate profiles): a directory of two runs is refused in one
    line that names the files to give as arguments, not the report command's --allow-mixed (a newcomer followed it
    into 'unrecognized arguments')."""
    s5 = REAL / "sglang_h100_v3_l32_s5.sqlite"
    if not s5.exists():
        pytest.skip("sglang_h100_v3_l32_s5.sqlite not unpacked")
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "s3.sqlite").symlink_to(PROFILE)
    (runs / "s5.sqlite").symlink_to(s5)
    proc = cli_process.run(["whatif", str(runs), "--batch", "16", "-q"])
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 11 and len(err) == 1 and "--allow-mixed" not in err[0]
    assert "sessions that never ran at the same time" in err[0]
    assert err[0].endswith("a directory is read as one run; give each run as its own argument (its report, or a "
                           "directory of its ranks' reports)")
    assert main_whatif([str(runs / "s3.sqlite"), str(runs / "s5.sqlite"), "--batch", "16", "--boot", "0", "-q"]) == 0
