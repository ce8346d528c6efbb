"""The decode figures per batch size (views/decode.decode_per_batch): where the load visited several batch sizes
the breakdown and the headline pool them (a newcomer read "5,369 tokens/s" of a profile that ran 1, 4, 16 and
64 requests as a server's rate); the report adds a table per visited batch size and the headline says it pools.

Known answers on a hand-made cycle table; on a real SGLang 0.5.17 profile of four batch sizes, each row equals
what whatif --batch M reads as its profiled cycle (its cycles, tokens per cycle and tokens/s), and the batch sizes
are the ones whatif and advise call visited (one rule: timeline.cycles.visited_of)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.render import html, text
from analyze.timeline import cycles as cycles_mod
from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif import per_batch as PB
from analyze.views import decode
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
FOUR = REAL / "sglang_h100_v3_l32_s3.sqlite"          # batches 1, 4, 16, 64 (plus their ramps)
PHASES = ["draft", "verify", "draft_extend", "allreduce", "prefill"]


def table(batches: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """One rank; per (requests, cycles, period ns, accepted tokens a cycle) that many cycles in a row, the period
    all verify but 100 ns idle; cycle 0 is the rank's first (warm-up)."""
    rows, k, start = [], 0, 0
    for req, n, period, acc in batches:
        for _ in range(n):
            rows.append(dict(rank=0, cycle=k, start_ns=start, end_ns=start + period - 100, period_draft_ns=0,
                             period_verify_ns=period - 100, period_draft_extend_ns=0, period_allreduce_ns=0,
                             period_prefill_ns=0, period_other_ns=0, period_idle_ns=100, period_ns=period,
                             accepted_tokens=acc, requests=req, tokens=acc + req))
            k, start = k + 1, start + period
    return pd.DataFrame(rows)


def test_known_answers_two_batch_sizes_and_a_ramp():
    # 1 request: 40 cycles of 1,000 ns, 1 accepted a cycle (the first is warm-up: 39 steady); a ramp of 3 cycles at
    # 2 requests (under 20 cycles: not visited); 4 requests: 60 cycles of 2,000 ns, 2 accepted a cycle
    c = table([(1, 40, 1_000, 1), (2, 3, 1_500, 1), (4, 60, 2_000, 2)])
    c_gpu = c.drop(columns="period_ns")          # no host period: the GPU period (the split's sum), the same here
    assert decode.decode_per_batch(c_gpu, PHASES).equals(decode.decode_per_batch(c, PHASES))
    pb = decode.decode_per_batch(c, PHASES)
    assert list(pb.columns) == decode.PER_BATCH_COLUMNS
    assert pb["batch"].tolist() == [1, 4] and pb["cycles"].tolist() == [39, 60]
    one, four = pb.iloc[0], pb.iloc[1]
    assert one["period_mean_ns"] == 1_000 and one["tokens_per_cycle"] == 2 and one["accepted_per_request"] == 1
    assert one["tokens_per_s"] == pytest.approx(2 / 1e-6)              # 2 tokens a microsecond
    assert four["period_median_ns"] == 2_000 and four["tokens_per_cycle"] == 6
    assert four["accepted_per_request"] == pytest.approx(0.5) and four["tokens_per_s"] == pytest.approx(6 / 2e-6)
    # the headline says the figures pool the two
    bd, sm = decode.decode_breakdown(c, PHASES), decode.decode_summary(c, pd.DataFrame({"rank": [0], "outside_cycles_busy_ns": [0]}), PHASES)
    head = decode.headline(bd, sm, batches=pb["batch"].tolist())
    assert "(pooled over the 2 batch sizes the load visited, 1 and 4 requests: each below)" in head
    assert "pooled" not in decode.headline(bd, sm)


def test_one_visited_batch_size_gives_no_rows():
    c = table([(8, 50, 1_000, 3), (7, 4, 1_000, 3)])       # a round of 8 and its tail
    assert decode.decode_per_batch(c, PHASES).empty
    assert cycles_mod.visited_of(cycles_mod.batch_counts(c)).index.tolist() == [8]


def test_the_visited_rule_is_one_for_the_report_whatif_and_advise():
    """whatif's per_batch module counts and picks through timeline.cycles (the same functions, the same figures)."""
    assert PB.visited_of is cycles_mod.visited_of and PB.VISITED_SHARE == cycles_mod.VISITED_SHARE
    assert W.MIN_CYCLES == cycles_mod.MIN_CYCLES == PB.MIN_CYCLES


need = pytest.mark.skipif(not FOUR.exists(), reason="real SGLang fixture not unpacked")


@pytest.fixture(scope="module")
def four():
    return shared_loads.api_load(str(FOUR))


@need
def test_real_profile_of_four_batch_sizes_each_row_is_whatifs_profiled_cycle(four):
    from analyze import views

    pb = views.get(four, "decode_per_batch")
    assert pb["batch"].tolist() == [1, 4, 16, 64]
    assert pb["batch"].tolist() == PB.visited_batches([four]).index.tolist()
    side = sides.as_side(four)
    for r in pb.itertuples():
        prof = W.whatif(side, range(1, 4), n_boot=0, batch=r.batch)["profiles"][0]
        assert r.cycles == prof["cycles"]
        assert r.tokens_per_cycle == pytest.approx(prof["tokens_per_cycle"], rel=1e-12)
        assert r.period_mean_ns == pytest.approx(prof["cycle_ns"], rel=1e-12)     # the host's start to next start
        assert r.tokens_per_s == pytest.approx(prof["tokens_per_s"], rel=1e-12)
    # the values of this profile (SGLang's own acceptance ~1/3 a position, V = 3): 331 / 1,277 / 5,016 / 17,657
    assert [round(v) for v in pb["tokens_per_s"]] == [331, 1277, 5016, 17657]
    assert np.allclose(pb["accepted_per_request"], [0.492, 0.476, 0.476, 0.478], atol=5e-4)


@need
def test_real_profile_report_text_html_and_json_show_it(four, tmp_path):
    lines = text.render(four, width=120).splitlines()
    head = next(i for i, ln in enumerate(lines) if "tokens/s" in ln)
    block = " ".join(lines[head:head + 4])
    assert "(pooled over the 4 batch sizes the load visited, 1, 4, 16 and 64 requests: each below)" in block
    title = next(i for i, ln in enumerate(lines) if ln.startswith("Per batch size"))
    assert lines[title + 1].split() == ["batch", "cycles", "period", "us", "median", "us", "tokens", "/", "cycle",
                                        "accepted", "/", "request", "tokens", "/", "s"]
    assert lines[title + 5].split()[:2] == ["16", "838"] and lines[title + 5].split()[-1] == "5,016"
    # under the breakdown, before the whole trace's tables
    assert title < next(i for i, ln in enumerate(lines) if ln.startswith("Whole trace"))
    page = html.render_html(four)
    assert 'id="t-decode-per-batch"' in page and "<td>17,657</td>" in page
    out = tmp_path / "r.json"
    from analyze.render import outputs

    outputs.write_json(four, str(out))
    rows = json.loads(out.read_text())["decode_per_batch"]
    assert [r["batch"] for r in rows] == [1, 4, 16, 64] and rows[2]["cycles"] == 838


def test_a_cycle_without_its_period_or_tokens_counts_in_neither_sum():
    """A steady cycle whose period is null (a hand-made or damaged table) leaves that batch size's row its figures
    over the other cycles, not NaN everywhere (the review's synthetic case)."""
    c = table([(1, 40, 1_000, 1), (4, 60, 2_000, 2)])
    c["period_ns"] = c["period_ns"].astype("float64")
    c.loc[50, "period_ns"] = np.nan
    pb = decode.decode_per_batch(c, PHASES).set_index("batch")
    assert pb.loc[4, "cycles"] == 60 and pb.loc[4, "period_mean_ns"] == 2_000
    assert pb.loc[4, "tokens_per_s"] == pytest.approx(6 / 2e-6) and pb.loc[4, "tokens_per_cycle"] == 6
    lines = text.per_batch_lines(type("A", (), {"ranks": pd.DataFrame({"rank": [0]}), "view_cache": {},
                                                "cycles": c, "phase_names": PHASES})(), 120)
    assert "nan" not in " ".join(lines)
