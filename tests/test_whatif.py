"""whatif and the acceptance model: analytic answers on hand-made inputs and synthetic traces; the
real H200 step sweep when its recordings are present."""
from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.timeline.cycles import steady
from analyze.tools import sides
from analyze.tools.sides import Side
from analyze.tools.whatif import acceptance as A
from analyze.tools.whatif import command as WC
from analyze.tools.whatif import model as W
from helpers import cli_process, shared_loads

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"

# accept lengths of 40 cycles (one request each): 4 x 0, 8 x 1, 12 x 2, 16 x 3
ACCEPT = [0] * 4 + [1] * 8 + [2] * 12 + [3] * 16
ACCEPT = list(np.random.default_rng(0).permutation(ACCEPT))
RATES = np.array([36 / 40, 28 / 36, 16 / 28])        # P(L>=i | L>=i-1)


# ----------------------------------------------------------------------------------- acceptance
def samples(acc, reqs=1):
    return pd.DataFrame({"accepted": np.asarray(acc, dtype="int64"), "requests": reqs})


def test_single_request_rates_are_the_histogram():
    model = A.estimate([(3, samples(ACCEPT))], n_boot=50)
    assert np.allclose(model.rates, RATES)
    assert model.profiled_steps == 3
    # E[min(L, s)] = sum of survivals
    assert model.expected_accepted(1) == pytest.approx(0.9)
    assert model.expected_accepted(2) == pytest.approx(0.9 + 0.7)
    assert model.expected_accepted(3) == pytest.approx(0.9 + 0.7 + 0.4)
    assert model.expected_accepted(3) == pytest.approx(np.mean(ACCEPT))
    # beyond the profiled positions the last rate repeats
    a3 = 16 / 28
    assert model.expected_accepted(5) == pytest.approx(2.0 + 0.4 * a3 + 0.4 * a3 ** 2)
    tab = model.table(5)
    assert tab["observed"].tolist() == [True, True, True, False, False]
    assert (tab["rate_lo"] <= tab["rate"] + 1e-12).all() and (tab["rate"] <= tab["rate_hi"] + 1e-12).all()
    # the bootstrap is seeded
    again = A.estimate([(3, samples(ACCEPT))], n_boot=50)
    assert np.array_equal(model.rates_boot, again.rates_boot)


def test_linear_extrapolation():
    model = A.estimate([(3, samples(ACCEPT))], n_boot=0, extrapolation="linear")
    slope, icpt = np.polyfit([1, 2, 3], RATES, 1)
    a4, a5 = icpt + 4 * slope, icpt + 5 * slope
    assert model.rates_for(5)[3:] == pytest.approx([a4, a5])
    assert model.expected_accepted(5) == pytest.approx(2.0 + 0.4 * a4 + 0.4 * a4 * a5)


def test_summed_marks_are_deconvolved():
    """M=4 requests per mark: the EM estimate recovers the per-request distribution from the sums."""
    p = np.array([0.25, 0.25, 0.2, 0.3])        # min(L, 3)
    m = 4
    dist = A._conv_power(p, m)                  # exact distribution of the sum
    counts = np.round(dist * 200_000).astype(int)
    acc = np.repeat(np.arange(len(dist)), counts)
    est = A.fit_request_pmf(acc, np.full(len(acc), m), 3)
    assert est == pytest.approx(p, abs=2e-3)
    model = A.estimate([(3, samples(acc, m))], n_boot=0)
    surv = 1 - np.cumsum(p)[:-1]
    assert model.rates == pytest.approx(surv / np.r_[1, surv[:-1]], abs=5e-3)
    assert model.requests == m
    # the per-request mean is exact whatever the split
    assert model.expected_accepted(3) == pytest.approx(acc.mean() / m, rel=1e-6)


def test_profiles_pool_per_position():
    """A 1-step and a 3-step profile: position 1 pools both (at-risk weights), 2..3 only the 3-step."""
    one = [1] * 30 + [0] * 10               # rate 0.75
    model = A.estimate([(1, samples(one)), (3, samples(ACCEPT))], n_boot=0)
    assert model.rates[0] == pytest.approx((30 + 36) / (40 + 40))
    assert model.rates[1:] == pytest.approx(RATES[1:])


def test_per_request_lengths_are_used_exactly():
    """Marks with lens=: the per-request histogram (capped at k) is used as is, no deconvolution. The
    sums alone of the same cycles go through EM, and cannot tell these two requests' split apart."""
    lens = ["0,3", "3,0", "1,2", "2,1", "3,3", "0,0", "4,1", "2,2"]   # the 4 is capped at k = 3
    acc = [sum(int(x) for x in t.split(",")) for t in lens]
    s = pd.DataFrame({"accepted": acc, "requests": 2, "lens": lens})
    model = A.estimate([(3, s)], n_boot=20)
    assert model.method == "lens"
    flat = np.minimum([int(x) for t in lens for x in t.split(",")], 3)
    hist = np.bincount(flat, minlength=4) / len(flat)           # 0: 4, 1: 3, 2: 4, 3: 5 of 16
    assert hist.tolist() == [4 / 16, 3 / 16, 4 / 16, 5 / 16]
    surv = 1 - np.cumsum(hist)[:-1]
    assert model.rates == pytest.approx(surv / np.r_[1, surv[:-1]], abs=1e-12)
    assert model.expected_accepted(3) == pytest.approx(flat.mean())
    assert not any("EM" in n for n in model.notes)
    # the bootstrap resamples cycles with their lens: still exact histograms of the resampled cycles
    assert model.rates_boot.shape == (20, 3)
    # without lens (or with a malformed one) the sums are deconvolved
    em = A.estimate([(3, s.drop(columns="lens"))], n_boot=0)
    assert em.method == "em" and any("EM" in n for n in em.notes)
    bad = s.assign(lens=["0,3"] + ["1"] * 7)                     # 1 length for 2 requests
    assert A.estimate([(3, bad)], n_boot=0).method == "em"
    # a cycle of no request (SGLang's mark 'accept_len=0 reqs=0': its batch's requests had all finished) gives no
    # length and takes nothing away: the same exact histogram (a real profile's 4 such marks of 955 sent it to EM)
    empty = pd.concat([s, pd.DataFrame({"accepted": [0], "requests": [0], "lens": [None]})], ignore_index=True)
    with_empty = A.estimate([(3, empty)], n_boot=0)
    assert with_empty.method == "lens" and with_empty.rates == pytest.approx(model.rates, abs=1e-12)
    # cycles of no request only (a resample can draw just those): no exact histogram of nothing (0/0: NaN rates)
    assert A._lengths(pd.DataFrame({"accepted": [0, 0], "requests": [0, 0], "lens": [None, None]})) is None
    one = A.estimate([(3, samples(ACCEPT))], n_boot=0)
    assert one.method == "single"


def test_cycle_samples_read_accept_lengths():
    cyc = pd.DataFrame({"rank": [0, 0, 1], "cycle": [0, 1, 0], "accepted_tokens": pd.array([3, 2, 3], "Int64"),
                        "requests": pd.array([2, 2, 2], "Int64"), "accept_lengths": ["1,2", None, "1,2"]})
    got = A.cycle_samples(cyc)
    assert got["accepted"].tolist() == [3, 2] and got["requests"].tolist() == [2, 2]
    assert got["lens"].tolist() == ["1,2", None]


# ----------------------------------------------------------------------------------- cost model
def costs(steps=3, cycle=400_000.0, draft=60_000.0, verify=200_000.0, extend=20_000.0, ar=30_000.0, step=20_000.0,
          reqs=1.0):
    other = cycle - draft - verify - extend - ar
    return {"steps": steps, "cycles": 50, "requests": reqs, "cycle_ns": cycle, "draft_ns": draft, "verify_ns": verify,
            "draft_extend_ns": extend, "allreduce_ns": ar, "overhead_ns": other, "draft_step_ns": step,
            "verified_tokens": reqs * (steps + 1), "phase_names": ["draft", "verify", "draft_extend", "allreduce"]}


def test_predict_one_profile_is_analytic():
    model = A.estimate([(3, samples(ACCEPT))], n_boot=0)
    p = W.predict(costs(), model, range(1, 7)).set_index("steps")
    for s in range(1, 7):
        t = 400_000 + (s - 3) * 20_000
        tok = 1 + model.expected_accepted(s)
        assert p.loc[s, "cycle_ns"] == pytest.approx(t)
        assert p.loc[s, "draft_ns"] == pytest.approx(60_000 + (s - 3) * 20_000)
        assert p.loc[s, "verify_ns"] == 200_000
        assert p.loc[s, "tokens_per_cycle"] == pytest.approx(tok)
        assert p.loc[s, "tokens_per_s"] == pytest.approx(tok * 1e9 / t)
    assert p["profiled"].tolist() == [False, False, True, False, False, False]
    assert p["extrapolated"].tolist() == [False, False, False, True, True, True]
    base = W.estimated_baseline(costs(), 1.0)
    assert base["cycle_ns"] == pytest.approx(400_000 - 60_000 - 20_000)
    assert base["tokens_per_s"] == pytest.approx(1e9 / 320_000)


def test_predict_several_profiles_fits_lines():
    """Verify grows 10 us per verified token: fitted from two profiles, exact at every step count."""
    model = A.estimate([(3, samples(ACCEPT))], n_boot=0)
    c2 = costs(steps=2, cycle=400_000 - 20_000 - 10_000, draft=40_000, verify=190_000)
    c4 = costs(steps=4, cycle=400_000 + 20_000 + 10_000, draft=80_000, verify=210_000)
    p = W.predict([c2, c4], model, range(1, 7)).set_index("steps")
    for s in range(1, 7):
        assert p.loc[s, "verify_ns"] == pytest.approx(200_000 + (s - 3) * 10_000)
        assert p.loc[s, "draft_ns"] == pytest.approx(60_000 + (s - 3) * 20_000)
        assert p.loc[s, "overhead_ns"] == pytest.approx(90_000)
        assert p.loc[s, "cycle_ns"] == pytest.approx(400_000 + (s - 3) * 30_000)
    assert p.loc[[2, 3, 4], "extrapolated"].tolist() == [False, False, False]
    assert p.loc[[1, 5], "extrapolated"].tolist() == [True, True]


def test_parse_steps():
    assert WC.parse_steps("1..10") == list(range(1, 11))
    assert WC.parse_steps("2,3,5") == [2, 3, 5]
    assert WC.parse_steps("1-3,6") == [1, 2, 3, 6]
    assert WC.parse_steps("6..1") == list(range(1, 7))      # written high to low: the same range
    with pytest.raises(ValueError):
        WC.parse_steps("0..3")


# ----------------------------------------------------------------------------------- synthetic traces
def _spec(k, **kw):
    from fixtures.synth import TraceSpec

    base = dict(ranks=1, cycles=len(ACCEPT), draft_steps=k, jitter=0, second_thread_ranges=False,
                accept_lengths=[[min(int(a), k) for a in ACCEPT]])
    base.update(kw)
    return TraceSpec(**base)


@pytest.fixture(scope="module")
def synth_runs(tmp_path_factory):
    from fixtures.synth import write_trace

    out = {}
    for k in (1, 2, 3, 4):
        paths, _ = write_trace(_spec(k), tmp_path_factory.mktemp(f"k{k}"))
        out[k] = analyze.load(paths)
    return out


def test_synthetic_whatif_is_exact(synth_runs):
    """From the 3-step trace alone: the cycle time of 1, 2, 4 steps as the generator made it, and the
    tokens/s of 1 and 2 steps exactly (their accept lengths are the 3-step ones capped)."""
    r = W.whatif(synth_runs[3], range(1, 7), n_boot=20)
    p = r["predictions"].set_index("steps")
    prof = r["profiles"][0]
    assert prof["steps"] == 3 and prof["steps_source"] == "draft_step ranges per cycle"
    for k, run in synth_runs.items():
        c = steady(run.cycles)            # the cycles whatif models: the report's steady ones
        assert p.loc[k, "cycle_ns"] == pytest.approx(c["period_ns"].mean(), abs=1.0), k
        if k <= 3:
            measured = c["tokens"].astype(float).sum() * 1e9 / c["period_ns"].sum()
            assert p.loc[k, "tokens_per_s"] == pytest.approx(measured, rel=1e-9), k
    steady_acc = np.asarray(ACCEPT[1:])        # the first cycle is warm-up (timeline.cycles.steady)
    a3 = (steady_acc >= 3).sum() / (steady_acc >= 2).sum()
    for s in (4, 5, 6):
        tok = 1 + steady_acc.mean() + sum((steady_acc >= 3).mean() * a3 ** j for j in range(1, s - 2))
        assert p.loc[s, "tokens_per_cycle"] == pytest.approx(tok)
        assert p.loc[s, "extrapolated"]
    # the per-step cost is the GPU period of draft_step ranges (eager: launch bound)
    step = steady(synth_runs[4].cycles)["period_ns"].mean() - steady(synth_runs[3].cycles)["period_ns"].mean()
    assert prof["draft_step_ns"] == pytest.approx(step)
    best = p["tokens_per_s"].idxmax()
    assert r["best"]["steps"] == best
    assert r["best"]["baseline_source"] == "estimated"
    assert any("ESTIMATED" in a for a in r["assumptions"])
    lo, hi = p["tokens_per_s_lo"], p["tokens_per_s_hi"]
    assert ((lo <= p["tokens_per_s"] + 1e-6) & (p["tokens_per_s"] <= hi + 1e-6)).all()


def test_synthetic_several_profiles(synth_runs):
    """Two runs of the generator (1 and 4 steps): each on its own clock (its cycle time as calibration), the
    cost lines through them give every run's cycle time, 2 and 3 steps included; with no figure for each
    run, the overhead is held at one run's (separate profiled runs carry their own profiler stretch) and the
    draft and verify lines alone move the cycle."""
    runs = [synth_runs[1], synth_runs[4]]
    plain = W.whatif(runs, range(1, 6), n_boot=0)
    assert plain["overhead_held"]["from"] == "baseline_profile"
    assert plain["predictions"]["overhead_ns"].max() - plain["predictions"]["overhead_ns"].min() < 1.0
    # each run's own tokens/s at the model's tokens a cycle: the calibration then gives back its cycle time
    acc = {k: plain["predictions"].set_index("steps").loc[k, "tokens_per_cycle"] for k in (1, 4)}
    tps = {k: acc[k] * 1e9 / steady(synth_runs[k].cycles)["period_ns"].mean() for k in (1, 4)}
    r = W.whatif(runs, range(1, 6), n_boot=0, calibrate_tps=tps)
    p = r["predictions"].set_index("steps")
    assert "overhead_held" not in r
    for k, run in synth_runs.items():
        assert p.loc[k, "cycle_ns"] == pytest.approx(steady(run.cycles)["period_ns"].mean(), abs=1.0), k


def test_steps_from_kernel_repetition(tmp_path):
    """CUDA graphs traced per node: no draft_step ranges; the draft kernels repeat once per step."""
    from fixtures.synth import write_trace

    paths, _ = write_trace(_spec(3, cycles=8, accept_lengths=[[1] * 8], cuda_graph_mode="node"), tmp_path)
    side = sides.as_side(analyze.load(paths))
    assert W.draft_step_table(side).empty
    assert W.infer_steps(side) == (3, "repetitions of the draft kernel sequence per cycle")
    assert W._primitive_repeats(list("xABCABCABCy")) == (3, 3)
    assert W._primitive_repeats(list("ABCDE"))[1] == 1


def test_draft_kernels_found_once_per_profile(tmp_path, monkeypatch):
    """step_costs asks for the draft kernels twice (the step count, then the per-cycle step period):
    the rank's rows are found once, and the kernel step table is the same with and without the memo
    (and equal to a plain groupby of the rank's ops)."""
    from fixtures.synth import write_trace

    paths, _ = write_trace(_spec(3, cycles=8, accept_lengths=[[1] * 8], cuda_graph_mode="node"), tmp_path)
    run = analyze.load(paths)
    side = sides.as_side(run)
    plain = W.kernel_step_table(side)
    assert len(plain) == 8 and (plain["steps"] == 3).all() and (plain["step_period_ns"] > 0).all()
    memo: dict = {}
    pd.testing.assert_frame_equal(W.kernel_step_table(side, memo=memo), plain)
    assert set(memo) == {("rows", 0), ("draft", 0)}
    ops = side.gpu_ops
    rows = W._cycle_rows(ops, 0)
    assert len(rows) and rows.tolist() == np.flatnonzero((ops["rank"] == 0) & (ops["cycle_range"] >= 0)).tolist()
    calls = []
    real = W._cycle_rows
    monkeypatch.setattr(W, "_cycle_rows", lambda o, r: calls.append(r) or real(o, r))
    costs = W.step_costs(run)
    assert calls == [0]
    assert costs["steps"] == 3 and costs["steps_source"] == "repetitions of the draft kernel sequence per cycle"
    assert costs["draft_step_ns"] == pytest.approx(plain["step_period_ns"].mean())


def test_draft_kernel_memo_keeps_each_rank_apart(tmp_path):
    """One memo asked about two ranks in turn gives each rank its own tables (what each gives
    without the memo), whichever rank is asked first."""
    from fixtures.synth import write_trace

    paths, _ = write_trace(_spec(3, ranks=2, cycles=6, accept_lengths=[[1] * 6] * 2, cuda_graph_mode="node",
                                 jitter=0.05), tmp_path)
    a = analyze.load(paths)
    # whatif reads the lowest rank's ops (sides.whatif_ops); asked about any rank, it reads that rank's
    # from whatever per-op rows it is given: here every rank's
    side = dataclasses.replace(sides.as_side(a), gpu_ops=a.gpu_ops)
    plain = {r: W.kernel_step_table(side, r) for r in (0, 1)}
    assert all(len(t) == 6 for t in plain.values())
    assert not plain[0]["step_period_ns"].equals(plain[1]["step_period_ns"])     # the ranks differ
    for order in ((0, 1), (1, 0)):
        memo: dict = {}
        for r in order + order:
            pd.testing.assert_frame_equal(W.kernel_step_table(side, r, memo=memo), plain[r])
            assert W.steps_from_kernels(side, r, memo=memo) == W.steps_from_kernels(side, r) == 3
        assert set(memo) == {("rows", 0), ("draft", 0), ("rows", 1), ("draft", 1)}


def test_measured_baseline_from_verify_ranges(synth_runs):
    """A no-speculation report has no decode cycles: the decode step is the verify ranges' period."""
    run = synth_runs[2]
    side = Side("nospec", run.cycles.iloc[0:0], run.kernels, run.phase_names, run.ranges, run.gpu_ops)
    base = W.measured_baseline(side, 1.0)
    v = run.ranges[(run.ranges["name"] == "verify") & run.ranges["outermost"].astype(bool)]
    starts = np.sort(v["start_ns"].to_numpy())
    assert base["cycle_ns"] == pytest.approx(np.diff(starts).mean())
    assert base["tokens_per_s"] == pytest.approx(1e9 / base["cycle_ns"])
    r = W.whatif(run, range(1, 4), baseline=side, n_boot=0)
    assert r["baseline"]["source"] == "measured"
    assert r["predictions"]["speedup"].iloc[0] == pytest.approx(
        r["predictions"]["tokens_per_s"].iloc[0] / base["tokens_per_s"])


def test_cli_whatif(synth_runs, tmp_path):
    from analyze.render.outputs import write_json

    src = tmp_path / "k3.json"
    write_json(synth_runs[3], src)
    out, png = tmp_path / "w.json", tmp_path / "w.png"
    # a saved JSON result has no ranges: the step count is given
    proc = cli_process.run(["whatif", str(src), "--profiled-steps", "3", "--steps", "1..6", "--json", str(out),
                            "--plot", str(png), "--boot", "20"], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120
    assert "Assumptions" in proc.stdout and "extrapolated" in proc.stdout
    data = json.loads(out.read_text())
    assert [row["steps"] for row in data["predictions"]] == [1, 2, 3, 4, 5, 6]
    assert data["best"]["steps"] in range(1, 7)
    assert png.stat().st_size > 10_000
    # without --profiled-steps the JSON input is refused with one line
    proc = cli_process.run(["whatif", str(src)], cwd=ROOT)
    assert proc.returncode != 0 and "--profiled-steps" in proc.stderr


# ----------------------------------------------------------------------------------- real H200 sweep
# spec_workload/record_sweep.sh, one device call (NVIDIA H200, nsys 2025.3): profile-trace runs of
# 60 timed + 2 warm-up cycles at K = 1..6 draft steps and no-spec (marks with lens=), and the same
# workload WITHOUT the profiler, 200 cycles per K, before (h200_sweep_unprofiled.json) and after
# (..._repeat.json) the profiled runs.
SWEEP = {k: REAL / f"h200_sweep_steps{k}.sqlite" for k in range(1, 7)}
UNPROFILED = REAL / "h200_sweep_unprofiled.json"
UNPROFILED_REPEAT = REAL / "h200_sweep_unprofiled_repeat.json"
need_sweep = pytest.mark.skipif(not all(p.exists() for p in SWEEP.values()) or not UNPROFILED.exists(),
                                reason="real H200 sweep (fixtures/real/h200_sweep_*) not present")


@pytest.fixture(scope="module")
def sweep():
    return {k: shared_loads.load(p) for k, p in SWEEP.items()}


@need_sweep
def test_real_sweep_predicted_from_three_steps(sweep):
    """Issue 7: from the 3-step profile alone, plus the user's own UNPROFILED tokens/s of that same
    configuration (--calibrate-tps, here the unprofiled sweep's K=3 entry: 25,614 tokens/s), the
    unprofiled tokens/s of every other K within 10%.

    Best: the measured best is K=2 (25,724 tokens/s) and the runner-up K=3 (25,614): 0.43% apart.
    That is below what this measurement resolves: the same K=3 measured again in the same device
    call gave 23,406 (-8.6%), K=2 vs K=3 came out +0.43%, +0.07% and +0.77% in the three unprofiled
    sweeps recorded, and the model's own 95% bootstrap interval at K=2 is about +-2% (acceptance from
    480 requests). So the pick must be one of the K within 1% of the measured best ({2, 3}); the
    model picks 3 (its K=2 is 1.1% lower, because the profile's 62 cycles accepted position 3 more
    often, 0.609, than the 0.6 of the workload's distribution: acceptance is sample noise here)."""
    measured, nospec = WC.read_measured(UNPROFILED)
    assert sorted(measured) == [1, 2, 3, 4, 5, 6]
    r = W.whatif(sweep[3], range(1, 7), calibrate_tps=measured[3], baseline_tps=nospec, measured=measured,
                 n_boot=100)
    prof = r["profiles"][0]
    assert prof["steps"] == 3 and prof["steps_source"] == "repetitions of the draft kernel sequence per cycle"
    assert prof["cycles"] == 61            # 62 cycles, the first one warm-up (timeline.cycles.steady)
    assert r["acceptance_method"] == "lens"
    p = r["predictions"].set_index("steps")
    err = {k: p.loc[k, "tokens_per_s"] / measured[k] - 1 for k in range(1, 7)}
    assert err[3] == pytest.approx(0.0, abs=1e-12)            # calibrated there by construction
    for k in (1, 2, 4, 5, 6):
        assert abs(err[k]) <= 0.10, (k, p.loc[k, "tokens_per_s"], measured[k])
    # the values at the time of recording (+6.4, -1.5, -0.4, +3.0, +6.7 %): a model change shows here
    assert [round(100 * err[k], 1) for k in (1, 2, 4, 5, 6)] == pytest.approx([6.4, -1.5, -0.4, 3.0, 6.7], abs=0.2)
    measured_best = max(measured, key=measured.get)
    assert measured_best == 2
    within_noise = {k for k, v in measured.items() if v >= 0.99 * measured[measured_best]}
    assert within_noise == {2, 3}
    assert r["best"]["steps"] in within_noise
    # the calibration removed 162.7 us of profiler overhead per steady cycle (host / GPU idle time)
    cal = r["calibration"]
    assert cal["steps"] == 3 and cal["shift_ns"] == pytest.approx(162_700, abs=500)
    assert any(a.startswith("calibrated:") for a in r["assumptions"])
    assert r["baseline"]["source"] == "given" and r["baseline"]["tokens_per_s"] == nospec
    assert p.loc[2, "speedup"] == pytest.approx(p.loc[2, "tokens_per_s"] / nospec)


@need_sweep
def test_real_sweep_other_unprofiled_measurements(sweep):
    """The same 3-step profile calibrated with the K=3 entry of the two other unprofiled sweeps (the
    repeat in the same device call, and h200_sweep_truth.json from an earlier session, whose machine
    state differed by up to 10%): every K still within 10%; the largest errors are at K=5..6, where
    the 'repeat' extrapolation of the acceptance rate (0.609 at position 3) overestimates the
    workload's declining tail (0.5, 0.33, 0)."""
    for path, worst in ((UNPROFILED_REPEAT, 9.7), (REAL / "h200_sweep_truth.json", 9.5)):
        measured, _ = WC.read_measured(path)
        r = W.whatif(sweep[3], range(1, 7), calibrate_tps=measured[3], measured=measured, n_boot=0)
        err = r["predictions"].set_index("steps")["error_pct"]
        assert err.abs().max() <= 10.0, (path.name, err.to_dict())
        assert err.abs().max() == pytest.approx(worst, abs=0.2)
        assert err.abs().idxmax() == 6


@need_sweep
def test_real_sweep_uncalibrated_is_the_profiled_timing(sweep):
    """Without --calibrate-tps the prediction is of the profiled timing: at K=3 it is the profiled
    run's own tokens/s, and the unprofiled truth is 7-20% higher at every K (nsys's overhead)."""
    measured, _ = WC.read_measured(UNPROFILED)
    r = W.whatif(sweep[3], range(1, 7), measured=measured, n_boot=0)
    p = r["predictions"].set_index("steps")
    assert p.loc[3, "tokens_per_s"] == pytest.approx(r["profiles"][0]["tokens_per_s"], rel=1e-9)
    assert (p["error_pct"] < -6.5).all() and (p["error_pct"] > -21).all()
    assert any(a.startswith("NOT calibrated") for a in r["assumptions"])


@need_sweep
def test_real_sweep_cost_model_against_profiled_runs(sweep):
    """Each component of the 3-step model against the profiled runs at the other K:
    * tokens per cycle: every run replays the same seeded acceptance draws for the same 62 cycles, so
      for K <= 3 the prediction from the 3-step lens= marks is exact; beyond, extrapolated (+1.3, +3.5,
      +6.2 % at K = 4, 5, 6);
    * GPU time (draft + verify + draft_extend): within 1% at every K. One draft step costs the GPU
      period of the repeating draft kernel block (97.1 us: kernels + the gaps between the graph's
      nodes); the draft windows of the profiled runs grow by the same per step (within 2%);
    * what the model cannot predict from one profiled run is the overhead (host time, GPU idle) of
      another PROFILED run: under nsys it varies between processes from 137 to 402 us per cycle, so
      profiled tokens/s are no ground truth (that is what --calibrate-tps addresses)."""
    r = W.whatif(sweep[3], range(1, 7), n_boot=0)
    p = r["predictions"].set_index("steps")
    step = r["profiles"][0]["draft_step_ns"]
    assert step == pytest.approx(97_100, abs=300)
    spans, overheads = {}, {}
    for k, run in sweep.items():
        c = W.step_costs(run, k)
        tok_err = p.loc[k, "tokens_per_cycle"] / c["tokens_per_cycle"] - 1
        if k <= 3:
            assert tok_err == pytest.approx(0.0, abs=1e-12), k
        else:
            assert 0 < tok_err < 0.07, (k, tok_err)
        gpu = ["draft_ns", "verify_ns", "draft_extend_ns"]
        assert sum(p.loc[k, g] for g in gpu) == pytest.approx(sum(c[g] for g in gpu), rel=0.01), k
        d = W._draft_kernels(sides.as_side(run))
        spans[k] = d.groupby("cycle_range").apply(lambda g: g["end_ns"].max() - g["start_ns"].min()).median()
        overheads[k] = c["overhead_ns"]
    slope = np.polyfit(list(spans), list(spans.values()), 1)[0]
    assert step == pytest.approx(slope, rel=0.02)
    assert max(overheads.values()) > 2.5 * min(overheads.values())


def test_old_marks_without_lens_fall_back_to_em():
    """The 10-cycle fixture recorded before lens= existed: acceptance deconvolved from the sums."""
    path = REAL / "h200_steps3.sqlite"
    if not path.exists():
        pytest.skip("fixtures/real/h200_steps3.sqlite not present")
    r = W.whatif(analyze.load(path), range(1, 4), profiled_steps=3, n_boot=0)
    assert r["acceptance_method"] == "em"
    assert any("deconvolved from the summed marks" in a for a in r["assumptions"])
    assert any("deconvolution of the sums (EM)" in n for n in r["notes"])


def test_calibration_shifts_the_overhead_only(tmp_path):
    """--calibrate-tps X: the tokens/s at the calibrated K becomes X; every cycle loses the same ns of
    overhead; GPU components are untouched."""
    model = A.estimate([(3, samples(ACCEPT))], n_boot=0)
    raw = W.predict(costs(), model, range(1, 7)).set_index("steps")
    x = 1.1 * raw.loc[3, "tokens_per_s"]                        # 10% faster than profiled
    cal = W.predict(costs(), model, range(1, 7), calibrate=(3, x)).set_index("steps")
    assert cal.loc[3, "tokens_per_s"] == pytest.approx(x)
    shift = raw.loc[3, "cycle_ns"] - raw.loc[3, "tokens_per_cycle"] * 1e9 / x
    assert W.calibration_shift(costs(), model, (3, x)) == pytest.approx(shift)
    assert (raw["cycle_ns"] - cal["cycle_ns"]).to_numpy() == pytest.approx(np.full(6, shift))
    assert (raw["overhead_ns"] - cal["overhead_ns"]).to_numpy() == pytest.approx(np.full(6, shift))
    for c in ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns", "tokens_per_cycle"):
        assert cal[c].tolist() == raw[c].tolist()
    assert WC.parse_calibration("25614.4") == (None, 25614.4)
    assert WC.parse_calibration("3:25614.4") == (3, 25614.4)
    assert WC.parse_calibration(None) == (None, None)
    for bad in ("0", "x", "0:100", "3:-1"):
        with pytest.raises(ValueError):
            WC.parse_calibration(bad)


def test_cli_calibrate(synth_runs, tmp_path):
    from analyze.render.outputs import write_json

    src = tmp_path / "k3.json"
    write_json(synth_runs[3], src)
    out = tmp_path / "w.json"
    proc = cli_process.run(["whatif", str(src), "--profiled-steps", "3", "--steps", "1..4", "--calibrate-tps", "3:1200",
                            "--baseline-tps", "900", "--boot", "0", "--json", str(out)], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Calibrated to 1,200 tokens/s (unprofiled) at 3 steps" in proc.stdout
    data = json.loads(out.read_text())
    row3 = [r for r in data["predictions"] if r["steps"] == 3][0]
    assert row3["tokens_per_s"] == pytest.approx(1200)
    assert row3["speedup"] == pytest.approx(1200 / 900)
    assert data["calibration"]["steps"] == 3 and data["baseline"]["source"] == "given"
    assert data["acceptance_method"] == "single"
    proc = cli_process.run(["whatif", str(src), "--profiled-steps", "3", "--calibrate-tps", "fast"], cwd=ROOT)
    assert proc.returncode != 0 and "--calibrate-tps" in proc.stderr


def test_read_measured(tmp_path):
    """The workload's --out-json (rank 0's runs) and a plain {steps: tokens/s} mapping."""
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"schema": 1, "ranks": [{"runs": [
        {"mode": "nospec", "steps": None, "tokens_per_s": 100.0},
        {"mode": "spec", "steps": 2, "tokens_per_s": 150.0}, {"mode": "spec", "steps": 3, "tokens_per_s": 140.0}]}]}))
    assert WC.read_measured(p) == ({2: 150.0, 3: 140.0}, 100.0)
    p.write_text(json.dumps({"1": 120.5, "2": 130.0, "nospec": 90}))
    assert WC.read_measured(p) == ({1: 120.5, 2: 130.0}, 90.0)


# --- the second real sweep: an acceptance distribution whose best step count stands out -----------

SWEEP2 = {k: REAL / f"h200_sweep2_steps{k}.sqlite" for k in range(1, 7)}
SWEEP2_MEASURED = [REAL / "h200_sweep2_unprofiled.json", REAL / "h200_sweep2_unprofiled_repeat.json"]


@pytest.mark.skipif(not all(p.exists() for p in [*SWEEP2.values(), *SWEEP2_MEASURED]),
                    reason="h200_sweep2 fixtures missing")
@pytest.mark.parametrize("measured_path", SWEEP2_MEASURED, ids=["sweep", "repeat"])
def test_real_sweep2_from_the_three_step_profile_alone(measured_path):
    """Issue 7's real check, with nothing but the 3-step profile as input (no calibration number).

    Workload on an H200, acceptance P(k) = 0.2, 0.3, 0.4, 0.05, 0.03, 0.02 (recorded by
    spec_workload/record_sweep.sh with PREFIX=h200_sweep2). Measured without the profiler (200 cycles
    per step count, two sweeps in the same session): 2 steps is best, >= 10% ahead of the runner-up in
    both sweeps, so picking it is a real test (unlike the first sweep, where 2 and 3 are 0.4% apart).
    The prediction must be within 10% of the measured tokens/s at every other step count."""
    measured, _ = WC.read_measured(measured_path)
    best = max(measured, key=measured.get)
    runner_up = max(v for k, v in measured.items() if k != best)
    assert best == 2 and measured[best] / runner_up > 1.10

    result = W.whatif(shared_loads.load(SWEEP2[3]), range(1, 7), profiled_steps=3, measured=measured)
    p = result["predictions"].set_index("steps")
    errors = {k: p.loc[k, "tokens_per_s"] / measured[k] - 1 for k in measured}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    assert result["best"]["steps"] == best
    assert result["calibration"] is None
    # acceptance read from the per-request lengths of the marks, not deconvolved from sums
    assert result["acceptance_method"] == "lens"


def test_steps_from_kernels_votes_over_the_first_cycles_by_appearance():
    """The steps per cycle are the most common repeat count of the draft kernel sequence over the
    first STEP_SAMPLE_CYCLES cycles in order of first appearance (a cycle's kernels in start order),
    ties to the count seen first: cycle ids out of order, cycles interleaved, the later cycles
    voting otherwise (they are not asked), other ranks, phases and kinds left out."""
    n_first = W.STEP_SAMPLE_CYCLES
    rows, t = [], 0
    ids = list(range(3 * n_first, 0, -1))                   # ids fall while the cycles come later
    for k, cycle in enumerate(ids):
        steps = 2 if k < n_first // 2 + 1 else (3 if k < n_first else 4)   # 26 vote 2, 24 vote 3, the rest 4
        seq = ["a", "b"] * steps + ["x"]
        for j, name in enumerate(seq):
            rows.append(("kernel", 0, cycle, W.DRAFT, name, t, t + 5))
            if j == 0 and k + 1 < len(ids):                # the next cycle starts inside this one
                rows.append(("kernel", 0, ids[k + 1], W.DRAFT, "a", t + 1, t + 2))
            t += 10
        rows.append(("kernel", 0, cycle, "verify", "v", t, t + 5))
        rows.append(("memcpy", 0, cycle, W.DRAFT, "a", t + 1, t + 2))
        rows.append(("kernel", 1, cycle, W.DRAFT, "z", t + 2, t + 3))
        t += 10
    ops = pd.DataFrame(rows, columns=["kind", "rank", "cycle_range", "phase", "name", "start_ns", "end_ns"])
    ops["kind"] = ops["kind"].astype("category")
    cycles = pd.DataFrame({"rank": [0, 1], "cycle": [0, 0], "start_ns": [0, 0]})
    side = Side("s", cycles, None, [W.DRAFT, "verify"], None, ops)
    d = W._draft_kernels(side, 0)
    reference = Counter()
    for i, (_, g) in enumerate(d.groupby("cycle_range", sort=False)):    # what it computed before
        if i >= n_first:
            break
        reference[W._primitive_repeats(g["name"].tolist())[1]] += 1
    assert reference.most_common(1)[0][0] == W.steps_from_kernels(side, 0)
    # each interleaved cycle gets one extra "a" from the next one's first kernel: 2 -> 2 repeats still
    assert W.steps_from_kernels(side, 0) == 2


def test_tokens_beyond_the_profile_only_where_a_line_was_fitted():
    """'tokens beyond the profile's' marks predictions that extrapolate a line fitted in the verified
    tokens (a varying batch); a constant batch keeps verify constant and fits nothing, so no row is
    marked (every non-profiled row was)."""
    const = W.whatif(shared_loads.load(REAL / "h200_sweep2_steps3.sqlite"), range(1, 7), n_boot=0)
    assert const["verify_scaling"]["method"] in ("cannot_tell", "constant")
    assert not const["predictions"].get("tokens_extrapolated", pd.Series(False)).any()
    fitted = W.whatif(shared_loads.load(REAL / "h200_moe_steps3.sqlite"), range(1, 11), n_boot=0)
    assert fitted["verify_scaling"]["method"] == "fit"
    marked = fitted["predictions"]["tokens_extrapolated"]
    assert marked.any() and not marked.all()


def test_no_resamples_shows_no_intervals():
    """--boot 0 (point estimates): the CI columns say '-' instead of a zero-width interval."""
    from analyze.tools.whatif.render import render_whatif

    text = render_whatif(W.whatif(shared_loads.load(REAL / "h200_sweep2_steps3.sqlite"), range(1, 4), n_boot=0))
    rows = text[text.index("Prediction"):text.index("Predicted cycle time")].splitlines()[3:]
    assert len([r for r in rows if r.strip()]) == 3 and not any("[" in r for r in rows)
    booted = render_whatif(W.whatif(shared_loads.load(REAL / "h200_sweep2_steps3.sqlite"), range(1, 4), n_boot=20))
    assert "[" in booted[booted.index("Prediction"):booted.index("Predicted cycle time")]


def test_no_resamples_no_slope_intervals_in_the_assumptions():
    moe = shared_loads.load(REAL / "h200_moe_steps3.sqlite")
    point = " ".join(W.whatif(moe, range(1, 4), n_boot=0)["assumptions"])
    booted = " ".join(W.whatif(moe, range(1, 4), n_boot=20)["assumptions"])
    assert "least-squares line" in point and "95% CI of the slope" not in point
    assert "95% CI of the slope" in booted


def _tandem_repeat_reference(seq):
    """The scan whatif used before (quadratic-cubic in the kernels per cycle): the specification."""
    n = len(seq)
    best = (0, 0, 1, 1)
    for p in range(1, n // 2 + 1):
        for i in range(0, n - 2 * p + 1):
            block = seq[i:i + p]
            r = 1
            while seq[i + r * p:i + (r + 1) * p] == block:
                r += 1
            if r >= 2 and p * r > best[0]:
                best = (p * r, i, p, r)
    return (best[1], best[2], best[3]) if best[0] * 2 >= n else (0, best[2], 1)


def test_tandem_repeat_equals_the_reference_scan_and_is_fast():
    """Issue 45: the real server fixture's draft kernels x40 per cycle took > 60 s through advise's
    whatif (the scan). The vectorised search gives the same answer on random and repeating sequences
    and takes well under a second on thousands of kernels."""
    import random
    import time

    rng = random.Random(7)
    for _ in range(2000):
        alpha = rng.randint(1, 4)
        if rng.random() < 0.5:
            blk = [rng.randrange(alpha) for _ in range(rng.randint(1, 6))]
            seq = ([rng.randrange(alpha) for _ in range(rng.randint(0, 5))] + blk * rng.randint(1, 7)
                   + [rng.randrange(alpha) for _ in range(rng.randint(0, 5))])
        else:
            seq = [rng.randrange(alpha) for _ in range(rng.randint(0, 40))]
        seq = [f"k{x}" for x in seq]
        assert W._tandem_repeat(seq) == _tandem_repeat_reference(seq), seq
    t = time.perf_counter()
    assert W._tandem_repeat([f"k{i % 37}" for i in range(37 * 40)]) == (0, 37, 40)
    W._tandem_repeat([f"k{rng.randrange(50)}" for _ in range(3000)])
    assert time.perf_counter() - t < 5.0


def test_a_cycle_with_more_steps_is_never_predicted_shorter():
    """Two profiles (or an adaptive profile's two step counts) whose overhead falls faster than their GPU
    work grows (a host-bound cycle under the profiler, or a step count run in a few cycles at another moment
    of the requests): the fitted lines alone would predict a shorter cycle at more steps (6,010 us at 1 step,
    4,270 at 3). The overhead may fall as the GPU work grows, never by more: the cycle is held flat, through
    the profiles' cycle-weighted mean, and every GPU component keeps its own line."""
    from analyze.tools.whatif.model import cost_model

    def cost(k, cycles, draft, verify, overhead):
        return {"steps": k, "cycles": cycles, "phase_names": ["draft", "verify"], "draft_ns": draft,
                "verify_ns": verify, "overhead_ns": overhead, "verified_tokens": 4.0 * (k + 1)}

    costs = [cost(1, 100, 10e3, 3_000e3, 3_000e3), cost(3, 300, 170e3, 3_100e3, 1_000e3)]
    out = cost_model(costs, range(1, 7), requests=4.0)
    assert out["cycle_ns"].diff().dropna().abs().max() < 1e-6          # flat, not falling
    mean_cycle = (100 * 6_010e3 + 300 * 4_270e3) / 400
    assert out["cycle_ns"].iloc[0] == pytest.approx(mean_cycle)
    assert out["draft_ns"].tolist() == pytest.approx([10e3 + 80e3 * (s - 1) for s in range(1, 7)])
    assert out["verify_ns"].diff().dropna().tolist() == pytest.approx([50e3] * 5)
    # where the overhead falls by less than the GPU work grows, its own line stands (the cycle grows)
    mild = [cost(1, 100, 10e3, 3_000e3, 1_100e3), cost(3, 300, 170e3, 3_100e3, 1_000e3)]
    out = cost_model(mild, range(1, 7), requests=4.0)
    assert out["overhead_ns"].diff().dropna().tolist() == pytest.approx([-50e3] * 5)
    assert (out["cycle_ns"].diff().dropna() > 0).all()


def test_the_never_shorter_rule_holds_after_negative_components_are_clipped():
    """A draft line fitted below zero at the fewest steps (two profiles at 3 and 5 steps: 150 and 370 us) is
    clipped to 0 there; the cycle is then held so that no step count is predicted shorter than a smaller one."""
    from analyze.tools.whatif.model import cost_model

    costs = [{"steps": 3, "cycles": 100, "phase_names": ["draft", "verify"], "draft_ns": 150e3, "verify_ns": 300e3,
              "overhead_ns": 400e3, "verified_tokens": 4.0},
             {"steps": 5, "cycles": 100, "phase_names": ["draft", "verify"], "draft_ns": 370e3, "verify_ns": 300e3,
              "overhead_ns": 100e3, "verified_tokens": 6.0}]
    out = cost_model(costs, range(1, 7), 1.0)
    assert out["draft_ns"].iloc[0] == 0.0                       # clipped: the line is -70 us at 1 step
    assert out["cycle_ns"].is_monotonic_increasing
    comps = out[["draft_ns", "verify_ns", "overhead_ns"]].sum(axis=1)
    assert comps.tolist() == pytest.approx(out["cycle_ns"].tolist())
