"""whatif held to REAL SGLang 0.5.17 on the H200: unprofiled tokens/s swept over step counts
(recipes/sglang_sweep.sh) beside profiles of the same configurations (recipes/sglang_profiles.sh).

fixtures/real/sglang_sweep_v2_l{8,64}.json: EAGLE-3, vocabulary 2 (a draft token accepted with
probability ~1/2), a tiny Llama target of 8 or 64 layers, CUDA graphs, TP 1, temperature 1; per step
count (0 = no speculation) and batch size the median tokens/s of the last three rounds and their
spread. sglang_v2_l{L}_s{S}.sqlite: profile-trace of the same engine at S steps, batch 1 then 16.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyze.tools import sides
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads
from nvtx_annotate import protocol as P

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = {(layers, s): REAL / f"sglang_v2_l{layers}_s{s}.sqlite" for layers in (8, 64) for s in (1, 3)}
SWEEP = {layers: REAL / f"sglang_sweep_v2_l{layers}.json" for layers in (8, 64)}
need = pytest.mark.skipif(not all(p.exists() for p in [*PROFILE.values(), *SWEEP.values()]),
                          reason="real SGLang sweep fixtures not unpacked")


def truth(layers, batch):
    """{steps: (tokens/s, spread)} and the no-speculation tokens/s of the unprofiled sweep."""
    data = json.loads(SWEEP[layers].read_text())
    out, base = {}, None
    for run in data["runs"]:
        for b in run["batches"]:
            if b["batch"] == batch:
                if run["steps"] == 0:
                    base = b["tokens_per_s"]
                else:
                    out[run["steps"]] = (b["tokens_per_s"], b["spread"])
    return out, base


@pytest.fixture(scope="module")
def side():
    """The profile of (layers, steps), analysed once per test process (tests/helpers/shared_loads.py)."""
    return lambda layers, s: shared_loads.load_side(PROFILE[(layers, s)])


@need
@pytest.mark.parametrize("layers, s", [(8, 1), (8, 3), (64, 1), (64, 3)])
def test_profiled_step_count_is_sglangs_flag(side, layers, s):
    """The shim's spec_config mark holds SGLang's own --speculative-num-steps; whatif takes it (before:
    the draft forwards, one fewer: 3 -> 2)."""
    sd = side(layers, s)
    assert sd.spec_config == P.SpecConfig(algo="EAGLE3", steps=s, topk=1, draft_tokens=s + 1, tp=1, cuda_graph=True,
                                          max_running=16, adaptive=False, overlap=True)
    assert W.infer_steps(sd) == (s, "SGLang's --speculative-num-steps (the spec_config mark)")
    c = W.step_costs(sd, batch=1)
    assert c["steps"] == s and c["sglang_loop"] and c["draft_forwards"] == s - 1


@need
def test_a_tree_profile_says_the_model_is_a_chains(side):
    """A profile SGLang ran with top-k > 1 (a draft tree verifying --speculative-num-draft-tokens a request)
    is modelled as a chain: whatif says so, with the flags; a top-k 1 profile carries no such note."""
    import dataclasses

    sd = side(64, 3)
    chain = W.whatif(sd, range(1, 5), n_boot=0, batch=1)
    assert not any("eagle-topk" in n for n in chain["notes"])
    tree = dataclasses.replace(sd, spec_config=sd.spec_config._replace(topk=4, draft_tokens=8))
    out = W.whatif(tree, range(1, 5), n_boot=0, batch=1)
    said = [n for n in out["notes"] if "--speculative-eagle-topk 4" in n]
    assert len(said) == 1 and "8 draft tokens verified a request, not steps + 1 = 4" in said[0]
    # the cycle model is the chain's; only the estimated plain step differs (a tree's draft attention is
    # not one query a request: attention.py does not swap it in, and says so)
    cols = ["steps", "cycle_ns", "tokens_per_cycle", "tokens_per_s"]
    pd.testing.assert_frame_equal(out["predictions"][cols], chain["predictions"][cols])
    assert any("draft top-k 4" in a for a in out["assumptions"])


@need
def test_a_profile_of_an_adaptive_server_says_its_step_switches_are_not_recorded(side):
    """A profile whose spec_config mark says SGLang ran --speculative-adaptive: its cycles ran step counts
    the nsys profile does not record; whatif says it models them at the start value (a note), a fixed-steps
    profile says nothing of it."""
    import dataclasses

    sd = side(64, 3)
    fixed = W.whatif(sd, range(1, 5), n_boot=0, batch=1)
    assert not any("--speculative-adaptive" in n for n in fixed["notes"])
    adaptive = dataclasses.replace(sd, spec_config=sd.spec_config._replace(adaptive=True))
    said = [n for n in W.whatif(adaptive, range(1, 5), n_boot=0, batch=1)["notes"] if "--speculative-adaptive" in n]
    assert len(said) == 1 and "modelled at the start value (3 steps)" in said[0]


@need
def test_a_profile_whose_cycles_carry_marked_step_counts_is_fitted_across_them(side):
    """An adaptive server's profile with the shim's spec_steps marks (its cycle table's ``steps``): whatif cuts
    it into one side per step count (as several profiles) and says nothing of unrecorded switches; the
    profile's own tokens/s are no measured truth (the profiled clock). Simulated on the real 3-step profile:
    its batch-1 cycles marked 3, its batch-16 cycles marked 1 (any split works: each part is modelled at its
    count)."""
    import dataclasses

    from analyze.tools import sides as S
    from analyze.tools.whatif.command import live_sides

    sd = side(64, 3)
    req = pd.to_numeric(sd.cycles["requests"], errors="coerce")
    marked = sd.cycles.assign(steps=pd.array([3 if r == 1 else 1 if r == 16 else pd.NA for r in req], dtype="Int64"))
    adaptive = dataclasses.replace(sd, cycles=marked, spec_config=sd.spec_config._replace(adaptive=True))
    assert S.marked_steps(adaptive) is not None and S.marked_steps(sd) is None
    parts, measured, untimed, few = live_sides([adaptive], None)
    assert [p.spec_config.steps for p in parts] == [1, 3] and measured == {} and untimed == few == []
    assert all(not p.live for p in parts)
    out = W.whatif(parts, range(1, 5), n_boot=0)
    assert not any("--speculative-adaptive" in n for n in out["notes"])
    assert set(out["predictions"]["steps"]) == {1, 2, 3, 4}
    # parts of one profiled run share its profiler stretch: their overhead is fitted across them, not held
    assert {p.run for p in parts} == {sd.label} and "overhead_held" not in out
    assert not any("ran separately" in n for n in out["notes"])


@need
def test_a_step_count_run_in_a_few_cycles_is_left_out_of_the_fit(side):
    """An adaptive profile whose batch-16 cycles ran 3 steps but for a handful at 1 (around a switch: on real
    SGLang 16 of 663 cycles, at one moment of the requests' context): those few would set the cost lines'
    slope alone; left out where another step count ran MIN_CYCLES or more, and said. Where every step count
    ran few, all are kept."""
    import dataclasses

    from analyze.tools.whatif.command import live_sides

    sd = side(64, 3)
    req = pd.to_numeric(sd.cycles["requests"], errors="coerce").to_numpy()
    at16 = np.flatnonzero(req == 16)
    steps = np.full(len(req), 3)
    steps[at16[:10]] = 1
    adaptive = dataclasses.replace(sd, cycles=sd.cycles.assign(steps=pd.array(steps, dtype="Int64")),
                                   spec_config=sd.spec_config._replace(adaptive=True))
    parts, measured, untimed, few = live_sides([adaptive], None, batch=16)
    assert [p.spec_config.steps for p in parts] == [3] and few == [(sd.label, 1, 10)] and untimed == []
    out = W.whatif(parts, range(1, 5), n_boot=0, batch=16)
    assert out["predictions"]["cycle_ns"].is_monotonic_increasing
    # no step count with enough cycles: nothing to prefer, both kept
    small = dataclasses.replace(adaptive, cycles=adaptive.cycles[adaptive.cycles["requests"] == 16].iloc[:15])
    parts, _, _, few = live_sides([small], None, batch=16)
    assert sorted(p.spec_config.steps for p in parts) == [1, 3] and few == []


@need
def test_calibrate_live_on_an_adaptive_profile_takes_its_most_run_step_count(side):
    """--calibrate-live with a profile cut by its spec_steps marks: the step count most of its cycles ran
    (the live log of the same server ran it most too), not 'give one profile step count' (which
    --profiled-steps then refused: a marked profile says each cycle's count itself)."""
    import dataclasses

    from analyze.tools.whatif.command import _live_log_and_steps, live_sides

    log = REAL / "sglang_live_h100_v2_l64_adaptive.live"
    if not log.exists():
        pytest.skip("adaptive live log absent")
    sd = side(64, 3)
    req = pd.to_numeric(sd.cycles["requests"], errors="coerce")
    marked = sd.cycles.assign(steps=pd.array([3 if r == 1 else 1 for r in req], dtype="Int64"))
    adaptive = dataclasses.replace(sd, cycles=marked, spec_config=sd.spec_config._replace(adaptive=True))
    parts, *_ = live_sides([adaptive], None)
    n = {p.spec_config.steps: len(p.cycles) for p in parts}
    assert n[3] > n[1]
    _, k = _live_log_and_steps(str(log), parts, None, None)
    assert k == 3
    flipped = dataclasses.replace(adaptive, cycles=marked.assign(steps=4 - marked["steps"]))
    parts, *_ = live_sides([flipped], None)
    assert _live_log_and_steps(str(log), parts, None, None)[1] == 1


@need
def test_a_profile_timed_every_cycle_by_the_live_mode_says_so(side):
    """A profile whose spec_config mark says the shim's timing mode recorded CUDA events in every cycle
    (events_every=1) carries the note that the events slowed its speculative cycle; one sampled (17), or
    recorded without the mode, does not, and the predictions are the same either way (a note, no change)."""
    import dataclasses

    sd = side(64, 3)
    plain = W.whatif(sd, range(1, 5), n_boot=0, batch=1)
    every = W.whatif(dataclasses.replace(sd, spec_config=sd.spec_config._replace(events_every=1)), range(1, 5),
                     n_boot=0, batch=1)
    sampled = W.whatif(dataclasses.replace(sd, spec_config=sd.spec_config._replace(events_every=17)), range(1, 5),
                       n_boot=0, batch=1)
    said = [n for n in every["notes"] if "CUDA events in every cycle" in n]
    assert len(said) == 1 and "--calibrate-tps" in said[0] and "12%" in said[0]
    assert not any("CUDA events in every cycle" in n for n in plain["notes"] + sampled["notes"])
    cols = ["steps", "cycle_ns", "tokens_per_s"]
    pd.testing.assert_frame_equal(every["predictions"][cols], plain["predictions"][cols])


@need
def test_acceptance_matches_sglangs_own_count(side):
    """Tokens per request per cycle from the marks vs SGLang's meta_info (completion tokens /
    spec_verify_ct) of the same profiled run: V = 2, so about 1 + 0.5 + 0.25 at 3 steps."""
    prof = json.loads((REAL / "sglang_v2_l64_s3.profiled.json").read_text())
    sglang_b1 = next(b for b in prof["batches"] if b["batch"] == 1)["tokens_per_request_cycle"]
    r = W.whatif(side(64, 3), [1, 2, 3], n_boot=0, batch=1)
    p = r["predictions"].set_index("steps")
    assert p.loc[3, "tokens_per_cycle"] == pytest.approx(sglang_b1, rel=0.02)
    assert 1.7 < p.loc[3, "tokens_per_cycle"] < 2.1


@need
def test_no_negative_slope_and_no_negative_time(side):
    """The mixed-batch profile (batch 1 then 16) fitted verify with a NEGATIVE slope per verified token
    (clock states, not physics): refused, kept constant; no predicted component below zero."""
    c = W.step_costs(side(8, 3))
    fit = c["token_fit"]
    assert fit["verify"]["source"] == "refused" and fit["verify"]["fitted_per_token_ns"] < 0
    assert fit["verify"]["per_token_ns"] == 0.0
    model = W.cost_model([c], range(1, 11), c["requests"])
    comps = [col for col in model.columns if col.endswith("_ns") and col != "overhead_ns"]
    assert (model[comps].to_numpy() >= 0).all()


@need
@pytest.mark.parametrize("profiled", [1, 3])
def test_calibrated_prediction_holds_to_the_unprofiled_sweep(side, profiled):
    """64-layer target, batch 1 (the stable sweep: spreads <= 3%): from ONE profile plus the unprofiled
    tokens/s at its step count, every measured step count within 5% (measured: 1, 3, 5 steps), the
    predicted best within the measured best's noise."""
    meas, base = truth(64, 1)
    r = W.whatif(side(64, profiled), range(1, 7), n_boot=0, batch=1, calibrate_tps=meas[profiled][0],
                 baseline_tps=base)
    p = r["predictions"].set_index("steps")
    for s, (tps, _) in meas.items():
        assert abs(p.loc[s, "tokens_per_s"] / tps - 1) < 0.05, (s, p.loc[s, "tokens_per_s"], tps)
    best_measured = max(v[0] for v in meas.values())
    near_best = {s for s, (v, spread) in meas.items() if v >= best_measured * (1 - max(spread, 0.03))}
    assert near_best == {3, 5}
    assert r["best"]["steps"] in {3, 4, 5}
    # with the measured baseline, the speed-up is the sweep's (1.10x at the best), within 10%
    assert r["best"]["speedup"] == pytest.approx(best_measured / base, rel=0.10)


@need
def test_step_cost_is_the_graph_replay_not_three_times_the_kernels(side):
    """SGLang runs the draft forwards of a cycle as one CUDA graph replay: a step costs its GPU block
    (~70 us here), the replay's host time is paid once from 2 steps on. The 1 -> 3 -> 5 step
    differences of the unprofiled sweep (64 layers, batch 1) match."""
    meas, _ = truth(64, 1)
    acc = {1: 1.516, 3: 1.9225, 5: 1.987}     # SGLang's own tokens per request per cycle in that sweep
    cycle_us = {s: acc[s] / meas[s][0] * 1e6 for s in acc}
    c = W.step_costs(side(64, 3), batch=1)
    model = W.cost_model([c], [1, 3, 5], 1.0).set_index("steps")["cycle_ns"] / 1e3
    assert model[5] - model[3] == pytest.approx(cycle_us[5] - cycle_us[3], abs=60)
    assert model[3] - model[1] == pytest.approx(cycle_us[3] - cycle_us[1], abs=120)


@need
def test_speculation_does_not_pay_on_the_shallow_target(side):
    """8-layer target: the speculative cycle is host bound and costs 2-3x a plain decode step, so no step
    count beats no speculation at any batch size in the unprofiled sweep; given that baseline, whatif
    says so (best speed-up < 1) at batch 1 and 16."""
    for batch in (1, 16):
        meas, base = truth(8, batch)
        assert max(v[0] for v in meas.values()) < base
        r = W.whatif(side(8, 3), range(1, 7), n_boot=0, batch=batch, calibrate_tps=meas[3][0], baseline_tps=base)
        assert r["best"]["speedup"] < 1.0
        # and the text says it in words, not only as a speed-up under 1 on the "Best:" line (a newcomer's reading)
        from analyze.tools.whatif.render import render_whatif

        text = " ".join(render_whatif(r).split())
        assert (f"Speculation does not pay here: no speculation ({base:,.0f} tokens/s, given) is faster than every "
                "step count searched (1..6): run without --speculative-algorithm.") in text


@need
def test_whatif_says_nothing_of_the_sort_where_speculation_pays(side):
    """The 64-layer target at batch 1 pays (the sweep's best beats its baseline): no 'does not pay' line."""
    from analyze.tools.whatif.render import render_whatif

    meas, base = truth(64, 1)
    assert max(v[0] for v in meas.values()) > base
    r = W.whatif(side(64, 3), range(1, 7), n_boot=0, batch=1, calibrate_tps=meas[3][0], baseline_tps=base)
    assert r["best"]["speedup"] > 1.0 and "does not pay" not in render_whatif(r)


def test_read_measured_takes_a_sweep_at_a_batch(tmp_path):
    f = tmp_path / "sweep.json"
    f.write_text(json.dumps({"runs": [
        {"steps": 0, "batches": [{"batch": 1, "tokens_per_s": 100.0}, {"batch": 4, "tokens_per_s": 300.0}]},
        {"steps": 2, "batches": [{"batch": 1, "tokens_per_s": 120.0}, {"batch": 4, "tokens_per_s": 280.0}]}]}))
    assert read_measured(f, 4) == ({2: 280.0}, 300.0)
    assert read_measured(f, 1) == ({2: 120.0}, 100.0)
    with pytest.raises(ValueError, match="--batch"):
        read_measured(f, None)
    # several engines of one step count: their mean, not the last one read
    f.write_text(json.dumps({"runs": [
        {"steps": 3, "batches": [{"batch": 16, "tokens_per_s": 4630.0}]},
        {"steps": 0, "batches": [{"batch": 16, "tokens_per_s": 4386.0}]},
        {"steps": 3, "batches": [{"batch": 16, "tokens_per_s": 3800.0}]},
        {"steps": 3, "batches": [{"batch": 16, "tokens_per_s": 4975.0}]}]}))
    assert read_measured(f, 16) == ({3: 4468.333333333333}, 4386.0)


def test_spec_config_mark_round_trip_and_rejects():
    cfg = P.SpecConfig("EAGLE3", 5, 1, 6, 8, True, 64, False, True)
    text = P.format_spec_config(cfg)
    assert text == "spec_config algo=EAGLE3 steps=5 topk=1 draft_tokens=6 tp=8 cuda_graph=1 max_running=64 " \
                   "adaptive=0 overlap=1"
    assert P.parse_spec_config(text) == cfg
    assert P.parse_spec_config("spec_config algo=none tp=2") == P.SpecConfig("none", 0, None, None, 2, None, None)
    timed = cfg._replace(events_every=17)         # the shim's timing mode on: its sampling rides along
    assert P.format_spec_config(timed) == text + " events_every=17" and P.parse_spec_config(
        P.format_spec_config(timed)) == timed
    assert P.parse_spec_config(text + " events_every=-1") is None
    for bad in ("spec_config steps=3", "spec_config algo=EAGLE steps=x", "spec_config algo=EAGLE steps=99999999999",
                "spec_config algo=EAGLE cuda_graph=2", "rank=0 world=1", None, 3):
        assert P.parse_spec_config(bad) is None


def test_spec_config_from_sglang_server_args():
    """What the shim reads from SGLang's ServerArgs (attribute names of 0.5.17's server_args.py)."""
    from types import SimpleNamespace as NS

    args = NS(speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
              speculative_num_draft_tokens=4, tp_size=2, disable_cuda_graph=True, max_running_requests=None,
              speculative_adaptive=False, disable_overlap_schedule=False)
    assert P.spec_config_from_server_args(args, 48) == P.SpecConfig("EAGLE3", 3, 1, 4, 2, False, 48, False, True)
    off = NS(speculative_algorithm=None, tp_size=1)
    assert P.spec_config_from_server_args(off) == P.SpecConfig("none", 0, None, None, 1, True, None, None, None)


def test_shim_emits_the_config_mark_after_scheduler_init(monkeypatch):
    """The wrapper of Scheduler.__init__ marks the configuration once, and again when profiling starts."""
    from types import SimpleNamespace as NS

    from nvtx_annotate import wrappers

    marks = []
    monkeypatch.setattr(wrappers._nvtx, "mark", lambda text, *a: marks.append(text))
    monkeypatch.setitem(wrappers._rank, "config", None)
    sched = NS(server_args=NS(speculative_algorithm="EAGLE", speculative_num_steps=2, speculative_eagle_topk=1,
                              speculative_num_draft_tokens=3, tp_size=4, disable_cuda_graph=False,
                              speculative_adaptive=False, disable_overlap_schedule=True),
               max_running_requests=32)
    wrappers.emit_config_mark(sched)
    assert marks == ["spec_config algo=EAGLE steps=2 topk=1 draft_tokens=3 tp=4 cuda_graph=1 max_running=32 "
                     "adaptive=0 overlap=0"]
    assert np.all([P.parse_spec_config(m) is not None for m in marks])
    # with the timing mode on, the mark says how often its CUDA events run (a Timer's own figure)
    from nvtx_annotate import live
    from nvtx_annotate.live.events import Timer

    for events, every, want in (((object(), lambda: False), 17, 17), ((object(), lambda: False), 1, 1), (None, 17, 0)):
        timer = Timer(lambda row: None, events=events, sample_every=every)
        monkeypatch.setattr(live, "_live", NS(timer=timer))
        marks.clear()
        wrappers.emit_config_mark(sched)
        assert marks[0].endswith(f" overlap=0 events_every={want}") and P.parse_spec_config(marks[0]).events_every == want


@need
def test_advise_speculation_rule_fires_where_the_sweep_says_it_does_not_pay():
    """advise on the 8-layer profile with the sweep's unprofiled figures: the speculation finding, with
    the measured baseline named as such and only SGLang's flag to remove."""
    from analyze.tools.advise.model import advise

    meas, base = truth(8, 1)
    adv = advise(shared_loads.api_load(str(PROFILE[(8, 3)])), baseline_tps=base, calibrate_tps=meas[3][0]).to_dict()
    spec = [f for f in adv["findings"] if f["rule"] == "speculation"]
    assert len(spec) == 1
    assert spec[0]["evidence"]["baseline_source"] == "given"
    assert spec[0]["evidence"]["tokens_per_s_baseline"] == pytest.approx(base)
    assert [(s["action"], s["name"]) for s in spec[0]["settings"]] == [("remove", "--speculative-algorithm")]


@need
def test_advise_says_when_the_best_is_the_edge_of_the_searched_range(side):
    from analyze.tools.advise.model import whatif_summary

    sd = side(64, 3)
    w = whatif_summary(sd, steps=range(1, 5))
    assert w["best_steps"] == 4 and w["best_at_edge"] and w["steps_searched"] == [1, 4]


@need
@pytest.mark.parametrize("layers, batch, pays", [(8, 1, False), (8, 16, False), (64, 1, True), (64, 16, True)])
def test_one_profile_alone_tells_whether_speculation_pays(side, layers, batch, pays):
    """No unprofiled figure at all: the plain decode step estimated from the 3-step profile (the longer
    of its GPU work without draft/draft_extend, the verify's extend attention swapped for decode attention,
    and its host time: the scheduler's + the target's graph replay) gives the right verdict at every
    (depth, batch) of the sweeps, and at batch 1 the speed-up within 10% of the measured one (8 layers:
    0.75x measured, 0.755x predicted; 64 layers: 1.10x measured, 1.04x predicted; 1.45x before the
    attention swap: the verify's triton extend kernel, 26 us a layer here, is not a plain step's decode
    kernel)."""
    meas, base = truth(layers, batch)
    measured_best = max(v[0] for v in meas.values()) / base
    assert (measured_best > 1) == pays
    r = W.whatif(side(layers, 3), range(1, 7), n_boot=0, batch=batch)
    assert r["baseline"]["source"] == "estimated"
    # a verdict it states is right; inside the profile-alone error band it states none (and says so)
    assert r["best"]["verdict_uncertain"] or (r["best"]["speedup"] > 1) == pays
    assert r["best"]["speedup"] == pytest.approx(measured_best, rel=0.25)
    if batch == 1:
        assert r["best"]["speedup"] == pytest.approx(measured_best, rel=0.10)


@need
def test_calibrated_estimate_of_the_plain_step_on_the_host_bound_target(side):
    """8 layers, batch 1: the host-bound plain step, put on the unprofiled clock by the calibration,
    within 5% of the unprofiled no-speculation tokens/s (730)."""
    meas, base = truth(8, 1)
    r = W.whatif(side(8, 3), range(1, 7), n_boot=0, batch=1, calibrate_tps=meas[3][0])
    assert r["baseline"]["tokens_per_s"] == pytest.approx(base, rel=0.05)
    assert "host bound" in r["baseline"]["method"]


@pytest.mark.parametrize("name", ["sglang_eager", "sglang_graphs", "sglang_server", "sglang_vocab64",
                                  "sglang_v2_l8_s1", "sglang_v2_l64_s3", "sglang_h100_v3_l32_s5",
                                  "sglang_h100_v2_l128_s3", "sglang_h100_v3_l32_s3_clock",
                                  "sglang_h100_v2_l64_s3_clock", "sglang_h100_v2_l32_s3", "sglang_h200_v1_l64_s3"])
def test_advise_runs_whatif_on_every_real_sglang_fixture(name):
    """Before: 'cannot convert NA to integer' on 3 of the 4 older fixtures (cycles whose GPU data was
    lost have no GPU start). No predicted component is negative on any of them."""
    from analyze.tools.advise.model import whatif_summary

    path = REAL / f"{name}.sqlite"
    if not path.exists():
        pytest.skip("fixture not unpacked")
    a = shared_loads.api_load(str(path))
    w = whatif_summary(a)
    assert w["profiled_steps"] >= 1 and w["tokens_per_s_best"] > 0
    r = W.whatif(sides.as_side(a), range(1, 11), n_boot=0)
    comps = [c for c in r["predictions"].columns if c.endswith("_ns") and c != "overhead_ns"]
    assert (r["predictions"][comps].to_numpy() >= 0).all()


PAIRS = [("sglang_v2_l64_s3_b4", "sglang_sweep_v2_l64_b4", b) for b in (1, 4, 16, 64)] + \
    [(f"sglang_v2_l{layers}_s{s}", f"sglang_sweep_v2_l{layers}", b) for layers in (64, 8) for s in (3, 1) for b in (1, 16)] + \
    [("sglang_live_h100_v2_l64_s3", "sglang_sweep_h100_v2_l64", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l32_s3", "sglang_sweep_h100_v2_l32", b) for b in (1, 16)] + \
    [("sglang_h200_v1_l64_s3", "sglang_sweep_h200_v1_l64", b) for b in (1, 16, 64)]


@pytest.mark.parametrize("profile, sweep, batch", PAIRS)
def test_the_profile_alone_band_covers_every_real_sweep(profile, sweep, batch):
    """whatif.PROFILE_ALONE_RATIO (the band inside which a verdict against an estimated baseline is said to
    be uncertain) holds the speed-up over the measured best one of every real profile and its sweep, from
    the profile alone and calibrated at the profiled step count (the calibration leaves the baseline
    estimated: sglang_v2_l64_s3 at batch 16 says 0.85x calibrated where the sweep measured 1.12x)."""
    if not ((REAL / f"{profile}.sqlite").exists() and (REAL / f"{sweep}.json").exists()):
        pytest.skip("real SGLang fixtures not unpacked")
    measured, base = read_measured(REAL / f"{sweep}.json", batch)
    measured = {s: v for s, v in measured.items() if s <= 6}     # the searched 1..6 (a sweep may reach further)
    side = shared_loads.load_side(REAL / f"{profile}.sqlite")
    k = W.infer_steps(side)[0]
    lo, hi = W.PROFILE_ALONE_RATIO
    for cal in (None, measured.get(k)):
        r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=cal)
        assert r["baseline"]["source"] == "estimated"
        ratio = r["best"]["speedup"] / (max(measured.values()) / base)
        assert lo <= ratio <= hi, (cal, ratio)
        # a verdict it states is the sweep's; where it could be wrong it states none
        assert r["best"]["verdict_uncertain"] or (r["best"]["speedup"] > 1) == (max(measured.values()) > base)


@need
def test_a_prediction_from_few_cycles_says_so(side):
    """The 64-layer profile holds 2 cycles at batch 3 and hundreds at batch 1: the first prediction
    says it rests on 2 cycles (text and JSON), the second does not."""
    from analyze.tools.whatif.render import render_whatif

    few = W.whatif([side(64, 3)], steps=[1, 2, 3, 4], batch=3, n_boot=0)
    assert few["best"]["cycles"] == 2 and few["best"]["few_cycles"]
    assert "Few cycles: this rests on 2 decode cycles (fewer than 20)" in render_whatif(few).replace("\n  ", " ")
    many = W.whatif([side(64, 3)], steps=[1, 2, 3, 4], batch=1, n_boot=0)
    assert many["best"]["cycles"] >= W.MIN_CYCLES and not many["best"]["few_cycles"]
    assert "Few cycles" not in render_whatif(many)


def _with_step_marks(src, dst, steps_of) -> None:
    """A copy of a real profile whose shim had marked each decode cycle's step count (``spec_steps=S cycle=K``,
    S = ``steps_of(batch size)``, None: no mark) and whose spec_config says --speculative-adaptive."""
    import re
    import shutil
    import sqlite3

    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    reqs = {}
    for (text,) in con.execute("SELECT COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                               "ON s.id = e.textId WHERE eventType = 34"):
        m = re.search(r"accept_len=\d+ reqs=(\d+) cycle=(\d+)", text or "")
        if m:
            reqs[int(m[2])] = int(m[1])
    rows = con.execute("SELECT e.end, e.globalTid, e.int64Value, e.domainId FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                       "ON s.id = e.textId WHERE eventType = 59 AND COALESCE(e.text, s.value) = 'decode_cycle'").fetchall()
    for end, tid, k, dom in rows:
        s = steps_of(reqs.get(k))
        if s is not None:
            con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, domainId) VALUES (?, ?, 34, ?, ?, ?)",
                        (end - 1, None, f"spec_steps={s} cycle={k}", tid, dom))
    con.execute("UPDATE NVTX_EVENTS SET text = replace(text, 'adaptive=0', 'adaptive=1') WHERE text LIKE 'spec_config%'")
    con.commit()
    con.close()


@need
def test_spec_steps_marks_reach_the_cycle_table_and_whatif_end_to_end(tmp_path):
    """The real 3-step profile as an adaptive server's would be recorded (batch-16 cycles marked 1 step, the
    others 3): the cycle table's ``steps`` is nullable Int64 with the marked counts; `whatif --batch 16` models
    1 step (the step count that ran batch 16), `--per-batch` says 1 at batch 16 and 3 at batch 1; a profile
    whose every cycle is marked 1 is modelled at 1, not the spec_config's start value 3, and without a note."""
    from analyze.cli import main

    src = PROFILE[(64, 3)]
    split = tmp_path / "split.sqlite"
    _with_step_marks(src, split, lambda m: 1 if m == 16 else 3)
    sd = sides.load_side(split)
    assert str(sd.cycles["steps"].dtype) == "Int64"
    req = pd.to_numeric(sd.cycles["requests"], errors="coerce")
    assert set(sd.cycles.loc[req == 16, "steps"].dropna()) == {1} and set(sd.cycles.loc[req == 1, "steps"].dropna()) == {3}
    out = tmp_path / "w.json"
    assert main(["whatif", str(split), "--batch", "16", "--steps", "1..4", "--boot", "0", "--json", str(out)]) == 0
    import json

    doc = json.loads(out.read_text())
    assert [p["steps"] for p in doc["profiles"]] == [1]
    pb = tmp_path / "pb.json"
    assert main(["whatif", str(split), "--per-batch", "--steps", "1..4", "--boot", "0", "--json", str(pb)]) == 0
    rows = {r["batch"]: r for r in json.loads(pb.read_text())["per_batch"]}
    assert rows[16]["profiled_steps"] == 1 and rows[1]["profiled_steps"] == 3
    one = tmp_path / "one.sqlite"
    _with_step_marks(src, one, lambda m: 1)
    r = W.whatif(sides.load_side(one), range(1, 5), n_boot=0, batch=1)
    assert r["profiles"][0]["steps"] == 1 and "spec_steps marks" in r["profiles"][0]["steps_source"]
    assert not any("--speculative-adaptive" in n for n in r["notes"])


@need
def test_the_bootstrap_shows_progress_where_asked_and_gives_the_same_result(side, monkeypatch):
    """whatif's bootstrap (200 resamples by default: most of its 7 s on a real profile) goes through the progress bar
    the CLI enables on a terminal; the result is the same with and without it."""
    from analyze.run import progress as progress_mod

    seen = []

    def recorder(items, enabled, total=None, desc="reports", unit="report"):
        seen.append((enabled, total, desc, unit))
        return items
    profile = side(8, 3)        # loaded before the patch (under it each load would be a fresh analysis)
    monkeypatch.setattr(progress_mod, "progress", recorder)
    on = W.whatif(profile, range(1, 4), n_boot=7, batch=1, progress=True)
    off = W.whatif(profile, range(1, 4), n_boot=7, batch=1)
    boot = [x for x in seen if x[2] == "whatif bootstrap"]      # (loading a profile goes through it too)
    assert boot == [(True, 7, "whatif bootstrap", "resample"), (False, 7, "whatif bootstrap", "resample")]
    assert on["predictions"].equals(off["predictions"])


GIVEN_BASELINE_PAIRS = PAIRS + \
    [("sglang_h100_v3_l32_s3", "sglang_sweep_h100_v3_l32", b) for b in (1, 4, 16, 64)] + \
    [("sglang_h100_v3_l32_s5", "sglang_sweep_h100_v3_l32", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l128_s3", "sglang_sweep_h100_v2_l128", b) for b in (1, 16)] + \
    [("sglang_h100_v2_l64_s3_clock", "sglang_sweep_h100_v2_l64_clock", b) for b in (1, 16)]


@pytest.mark.parametrize("profile, sweep, batch", GIVEN_BASELINE_PAIRS)
def test_a_given_baseline_with_an_uncalibrated_profile_compares_one_clock(profile, sweep, batch):
    """--baseline-tps (unprofiled) without a calibration: the speed-up is the profile's own over its estimated plain
    step (the predictions put on the given figure's clock), inside PROFILE_ALONE_RATIO of the measured one on every
    real pair, and a verdict it states is the sweep's. Before (profiled predictions against the unprofiled figure as
    they were): 0.39x to 1.28x, and sure verdicts the wrong way round (sglang_v2_l64_s3 at 16: 0.94x against 1.12x)."""
    if not ((REAL / f"{profile}.sqlite").exists() and (REAL / f"{sweep}.json").exists()):
        pytest.skip("real SGLang fixtures not unpacked")
    measured, base = read_measured(REAL / f"{sweep}.json", batch)
    measured = {s: v for s, v in measured.items() if s <= 6}     # the searched 1..6 (a sweep may reach further)
    side = shared_loads.load_side(REAL / f"{profile}.sqlite")
    given = W.whatif(side, range(1, 7), n_boot=0, batch=batch, baseline_tps=base)
    alone = W.whatif(side, range(1, 7), n_boot=0, batch=batch)
    assert given["baseline"]["source"] == "given" and given["best"]["speedup_through_estimate"]
    assert given["baseline"]["clock"]["estimated_tokens_per_s"] == pytest.approx(alone["baseline"]["tokens_per_s"])
    assert given["best"]["speedup"] == pytest.approx(alone["best"]["speedup"], rel=1e-9)
    # on the given clock: every cycle / q, its tokens/s x q, the difference in the overhead, GPU phases as profiled
    p, a, q = given["predictions"], alone["predictions"], given["baseline"]["clock"]["ratio"]
    assert q == pytest.approx(base / alone["baseline"]["tokens_per_s"])
    assert np.allclose(p["cycle_ns"], a["cycle_ns"] / q) and np.allclose(p["tokens_per_s"], a["tokens_per_s"] * q)
    assert np.allclose(p["overhead_ns"] - a["overhead_ns"], a["cycle_ns"] / q - a["cycle_ns"])
    assert np.allclose(p["verify_ns"], a["verify_ns"]) and np.allclose(p["draft_ns"], a["draft_ns"])
    lo, hi = W.PROFILE_ALONE_RATIO
    ratio = given["best"]["speedup"] / (max(measured.values()) / base)
    assert lo <= ratio <= hi, ratio
    assert given["best"]["verdict_uncertain"] or (given["best"]["speedup"] > 1) == (max(measured.values()) > base)


def test_a_calibrated_profile_takes_a_given_baseline_as_it_is():
    """With --calibrate-tps both figures are of the unprofiled clock: the baseline is taken as given, nothing is
    rescaled, and the verdict is flat (the committed l8 pair at batch 1: 0.76x, the sweep's 0.75x)."""
    if not ((REAL / "sglang_v2_l8_s3.sqlite").exists() and (REAL / "sglang_sweep_v2_l8.json").exists()):
        pytest.skip("real SGLang fixtures not unpacked")
    measured, base = read_measured(REAL / "sglang_sweep_v2_l8.json", 1)
    side = shared_loads.load_side(REAL / "sglang_v2_l8_s3.sqlite")
    r = W.whatif(side, range(1, 7), n_boot=0, batch=1, baseline_tps=base, calibrate_tps=measured[3])
    assert "clock" not in r["baseline"] and not r["best"]["speedup_through_estimate"]
    assert r["best"]["speedup"] == pytest.approx(0.76, abs=0.01) and not r["best"]["verdict_uncertain"]


def test_a_calibration_that_lengthens_the_cycle_is_said_to_be_suspect(tmp_path):
    """A newcomer calibrated the H200 profile with the H200 live log recorded beside nsys (another run, itself
    profiled): 5,454 -> 9,786 us a cycle, a false 'does not pay'. A profiler does not speed a run up: past x1.35
    (engines of one configuration differed by up to 27%) the calibration line and a note say it is suspect. The
    live log of the profile's own configuration (docs/live.md's pair) shortens the cycle: no such note."""
    from analyze import cli

    live = REAL / "sglang_live_h200_v2_l64_s3_gated.live"
    if not ((REAL / "sglang_v2_l64_s3.sqlite").exists() and live.exists()):
        pytest.skip("real SGLang fixtures not unpacked")
    out = tmp_path / "w.json"
    rc = cli.main(["whatif", str(REAL / "sglang_v2_l64_s3.sqlite"), "--calibrate-live", str(live), "--batch", "1",
                   "--boot", "0", "--json", str(out), "-q"])
    notes = [n for n in json.loads(out.read_text())["notes"] if "LENGTHENED" in str(n)]
    assert rc == 0 and len(notes) == 1 and "x1.79 (5,454.3 us -> 9,786.0 us)" in str(notes[0])
    assert W.lengthened_note(5_000_000, 6_500_000, 3) is None          # x1.30: within engines' spread
    assert "x1.40" in W.lengthened_note(5_000_000, 7_000_000, 3)


def test_the_live_log_of_the_profiles_configuration_shortens_its_cycle(tmp_path):
    from analyze import cli

    pair = (REAL / "sglang_live_h100_v2_l64_s3.sqlite", REAL / "sglang_live_h100_e2_on")
    if not all(p.exists() for p in pair):
        pytest.skip("real SGLang fixtures not unpacked")
    out = tmp_path / "w.json"
    assert cli.main(["whatif", str(pair[0]), "--calibrate-live", str(pair[1]), "--batch", "16", "--boot", "0",
                     "--json", str(out), "-q"]) == 0
    r = json.loads(out.read_text())
    assert r["calibration"]["shift_ns"] > 0 and not any("LENGTHENED" in str(n) for n in r["notes"])


def test_a_given_baseline_that_beats_or_lags_the_profiles_plain_step_is_said_to():
    """The review of the clock change: a given baseline faster than the profile's GPU work allows at its plain step
    leaves a negative overhead (noted, as a calibration's is); one x3.3 slower than the profile's estimate stretches
    every cycle so (noted: no profiler speeds a run up)."""
    p = REAL / "h200_moe_steps3.sqlite"
    if not p.exists():
        pytest.skip("fixture not unpacked")
    side = shared_loads.load_side(p)
    fast = W.whatif(side, range(1, 7), n_boot=0, baseline_tps=622.0)
    assert (fast["predictions"]["overhead_ns"] < 0).any()
    assert any("NEGATIVE overhead" in n for n in fast["notes"])
    slow = W.whatif(side, range(1, 7), n_boot=0, baseline_tps=162.0)
    assert any("plain step is LONGER than the profile's estimate x3.3" in n for n in slow["notes"])
    assert not any("LONGER" in n or "NEGATIVE" in n for n in W.whatif(side, range(1, 7), n_boot=0)["notes"])


def test_a_json_results_rough_plain_step_decides_nothing(tmp_path):
    """A saved --json result has no shim ranges: its plain step is one cycle without the draft phases, an estimate
    no real sweep bounded (sglang_v2_l64_s3 at batch 1: 1.93x against it, 0.98x from the report, 1.10x measured).
    Against it, or with a given baseline it cannot carry to the profiled clock, the verdict is uncertain; the given
    baseline then stays as given (no scaling through the rough estimate: 370 tokens/s, not 579; 328 measured);
    calibrated and given, the verdict is flat."""
    from analyze import cli

    src = REAL / "sglang_v2_l64_s3.sqlite"
    if not src.exists():
        pytest.skip("fixture not unpacked")
    js = tmp_path / "r.json"
    assert cli.main([str(src), "-q", "--json", str(js)]) == 0
    side = sides.load_side(js)
    alone = W.whatif(side, range(1, 7), n_boot=0, batch=1)
    assert alone["baseline"]["rough"] and alone["best"]["rough_estimate"] and alone["best"]["verdict_uncertain"]
    assert alone["best"]["speedup"] > 1.8
    given = W.whatif(side, range(1, 7), n_boot=0, batch=1, baseline_tps=300.8)
    assert given["best"]["verdict_uncertain"] and not given["best"]["speedup_through_estimate"]
    assert given["baseline"]["clock"]["ratio"] is None
    assert given["best"]["tokens_per_s"] == pytest.approx(alone["best"]["tokens_per_s"])
    both = W.whatif(side, range(1, 7), n_boot=0, batch=1, baseline_tps=300.8, calibrate_tps=328.2)
    assert not both["best"]["verdict_uncertain"] and both["best"]["speedup"] == pytest.approx(1.12, abs=0.01)
    from analyze.tools.whatif import per_batch as PB
    from analyze.tools.whatif.render import render_per_batch

    t = PB.per_batch([js], range(1, 7), n_boot=0)
    assert t["rough_estimate"].all() and t["verdict_uncertain"].all()
    assert "at batch 1, 16 the plain step is estimated roughly" in " ".join(render_per_batch(t).split())


def test_with_no_estimate_to_carry_it_a_given_baseline_decides_nothing(monkeypatch):
    """An estimated plain step that is NaN (nothing to estimate it from): the given baseline is not set against the
    profiled predictions as if of one clock; the verdict is uncertain (before the review: 1.08x stated as sure)."""
    p = REAL / "sglang_v2_l64_s3.sqlite"
    if not p.exists():
        pytest.skip("fixture not unpacked")
    real = W.estimated_baseline
    monkeypatch.setattr(W, "estimated_baseline", lambda *a, **k: dict(real(*a, **k), tokens_per_s=float("nan")))
    r = W.whatif(sides.load_side(p), range(1, 7), n_boot=0, batch=1, baseline_tps=300.8)
    assert r["best"]["verdict_uncertain"] and r["baseline"]["clock"]["ratio"] is None


def test_a_profile_with_its_own_clock_is_told_to_name_a_batch(tmp_path):
    """The review: a profile with clock marks whose load ran several batch sizes, given --baseline-tps and no
    --batch, cannot calibrate from its clock (no batch size is guessed): a note says --batch M would."""
    from analyze import cli

    p = REAL / "sglang_h100_v3_l32_s3_clock.sqlite"
    if not p.exists():
        pytest.skip("fixture not unpacked")
    out = tmp_path / "w.json"
    assert cli.main(["whatif", str(p), "--baseline-tps", "1700", "--boot", "0", "--json", str(out), "-q"]) == 0
    r = json.loads(out.read_text())
    assert r["calibration"] is None and r["best"]["speedup_through_estimate"]
    assert any("give --batch M" in str(n) for n in r["notes"])
    assert cli.main(["whatif", str(p), "--baseline-tps", "1700", "--batch", "1", "--boot", "0", "--json", str(out),
                     "-q"]) == 0
    r = json.loads(out.read_text())
    assert r["calibration"]["source"]["kind"] == "profile_clock" and not any("give --batch M" in str(n) for n in r["notes"])
