"""whatif's round model (analyze/tools/whatif/rounds.py): the tail of a round of requests started
together, against exact small cases, a Monte Carlo simulation, synthetic cycle tables with known rounds
and the real grid profile (H200, batch 64: 57 cycles at the full batch, 22 while it drained)."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.tools.whatif import rounds as R
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_v2_l64_s3_b4.sqlite"


@pytest.fixture(scope="module")
def grid_side():
    """The grid profile as whatif sees it (1.4M ops), analysed once per test process."""
    if not PROFILE.exists():
        pytest.skip("real SGLang grid profile not unpacked")
    return shared_loads.load_side(PROFILE)


def test_tokens_pmf_from_the_survival():
    # P(L >= 1) = 0.5, P(L >= 2) = 0.25 at 2 steps: min(L, 2) = 0, 1, 2 with 0.5, 0.25, 0.25
    p = R.tokens_pmf(np.array([0.5, 0.25]))
    assert p.tolist() == [0.0, 0.5, 0.25, 0.25]
    # no acceptance: one token every cycle
    assert R.tokens_pmf(np.array([0.0, 0.0])).tolist() == [0.0, 1.0, 0.0, 0.0]


def test_finish_cdf_is_exact_for_a_fixed_yield():
    pmf = np.array([0.0, 0.0, 1.0])           # 2 tokens every cycle: 10 tokens at cycle 5, not before
    cdf = R.finish_cdf(pmf, 10)
    assert cdf[4] == 0.0 and cdf[5] == 1.0
    assert R.expected_max_cycles(pmf, 10, 64) == pytest.approx(5.0)
    # overshoot: 3 tokens a cycle to 10 tokens takes 4 cycles (12 tokens, 2 cut)
    assert R.expected_max_cycles(np.array([0.0, 0.0, 0.0, 1.0]), 10, 1) == pytest.approx(4.0)


def test_finish_cdf_is_kept_by_its_inputs_and_a_caller_cannot_change_what_is_kept():
    """whatif asks for one (pmf, tokens) several times (a round's cycles and its efficiency, per batch size): the second
    ask returns what the first computed, a copy each time; another pmf or token count is another entry."""
    pmf = R.tokens_pmf(0.5 ** np.arange(1, 4))
    first = R.finish_cdf(pmf, 64)
    first[:] = -1.0                                            # the caller's copy, not the kept one
    again = R.finish_cdf(pmf.copy(), 64)
    assert again[0] == 0.0 and again[-1] == 1.0 and np.all(np.diff(again) >= 0)
    assert np.array_equal(again, R._finish_cdf(pmf, 64))
    assert len(R.finish_cdf(pmf, 65)) == 66
    other = R.tokens_pmf(0.9 ** np.arange(1, 4))
    assert not np.array_equal(R.finish_cdf(other, 64), again)


def test_the_kept_finish_distributions_stay_within_their_bytes(monkeypatch):
    """The bootstrap asks a new pmf each resample: what is kept stays under the cap, the oldest going first."""
    monkeypatch.setattr(R, "_FINISH", {})
    monkeypatch.setattr(R, "_FINISH_HELD", [0])
    monkeypatch.setattr(R, "_FINISH_KEEP_BYTES", 100_000)
    for i in range(40):
        R.finish_cdf(R.tokens_pmf(np.array([0.3 + 0.01 * i, 0.1])), 2048)     # 16 KiB each
    assert 0 < R._FINISH_HELD[0] <= 100_000 and R._FINISH_HELD[0] == sum(v.nbytes for v in R._FINISH.values())
    assert len(R._FINISH) == 100_000 // (2049 * 8)
    assert (R.tokens_pmf(np.array([0.69, 0.1])).tobytes(), 2048) in R._FINISH       # the newest kept


def test_expected_max_matches_a_simulation():
    rng = np.random.default_rng(1)
    k, n, b, p = 3, 128, 64, 0.5
    pmf = R.tokens_pmf(p ** np.arange(1, k + 1))
    draws = rng.choice(len(pmf), p=pmf, size=(2000, b, n))
    t = (np.cumsum(draws, axis=2) < n).sum(axis=2) + 1        # the cycle each request reaches n
    assert R.expected_max_cycles(pmf, n, b) == pytest.approx(t.max(axis=1).mean(), rel=0.01)
    assert R.expected_max_cycles(pmf, n, 1) == pytest.approx(t[:, 0].mean(), rel=0.01)


def test_long_requests_give_a_proper_distribution():
    """A round of 8,192-token requests at 10 steps, low acceptance (the slowest case: the most cycles):
    the windowed computation still gives a distribution function (no wall-clock bound here: a timed
    assertion fails on a loaded 2-core runner; the speed is the benchmarks' business)."""
    pmf = R.tokens_pmf(0.2 ** np.arange(1, 11))
    cdf = R.finish_cdf(pmf, 8192)
    assert cdf[-1] == 1.0 and np.all(np.diff(cdf) >= 0)
    # a request of 8,192 tokens at ~1.25 tokens a cycle finishes after about 6,550 cycles
    assert int(np.searchsorted(cdf, 0.5)) == pytest.approx(8192 / float(np.dot(np.arange(len(pmf)), pmf)), rel=0.02)


def test_efficiency_falls_with_steps_and_batch():
    eff = {(k, b): R.efficiency(0.5 ** np.arange(1, k + 1), n, b) for k in (1, 3, 6) for b, n in ((1, 1024), (64, 128))}
    assert eff[(1, 1)] > 0.99 and eff[(6, 1)] > 0.99             # one long request: the overshoot only
    assert eff[(1, 64)] > eff[(3, 64)] > eff[(6, 64)]             # more steps: more variance, a longer tail
    assert eff[(3, 64)] == pytest.approx(0.855, abs=0.01)
    assert R.efficiency(np.zeros(3), 128, 64) == 1.0              # nothing accepted: all finish together
    assert R.efficiency(np.array([]), 128, 64) == 1.0             # no speculation


def _cycles(requests, tokens_each=2):
    requests = list(requests)
    return pd.DataFrame({"rank": 0, "cycle": range(len(requests)), "start_ns": np.arange(len(requests)) * 1000,
                         "requests": requests, "tokens": [r * tokens_each for r in requests]})


def test_lockstep_rounds_are_found_and_a_busy_server_has_none():
    one = [0] + [8] * 10 + [7, 5, 2, 1] + [0] + [8] * 6 + [8, 3] + [0]
    r = R.lockstep_rounds(_cycles(one), 8)
    assert r["full_cycles"].tolist() == [10, 7] and r["tail_cycles"].tolist() == [4, 1]
    assert r["request_tokens"].tolist() == [(80 + 15) * 2 / 8, (56 + 3) * 2 / 8]
    info = R.request_tokens(_cycles(one), 8)
    assert info["rounds"] == 2 and info["full_cycles"] == 17 and info["request_tokens"] == [24, 15]
    # cut by the data: a round in progress at the start, or still draining at the end
    assert R.lockstep_rounds(_cycles([8] * 10 + [7, 5, 0]), 8).empty
    assert R.lockstep_rounds(_cycles([0] + [8] * 10 + [7, 5]), 8).empty
    # the drain of a larger round passing through 8 is no round of 8
    assert R.lockstep_rounds(_cycles([0] + [16] * 10 + [8] * 6 + [4, 0]), 8).empty
    # a batch that climbed (requests arriving one by one) before it drained: no round either
    assert R.lockstep_rounds(_cycles([0, 2, 5] + [8] * 10 + [4, 0]), 8).empty
    # continuous batching: the batch refills (never drains in one run), or too few cycles at the top
    assert R.lockstep_rounds(_cycles([8] * 10 + [7, 8] * 5 + [8] * 3), 8).empty
    assert R.lockstep_rounds(_cycles([8] * 10 + [7, 6, 3, 8, 8]), 8).empty
    assert R.lockstep_rounds(_cycles([8] * 3 + [4, 2]), 8).empty
    assert R.request_tokens(_cycles(one), None) is None
    assert R.request_tokens(_cycles(one), 16) is None


def test_a_lost_cycle_keeps_its_place_in_the_round():
    """Cycles are taken in host order (the cycle range's start): a cycle whose GPU data was lost (no GPU
    start) stays where it ran instead of going to the end and cutting its round in two."""
    one = [0] + [8] * 10 + [7, 5, 2, 1] + [0]
    c = _cycles(one).assign(cpu_start_ns=lambda f: f["start_ns"] - 10)
    c["start_ns"] = c["start_ns"].astype("Int64")
    c.loc[4, "start_ns"] = pd.NA                                  # lost mid-round
    r = R.lockstep_rounds(c, 8)
    assert r["full_cycles"].tolist() == [10] and r["tail_cycles"].tolist() == [4]
    # by GPU start alone the lost cycle would sort last and leave the round a cycle (and its tokens) short
    assert R.lockstep_rounds(c.drop(columns="cpu_start_ns"), 8)["full_cycles"].tolist() == [9]


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang grid profile not unpacked")
def test_the_real_batch_64_round(grid_side):
    """The 3-step profile's batch-64 rounds (the recipe's warm-up of 64 tokens a request, then the measured
    round of 128): found, and the model's expected length of each within 5% of the measured one."""
    r = R.lockstep_rounds(grid_side.cycles, 64)
    assert r["request_tokens"].to_numpy() == pytest.approx([64, 128], rel=0.05)
    pmf = R.tokens_pmf(0.5 ** np.arange(1, 4))                    # V = 2: a draft token accepted w.p. 1/2
    for n, full, tail in zip((64, 128), r["full_cycles"], r["tail_cycles"]):
        assert R.expected_max_cycles(pmf, n, 64) == pytest.approx(full + tail, rel=0.05)


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang grid profile not unpacked")
def test_request_tokens_on_the_command_line(tmp_path, capsys):
    """auto: the profile's rounds (JSON ``rounds``, an assumption line); steady: none, and every step count
    predicts more tokens/s (no tail); N: rounds of N tokens; 0 or text: a usage error (one line, exit 10)."""
    import json

    from analyze import cli
    from analyze.errors import UsageError

    def run(value):
        out = tmp_path / f"w_{value}.json"
        assert cli.main(["whatif", str(PROFILE), "--batch", "64", "--steps", "1..4", "--boot", "0", "-q",
                         "--request-tokens", value, "--json", str(out)]) == 0
        return json.loads(out.read_text())

    auto, steady, given = run("auto"), run("steady"), run("256")
    assert auto["rounds"]["request_tokens"] == [64, 128] and steady["rounds"] is None
    assert given["rounds"] == {"request_tokens": [256], "source": "given"}
    assert any("lockstep round" in a for a in auto["assumptions"])
    tps = {name: [p["tokens_per_s"] for p in r["predictions"]] for name, r in
           (("auto", auto), ("steady", steady), ("given", given))}
    assert all(s > g > a for s, g, a in zip(tps["steady"], tps["given"], tps["auto"]))   # longer rounds: less tail
    capsys.readouterr()
    for bad in ("0", "many"):
        assert cli.main(["whatif", str(PROFILE), "--request-tokens", bad]) == UsageError.exit_code
        err = capsys.readouterr().err.strip()
        assert "--request-tokens" in err and "\n" not in err


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang grid profile not unpacked")
def test_advise_weighs_the_tokens_per_s_of_the_rounds_asked_for(tmp_path, capsys):
    """advise --request-tokens as whatif's: auto takes the profile's rounds and says so in the evidence of
    the rules citing whatif; steady predicts more tokens/s at the profiled steps; a bad value: exit 10."""
    import json

    from analyze import cli
    from analyze.errors import UsageError

    def run(value):
        out = tmp_path / f"a_{value}.json"
        assert cli.main(["advise", str(PROFILE), "--batch", "64", "-q", "--request-tokens", value,
                         "--json", str(out)]) == 0
        return json.loads(out.read_text())

    auto, steady = run("auto"), run("steady")
    assert auto["whatif"]["rounds"]["request_tokens"] == [64, 128] and steady["whatif"]["rounds"] is None
    assert steady["whatif"]["tokens_per_s_profiled"] > auto["whatif"]["tokens_per_s_profiled"] * 1.05
    ev = [f["evidence"] for f in auto["findings"] if "tokens_per_s_of" in f["evidence"]]
    assert ev and all(e["tokens_per_s_of"] == "rounds" and e["round_request_tokens"] == [64, 128] for e in ev)
    ev = [f["evidence"] for f in steady["findings"] if "tokens_per_s_of" in f["evidence"]]
    assert ev and all(e["tokens_per_s_of"] == "steady state" for e in ev)
    capsys.readouterr()
    assert cli.main(["advise", str(PROFILE), "--request-tokens", "0"]) == UsageError.exit_code
    assert "--request-tokens" in capsys.readouterr().err


def test_verify_grows_with_the_tokens_over_a_profiles_batch_sizes():
    """model.batch_token_fit: verify less its attention, per batch size, as a line in M (k + 1) tokens:
    known slope, attention left out (it follows the context), a falling line refused, too few cycles
    or one batch size: no fit; apply_batch_fit keeps the measured verify at the batch's own tokens."""
    from analyze.tools.whatif import model as W

    rows = []
    for batch, cycles_n, ctx_attention in ((1, 30, 900.0), (4, 30, 2500.0), (16, 25, 400.0), (64, 5, 1.0)):
        for i in range(cycles_n):
            rest = 1000.0 + 2.0 * batch * 4 + (i % 3 - 1)         # 2 ns a verified token (k = 3: 4 a request)
            rows.append({"requests": batch, "verify_ns": rest + ctx_attention, "verify_attention_ns": ctx_attention})
    fit = W.batch_token_fit(pd.DataFrame(rows), steps=3)
    assert fit["per_token_ns"] == pytest.approx(2.0, rel=1e-3) and not fit["refused"]
    assert [p["batch"] for p in fit["points"]] == [1, 4, 16]      # batch 64: 5 cycles, below the minimum
    c = W.apply_batch_fit({"verify_ns": 5000.0, "verified_tokens": 64.0, "token_fit": None}, fit)
    line = c["token_fit"]["verify"]
    assert line["intercept_ns"] + line["per_token_ns"] * 64 == pytest.approx(5000.0) and line["source"] == "batches"
    falling = pd.DataFrame(rows).assign(verify_ns=lambda d: d["verify_attention_ns"] + 5000 - 3 * d["requests"])
    assert W.batch_token_fit(falling, steps=3)["per_token_ns"] == 0.0
    assert W.batch_token_fit(pd.DataFrame(rows[:30]), steps=3) is None                     # one batch size
    assert W.batch_token_fit(pd.DataFrame(rows).drop(columns="verify_attention_ns"), steps=3) is None


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang grid profile not unpacked")
def test_the_batch_fit_reads_the_columns_it_needs_only(grid_side):
    """model.batch_fit_samples (three columns, nothing read from the draft kernels or ranges) gives the fit
    that the full per-cycle samples give; one batch size in the cycles: None, before any op is read."""
    from analyze.tools import sides
    from analyze.tools.whatif import model as W

    side = grid_side
    narrow, full = W.batch_fit_samples(side), W.profile_samples(side)[0]
    assert list(narrow.columns) == ["cycle", "requests", "verify_ns", "verify_attention_ns"]
    assert W.batch_token_fit(narrow, 3) == W.batch_token_fit(full, 3)
    assert W.batch_token_fit(narrow, 3)["per_token_ns"] == pytest.approx(1890, rel=0.01)
    one = side.cycles[pd.to_numeric(side.cycles["requests"], errors="coerce") == 16]
    assert W.batch_fit_samples(sides.Side(side.label, one, side.kernels, side.phase_names, side.ranges, None,
                                          spec_config=side.spec_config)) is None


def test_the_batch_fit_counts_the_batch_sizes_of_the_rank_with_accept_marks(grid_side):
    """profile_samples takes the requests of the lowest rank with accept marks; the narrow samples count
    batch sizes on that rank too: rank 0 without marks, a marked copy as rank 1, the same fit."""
    import dataclasses

    from analyze.tools.whatif import model as W

    c = grid_side.cycles
    unmarked = c.assign(accepted_tokens=pd.NA, requests=pd.NA, tokens=pd.NA)
    two = pd.concat([unmarked, c.assign(rank=1)], ignore_index=True)
    side = dataclasses.replace(grid_side, cycles=two, gpu_ops=grid_side.gpu_ops.assign(rank=1))
    want = W.batch_token_fit(W.profile_samples(side)[0], 3)
    assert want is not None and W.batch_token_fit(W.batch_fit_samples(side), 3) == want
