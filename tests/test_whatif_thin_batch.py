"""A batch size the profile barely ran: its acceptance from every steady cycle (issue 40).

Two real H100 profiles of batch-16 rounds hold only their rounds' drains at batch 1: 2 steady cycles of one request
(V = 3, 32 layers, 5 steps: sglang_h100_v3_l32_s5.sqlite) and 13 (V = 2, 128 layers, 3 steps:
sglang_h100_v2_l128_s3.sqlite). Asked about batch 1, whatif took the acceptance of those cycles alone: position
rates 0.5 then 0 from the 2 cycles (1.50 tokens a request a cycle at every step count where SGLang's own were
1.33 / 1.45 / 1.50 / 1.50 at 1 / 2 / 3 / 4 steps), so calibrated at 5 steps it said +13.8% at 1 step; the 128-layer
one +10.4% at 6. A request's accept length is its own, not its batch's: with fewer than MIN_ACCEPT_REQUESTS accept
lengths of its own a batch takes the whole profile's (costs still from its own cycles), said in a note."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def real(name):
    path = REAL / name
    if not path.exists():
        pytest.skip(f"{name} not unpacked")
    return path


@pytest.mark.parametrize("profile, sweep, k, worst_before, worst_now", [
    ("sglang_h100_v3_l32_s5", "sglang_sweep_h100_v3_l32", 5, 0.138, 0.035),
    ("sglang_h100_v2_l128_s3", "sglang_sweep_h100_v2_l128", 3, 0.104, 0.04),
])
def test_a_batch_seen_only_in_a_drain_takes_the_profiles_acceptance(profile, sweep, k, worst_before, worst_now):
    side = shared_loads.load_side(real(f"{profile}.sqlite"))
    measured, base = read_measured(real(f"{sweep}.json"), 1)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=1, calibrate_tps=measured[k], baseline_tps=base)
    p = r["predictions"].set_index("steps")["tokens_per_s"]
    errs = {s: p[s] / v - 1 for s, v in measured.items() if 1 <= s <= 6}
    assert max(abs(e) for e in errs.values()) <= worst_now < worst_before, errs
    notes = [n for n in r["notes"] if "accept length(s)" in n]
    assert len(notes) == 1 and "acceptance from every steady cycle" in notes[0]
    # the batch asked is the batch modelled (the pool's mean batch is ~15 requests)
    assert r["predictions"]["tokens_per_cycle"].iloc[0] < 2.0
    # the same profile's batch 16 has thousands of its own: untouched, no note
    r16 = W.whatif(side, range(1, 7), n_boot=0, batch=16)
    assert not [n for n in r16["notes"] if "accept length(s)" in n]


def test_v3_five_step_profile_at_batch_one_has_the_acceptance_of_the_three_step_one():
    """The 5-step profile's pooled rates at positions 1..3 against the 3-step profile's own batch-1 rates (773
    accept lengths): ~1/3 each (V = 3), not 0.5 then 0."""
    s5 = shared_loads.load_side(real("sglang_h100_v3_l32_s5.sqlite"))
    s3 = shared_loads.load_side(real("sglang_h100_v3_l32_s3.sqlite"))
    a5 = W.whatif(s5, range(1, 7), n_boot=0, batch=1)["acceptance"].set_index("position")["rate"]
    a3 = W.whatif(s3, range(1, 7), n_boot=0, batch=1)["acceptance"].set_index("position")["rate"]
    assert a5[1] == pytest.approx(a3[1], abs=0.03) and a5[1] == pytest.approx(1 / 3, abs=0.03)
    assert a5[2] == pytest.approx(1 / 3, abs=0.05) and a5[3] == pytest.approx(1 / 3, abs=0.08)


def synthetic(n16: int, n1: int, len1: int) -> pd.DataFrame:
    """Samples as profile_samples gives them: n16 cycles of 16 requests (every request accepting 1 of 2),
    n1 cycles of one request accepting ``len1``."""
    rows = []
    for i in range(n16):
        lens = [1 if (i + j) % 2 else 0 for j in range(16)]
        rows.append(dict(accepted=sum(lens), requests=16, lens=",".join(map(str, lens))))
    rows += [dict(accepted=len1, requests=1, lens=str(len1)) for _ in range(n1)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n1, pooled", [(2, True), (99, True), (100, False), (300, False)])
def test_the_rule_counts_accept_lengths_not_cycles(monkeypatch, n1, pooled):
    every = synthetic(40, n1, 2)
    own = every[every["requests"] == 1].reset_index(drop=True)
    monkeypatch.setattr(W, "profile_samples", lambda *a, **k: (every, {}))
    side = type("S", (), {"label": "t"})()
    got = W.pooled_acceptance(side, own, 1, False, {})
    assert (got is not None) == pooled
    if pooled:
        assert got[0] is every and f"batch 1's own {n1} cycle(s) give {n1} accept length(s)" in got[1]
        assert f"({640 + n1} accept lengths" in got[1]


def test_no_batch_asked_or_nothing_more_in_the_pool_keeps_the_own_samples(monkeypatch):
    own = synthetic(0, 5, 1)
    monkeypatch.setattr(W, "profile_samples", lambda *a, **k: (own, {}))
    side = type("S", (), {"label": "t"})()
    assert W.pooled_acceptance(side, own, None, False, {}) is None
    assert W.pooled_acceptance(side, own, 1, False, {}) is None     # the whole profile has no more
    assert W.accept_requests(own) == 5
    nan = own.assign(accepted=[np.nan, 1, 1, 1, 1])
    assert W.accept_requests(nan) == 4
