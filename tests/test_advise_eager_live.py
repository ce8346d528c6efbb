"""advise on a live timing log of an eager run (SGLang ``--disable-cuda-graph``; the log's ``spec_config`` says
``cuda_graph=0`` and no ``<phase>_replay_ns`` is filled): the phase events span each phase's wall time on the
stream, the host's kernel launches included, not its kernels' GPU time. On the real eager log the kernels are busy
2-8% of verify's span (nsys on the same run, ``*.eager_spans.json``), yet advise said "verify dominates the cycle
(63.1%)" and named a faster target forward. The rules that test a phase's GPU time (``verify_dominated``,
``draft_extend``) now stand aside ("not applicable", the span and its share as ``<phase>_span_*`` figures, an nsys
profile named for the GPU time); ``draft_steps`` names the step count in their place, verify's share worded as a
span. A graph-mode log (replays timed, or an older one without replay columns: cuda_graph=1) keeps the rules."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze import findings as F
from analyze.render.advice import text_lines
from analyze.run import api
from analyze.tools.advise import model as A
from helpers import shared_loads
from nvtx_annotate import protocol as P
from nvtx_annotate.live.log import LogWriter
from test_live_input import timed_rows

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
EAGER = REAL / "sglang_live_h100_v2_l16_s3_eager.live"
EAGER_SPANS = REAL / "sglang_live_h100_v2_l16_s3_eager.eager_spans.json"
GRAPHS = REAL / "sglang_live_h200_v2_l64_s3_gated.live"       # graph mode, replays timed
OLD_GRAPHS = REAL / "sglang_live_h100_e2_on"                   # graph mode, written before replays were logged


def check(adv, rule):
    return next(c for c in adv.checks if c.rule == rule)


# ------------------------------------------------------------------------------------------- synthetic
STEPS = 3


def values(n=40, seed=0):
    """n cycles of 1.05 ms host time and 0.05 ms gap (period 1.1 ms; the last one's its host time): draft 180 us,
    verify 700 us (64% of the period), draft_extend 150 us (14%), all-reduce 20 us inside verify."""
    rng = np.random.default_rng(seed)
    out, t = [], 1_000_000_000
    for _ in range(n):
        out.append({"start": t, "end": t + 1_050_000, "draft": 180_000 + int(rng.integers(0, 2_000)),
                    "verify": 700_000 + int(rng.integers(0, 2_000)), "allreduce": 20_000,
                    "draft_extend": 150_000 + int(rng.integers(0, 2_000)),
                    "accepted": int(rng.integers(0, STEPS + 1)), "requests": 1})
        t += 1_100_000
    return out


def write(directory, vals, *, cuda_graph: bool, replays: bool):
    """The shim's rows of ``vals`` (its timer on stub events) written by its log writer with a spec_config of
    ``cuda_graph``; ``replays``: each phase's CUDA-graph replay time filled (90% of the phase), as the
    CUDAGraph.replay hook fills it in graph mode; else null, as in eager mode."""
    w = LogWriter(str(directory), 0, 100, spec_config=P.SpecConfig("EAGLE", STEPS, 1, STEPS + 1, 1, cuda_graph, 8),
                  row_group_rows=16)
    for r in timed_rows(vals, 0, 100, STEPS):
        if replays:
            r.update({f"{p}_replay_ns": int(0.9 * r[f"{p}_ns"]) for p in ("draft", "verify", "draft_extend")})
        w.add(r)
    w.close()
    return directory


@pytest.fixture()
def logs(tmp_path):
    vals = values()
    return vals, {"eager": write(tmp_path / "eager", vals, cuda_graph=False, replays=False),
                  "graphs": write(tmp_path / "graphs", vals, cuda_graph=True, replays=True),
                  "old_graphs": write(tmp_path / "old", vals, cuda_graph=True, replays=False)}


def test_eager_rows_stand_the_gpu_time_rules_aside_graph_rows_keep_them(logs):
    vals, d = logs
    steady = vals[1:]                                   # every process's first cycle is warm-up
    verify = np.mean([v["verify"] for v in steady])
    de = np.mean([v["draft_extend"] for v in steady])
    periods = [b["start"] - a["start"] for a, b in zip(steady, steady[1:])] + [steady[-1]["end"] - steady[-1]["start"]]
    period = np.mean(periods)                           # 38 of 1.1 ms, the last cycle its 1.05 ms host time
    assert period == pytest.approx((38 * 1_100_000 + 1_050_000) / 39)
    a = {k: api.load(str(p)) for k, p in d.items()}
    assert [A.eager_live(a[k]) for k in ("eager", "graphs", "old_graphs")] == [True, False, False]
    adv = {k: A.advise(x, message_sizes=False) for k, x in a.items()}

    # eager: the same rows, yet verify_dominated and draft_extend are not applicable, their figures spans
    v = check(adv["eager"], F.VERIFY_DOMINATED)
    assert v.status == F.NOT_APPLICABLE
    assert v.figures["verify_span_ns"] == pytest.approx(verify, rel=1e-9)
    assert v.figures["verify_span_share"] == pytest.approx(verify / period, rel=1e-6)
    assert v.figures["eager_spans"] is True and "verify_ns" not in v.figures and "verify_share" not in v.figures
    assert v.reason.startswith("a live log of an eager run (cuda_graph=0, no CUDA-graph replay timed): its verify "
                               "events time the phase's wall span on the stream, the host's kernel launches included")
    assert f"{100 * verify / period:.1f}% of the cycle" in v.reason and "nsys profile" in v.reason
    e = check(adv["eager"], F.DRAFT_EXTEND)
    assert e.status == F.NOT_APPLICABLE and e.figures["draft_extend_span_ns"] == pytest.approx(de, rel=1e-9)
    assert "its draft_extend events time the phase's wall span" in e.reason
    assert not {f.rule for f in adv["eager"].findings} & {F.VERIFY_DOMINATED, F.DRAFT_EXTEND}
    # with verify_dominated aside, draft_steps no longer defers to it
    s = check(adv["eager"], F.DRAFT_STEPS)
    assert not (s.status == F.NOT_APPLICABLE and "verify_dominated" in s.reason), s

    # graph mode (replays timed, or a log from before the replay columns): the rules fire on the same figures
    for k in ("graphs", "old_graphs"):
        g = check(adv[k], F.VERIFY_DOMINATED)
        assert g.status == F.TRIGGERED, k
        assert g.figures["verify_ns"] == pytest.approx(verify, rel=1e-9)
        assert g.figures["verify_share"] == pytest.approx(verify / period, rel=1e-6)
        assert "eager_spans" not in g.figures and "verify_span_ns" not in g.figures
        assert check(adv[k], F.DRAFT_EXTEND).status == F.TRIGGERED
        assert next(f for f in adv[k].findings if f.rule == F.VERIFY_DOMINATED).title == \
            f"verify dominates the cycle ({100 * verify / period:.1f}%)"
        s = check(adv[k], F.DRAFT_STEPS)
        assert s.status == F.NOT_APPLICABLE and "the verify_dominated finding names the step count" in s.reason


def test_an_eager_configuration_with_replays_timed_is_not_taken_for_eager(tmp_path):
    """Both are needed: cuda_graph=0 in the spec_config and no replay time in the steady cycles."""
    vals = values(seed=3)
    a = api.load(str(write(tmp_path / "x", vals, cuda_graph=False, replays=True)))
    assert not A.eager_live(a)
    assert check(A.advise(a, whatif=False, message_sizes=False), F.VERIFY_DOMINATED).status == F.TRIGGERED


# ------------------------------------------------------------------------------------------- real
need = pytest.mark.skipif(not (EAGER.is_dir() and EAGER_SPANS.exists()), reason="the real eager log is absent")


@need
def test_advise_on_the_real_eager_log_states_no_span_as_gpu_time():
    """The real eager log (V = 2, 16 layers, 3 steps, H100, one cycle in 41 timed): verify's event span is
    16,308 us a cycle, 63.1% of the 25.8 ms cycle of batch 1 (whatif's), while nsys had its 241 kernels busy
    2-8% of the span on the same run. advise no longer says "verify dominates": the rule is not applicable with
    the span's figures, draft_extend's too (3,138 us, 12.1%), and draft_steps names whatif's 2 steps (+3.3%)."""
    a = shared_loads.api_load(str(EAGER))
    assert A.eager_live(a)
    adv = A.advise(a, message_sizes=False)
    v = check(adv, F.VERIFY_DOMINATED)
    assert v.status == F.NOT_APPLICABLE
    assert v.figures["verify_span_ns"] == pytest.approx(16_308.0e3, rel=1e-4)
    assert v.figures["verify_span_share"] == pytest.approx(0.6312, abs=1e-4)
    assert v.figures["cycle_ns"] == pytest.approx(25_835.1e3, rel=1e-4) and v.figures["calibrated_cycle"] is False
    assert "(verify's span: 16,308.0 us, 63.1% of the cycle)" in v.reason
    # nsys on the same run: verify's kernels busy a small part of what the events span
    spans = pd.DataFrame(json.loads(EAGER_SPANS.read_text())["spans"])
    busy = spans.loc[spans["phase"] == "verify", "busy_us"].mean() * 1e3
    assert v.figures["verify_span_ns"] > 10 * busy
    e = check(adv, F.DRAFT_EXTEND)
    assert e.status == F.NOT_APPLICABLE
    assert e.figures["draft_extend_span_ns"] == pytest.approx(3_138.5e3, rel=1e-4)
    assert e.figures["draft_extend_span_share"] == pytest.approx(0.1215, abs=1e-4)
    assert [f.rule for f in adv.findings] == [F.DRAFT_STEPS]
    s = adv.findings[0]
    assert s.evidence["profiled_steps"] == 3 and s.evidence["best_steps"] == 2 and s.evidence["eager_spans"] is True
    assert s.evidence["verify_span_share"] == pytest.approx(v.figures["verify_span_share"], rel=1e-12)
    assert s.title == "draft steps: 2 instead of 3 (+3.3% tokens/s predicted)"
    assert "Verify's event span (an eager run: its wall time, the host's launches included, not its GPU time) is " \
           "63.1% of the cycle" in s.suggestion
    text = " ".join(" ".join(text_lines(adv.to_dict())).split())
    assert "verify dominates the cycle" not in text and "Verify takes" not in text
    assert "verify_dominated (not applicable: a live log of an eager run" in text


@pytest.mark.skipif(not (GRAPHS.is_dir() and OLD_GRAPHS.is_dir()), reason="the real graph-mode logs are absent")
def test_real_graph_mode_logs_are_not_eager():
    """The gated H200 log (replays timed) and the engine log written before the replay columns (cuda_graph=1):
    verify_dominated fires on them as before."""
    for path in (GRAPHS, OLD_GRAPHS):
        a = shared_loads.api_load(str(path))
        assert not A.eager_live(a), path
        c = check(A.advise(a, whatif=False, message_sizes=False), F.VERIFY_DOMINATED)
        assert c.status in (F.TRIGGERED, F.BELOW_THRESHOLD) and "verify_share" in c.figures, path
