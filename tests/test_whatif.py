"""whatif and the acceptance model: analytic answers on hand-made inputs and synthetic traces; the
real H200 step sweep when its recordings are present."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import acceptance as A
from analyze import whatif as W
from analyze.diff import Side

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
    assert W.parse_steps("1..10") == list(range(1, 11))
    assert W.parse_steps("2,3,5") == [2, 3, 5]
    assert W.parse_steps("1-3,6") == [1, 2, 3, 6]
    with pytest.raises(ValueError):
        W.parse_steps("0..3")


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
        c = run.cycles
        assert p.loc[k, "cycle_ns"] == pytest.approx(c["period_ns"].mean(), abs=1.0), k
        if k <= 3:
            measured = c["tokens"].astype(float).sum() * 1e9 / c["period_ns"].sum()
            assert p.loc[k, "tokens_per_s"] == pytest.approx(measured, rel=1e-9), k
    a3 = 16 / 28
    for s in (4, 5, 6):
        tok = 1 + 2.0 + sum(0.4 * a3 ** j for j in range(1, s - 2))
        assert p.loc[s, "tokens_per_cycle"] == pytest.approx(tok)
        assert p.loc[s, "extrapolated"]
    # the per-step cost is the GPU period of draft_step ranges (eager: launch bound)
    step = synth_runs[4].cycles["period_ns"].mean() - synth_runs[3].cycles["period_ns"].mean()
    assert prof["draft_step_ns"] == pytest.approx(step)
    best = p["tokens_per_s"].idxmax()
    assert r["best"]["steps"] == best
    assert r["best"]["baseline_source"] == "estimated"
    assert any("ESTIMATED" in a for a in r["assumptions"])
    lo, hi = p["tokens_per_s_lo"], p["tokens_per_s_hi"]
    assert ((lo <= p["tokens_per_s"] + 1e-6) & (p["tokens_per_s"] <= hi + 1e-6)).all()


def test_synthetic_several_profiles(synth_runs):
    r = W.whatif([synth_runs[1], synth_runs[4]], range(1, 6), n_boot=0)
    p = r["predictions"].set_index("steps")
    for k, run in synth_runs.items():
        assert p.loc[k, "cycle_ns"] == pytest.approx(run.cycles["period_ns"].mean(), abs=1.0)


def test_steps_from_kernel_repetition(tmp_path):
    """CUDA graphs traced per node: no draft_step ranges; the draft kernels repeat once per step."""
    from fixtures.synth import write_trace

    paths, _ = write_trace(_spec(3, cycles=8, accept_lengths=[[1] * 8], cuda_graph_mode="node"), tmp_path)
    side = W.as_side(analyze.load(paths))
    assert W.draft_step_table(side).empty
    assert W.infer_steps(side) == (3, "repetitions of the draft kernel sequence per cycle")
    assert W._primitive_repeats(list("xABCABCABCy")) == (3, 3)
    assert W._primitive_repeats(list("ABCDE"))[1] == 1


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
    from analyze.outputs import write_json

    src = tmp_path / "k3.json"
    write_json(synth_runs[3], src)
    out, png = tmp_path / "w.json", tmp_path / "w.png"
    # a saved JSON result has no ranges: the step count is given
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", "whatif", str(src), "--profiled-steps", "3",
                           "--steps", "1..6", "--json", str(out), "--plot", str(png), "--boot", "20"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120
    assert "Assumptions" in proc.stdout and "extrapolated" in proc.stdout
    data = json.loads(out.read_text())
    assert [row["steps"] for row in data["predictions"]] == [1, 2, 3, 4, 5, 6]
    assert data["best"]["steps"] in range(1, 7)
    assert png.stat().st_size > 10_000
    # without --profiled-steps the JSON input is refused with one line
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", "whatif", str(src)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode != 0 and "--profiled-steps" in proc.stderr


# ----------------------------------------------------------------------------------- real H200 sweep
REAL_STEPS = [REAL / f"h200_steps{k}.sqlite" for k in range(1, 7)]
MEASURED = sorted(REAL.glob("h200_*measured*.json")) + sorted(REAL.glob("h200_sweep*.json"))
need_real = pytest.mark.skipif(not (REAL / "h200_steps3.sqlite").exists() or not MEASURED,
                               reason="real H200 step sweep (fixtures/real/h200_steps{K}.sqlite + measured JSON) "
                                      "not recorded yet")


@need_real
def test_real_sweep_predicted_from_three_steps():
    measured, base_tps = W.read_measured(MEASURED[0])
    nospec = REAL / "h200_nospec.sqlite"
    r = W.whatif(analyze.load(REAL / "h200_steps3.sqlite"), range(1, 7), profiled_steps=3,
                 baseline=analyze.load(nospec) if nospec.exists() else None, measured=measured)
    p = r["predictions"].set_index("steps")
    for k, tps in measured.items():
        if k in p.index:
            assert abs(p.loc[k, "tokens_per_s"] / tps - 1) <= 0.10, (k, p.loc[k, "tokens_per_s"], tps)
    assert r["best"]["steps"] == max(measured, key=measured.get)


def test_read_measured(tmp_path):
    """The workload's --out-json (rank 0's runs) and a plain {steps: tokens/s} mapping."""
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"schema": 1, "ranks": [{"runs": [
        {"mode": "nospec", "steps": None, "tokens_per_s": 100.0},
        {"mode": "spec", "steps": 2, "tokens_per_s": 150.0}, {"mode": "spec", "steps": 3, "tokens_per_s": 140.0}]}]}))
    assert W.read_measured(p) == ({2: 150.0, 3: 140.0}, 100.0)
    p.write_text(json.dumps({"1": 120.5, "2": 130.0, "nospec": 90}))
    assert W.read_measured(p) == ({1: 120.5, 2: 130.0}, 90.0)
