"""whatif says how verify's GPU time moved with the requests' context over the profile
(analyze/tools/whatif/context.py): a model fitted on one profile holds for its context lengths."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.tools.whatif import context as CTX
from analyze.tools.whatif import model as W
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
L64_S3 = REAL / "sglang_v2_l64_s3.sqlite"


def samples(n, requests, accepted, verify):
    return pd.DataFrame({"cycle": np.arange(n), "requests": requests, "accepted": accepted, "verify_ns": verify})


def test_known_slope_within_segments():
    """Two segments (batch 2 then 4), each cycle 1 accepted token per request + the bonus: 2 tokens per
    request per cycle; verify = 1000 + 5 ns per token of context, restarting when the batch changes."""
    n1, n2 = 30, 20
    pos = np.r_[np.arange(n1) * 2.0, np.arange(n2) * 2.0]
    s = samples(n1 + n2, np.r_[np.full(n1, 2), np.full(n2, 4)], np.r_[np.full(n1, 2), np.full(n2, 4)],
                1000 + 5 * pos + np.r_[np.zeros(n1), np.full(n2, 300)])     # a batch-4 offset: not a slope
    seg, got = CTX.context_positions(s)
    assert seg.tolist() == [0] * n1 + [1] * n2
    assert got.tolist() == pos.tolist()
    t = CTX.context_trend(s)
    assert t["slope_ns_per_token"] == pytest.approx(5.0)
    assert t["span_tokens"] == pytest.approx((n1 * 58 + n2 * 38) / (n1 + n2))
    assert t["change"] == pytest.approx(5.0 * t["span_tokens"] / s["verify_ns"].mean())
    assert t["cycles"] == 50


def test_flat_verify_says_nothing_and_too_few_cycles_no_trend():
    s = samples(40, 1, 1, np.full(40, 2000.0))
    t = CTX.context_trend(s)
    assert t["slope_ns_per_token"] == pytest.approx(0.0) and CTX.trend_text(t) is None
    assert CTX.context_trend(s.iloc[:CTX.MIN_CYCLES - 1]) is None


@pytest.mark.skipif(not L64_S3.exists(), reason="real SGLang fixture not unpacked")
def test_real_sglang_verify_grows_with_context():
    """SGLang 0.5.17, 64-layer target, batch 1: verify's GPU time grew 3.87 us a generated token (the
    round: 3.0 -> 4.75 ms over ~580 tokens; a left-out cycle starts a segment, so a cycle's segment spans
    458 tokens on average: 45%); whatif's assumptions say so."""
    side = shared_loads.load_side(L64_S3)
    c = W.step_costs(side, batch=1)
    t = c["context_trend"]
    assert t["slope_ns_per_token"] == pytest.approx(3868, rel=0.02)
    assert t["span_tokens"] == pytest.approx(458, abs=2)
    assert t["change"] == pytest.approx(0.45, abs=0.02)
    r = W.whatif(side, range(1, 4), n_boot=0, batch=1)
    line = [a for a in r["assumptions"] if a.startswith("context:")]
    assert len(line) == 1 and "grew 45%" in line[0]


def test_requests_one_after_another_at_one_batch_size_are_segments():
    """Four requests of 100 cycles at batch 1, one after another, the long cycle around each prefill left
    out (a gap in the cycle numbers): verify = 1000 + 3 ns a token of context restarts with each request;
    one sawtooth segment would give a far smaller slope."""
    rows = []
    for r in range(4):
        for i in range(100):
            rows.append((r * 101 + i, 1000 + 3 * 2 * i))     # 2 tokens a cycle (1 accepted + bonus)
    cyc, verify = map(np.asarray, zip(*rows))
    s = pd.DataFrame({"cycle": cyc, "requests": 1, "accepted": 1, "verify_ns": verify.astype(float)})
    t = CTX.context_trend(s)
    assert t["slope_ns_per_token"] == pytest.approx(3.0)
    assert t["span_tokens"] == pytest.approx(198.0)
