"""The best step count per batch size and SGLang's adaptive config (analyze/tools/whatif/per_batch.py),
on the real SGLang profiles (batch 1 then 16 in one profile) and their unprofiled sweeps; the written
config is loaded by SGLang 0.5.17's own parser (from the bundle in ../shared/sglang-h200)."""
import functools
import json
import sys
import tarfile
import types
from pathlib import Path

import pytest

from analyze.tools.whatif import per_batch as PB
from analyze.tools.whatif.command import parse_batch_values
from helpers import shared_loads
from helpers.per_batch_table import per_batch_table

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
BUNDLE = ROOT.parent / "shared" / "sglang-h200" / "h200_bundle_sglang0.5.17.tar.xz"
L8, L64 = REAL / "sglang_v2_l8_s3.sqlite", REAL / "sglang_v2_l64_s3.sqlite"
need = pytest.mark.skipif(not (L8.exists() and L64.exists()), reason="real SGLang profiles not unpacked")


def sweep(layers):
    data = json.loads((REAL / f"sglang_sweep_v2_l{layers}.json").read_text())
    out = {}
    for run in data["runs"]:
        for b in run["batches"]:
            out[(run["steps"], b["batch"])] = b["tokens_per_s"]
    return out


@need
def test_per_batch_table_on_the_real_profiles():
    meas = sweep(64)
    # batch 16's 3-step figure is noisy (34% spread): not used; the sweep's rounds at 16 were of 256 tokens a
    # request, the profile's of 128 (a shorter round has a longer tail in proportion: whatif/rounds.py)
    t = PB.per_batch([L64], range(1, 7), n_boot=0, baselines_tps={1: meas[(0, 1)], 16: meas[(0, 16)]},
                     calibrate={1: meas[(3, 1)]}, request_tokens={16: 256})
    assert t["batch"].tolist() == [1, 16] and t["cycles"].tolist() == [294, 90]     # steady cycles (1st: warm-up)
    assert (t["profiled_steps"] == 3).all() and (t["baseline_source"] == "given").all()
    assert t["calibrated"].tolist() == [True, False]
    # calibrated at 3 steps: the prediction there is the measurement
    assert t["tokens_per_s_profiled"].iloc[0] == pytest.approx(meas[(3, 1)])
    # speculation pays on the 64-layer target at both sizes, as measured (best 1.10x and 1.12x): at batch 1
    # (calibrated) it says so; at 16 (not calibrated: the profiler's stretch of the cycle stays in) the
    # speed-up is within the 25% a profile alone is held to
    assert t["best_or_off"].iloc[0] > 0
    for row, tol in zip(t.itertuples(), (0.15, 0.25)):
        measured = max(v for (s, b), v in meas.items() if b == row.batch and s > 0) / meas[(0, row.batch)]
        assert row.speedup == pytest.approx(measured, rel=tol)


@need
def test_speculation_off_everywhere_writes_no_config():
    """Calibrated at each batch size (the sweep's 3-step figures) and given the measured baselines: off at both,
    a verdict (no '?'), and no config. The baselines alone (the profile not calibrated) leave both uncertain (batch 1:
    0.75x, the profile's own speed-up over its estimated plain step (the sweep: 0.75x), inside that estimate's
    error, so no verdict there; before 2026-12-07 the profiled predictions were set against the unprofiled
    baselines as they were (0.58x at both batch sizes, said to be sure)."""
    meas = sweep(8)
    base = {1: meas[(0, 1)], 16: meas[(0, 16)]}
    t = PB.per_batch([L8], range(1, 7), n_boot=0, baselines_tps=base, calibrate={1: meas[(3, 1)], 16: meas[(3, 16)]})
    assert (t["best_or_off"] == 0).all() and not t["verdict_uncertain"].any()
    with pytest.raises(ValueError, match="does not pay at any batch size"):
        PB.adaptive_config(t)
    alone = PB.per_batch([L8], range(1, 7), n_boot=0, baselines_tps=base).set_index("batch")
    assert alone["speedup_through_estimate"].all() and (alone["baseline_source"] == "given").all()
    assert alone.loc[1, "speedup"] == pytest.approx(0.75, abs=0.01) and alone.loc[1, "verdict_uncertain"]
    # 0.73x, inside the estimate's error now: uncertain (0.65x and a verdict before the round's gap was modelled)
    assert alone.loc[16, "speedup"] == pytest.approx(0.727, abs=0.01) and alone.loc[16, "verdict_uncertain"]


def test_adaptive_config_format_and_buckets():
    t = per_batch_table(batch=[16, 1], cycles=[40, 300], best_steps=[2, 5], tokens_per_s_best=[5000.0, 400.0],
                        tokens_per_s_profiled=[4800.0, 390.0], tokens_per_s_baseline=[5300.0, 300.0],
                        speedup=[0.94, 1.33], best_or_off=[0, 5], accepted_per_request=[0.9, 1.0])
    cfg = PB.adaptive_config(t)
    assert [k for k in cfg if k.isdigit()] == ["1", "16"]
    assert cfg["1"] == {"candidate_steps": [5], "up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
    # no step count pays at 16, but SGLang's adaptive 0 still verifies: the best step count stays, listed
    assert cfg["16"]["candidate_steps"] == [2]
    assert cfg["specprof"]["not_paying"] == [16]
    assert PB.differs(t) and PB.not_paying(t) == [16]
    same = t.assign(best_steps=[5, 5])
    assert not PB.differs(same)                    # off at 16 alone is not a reason for an adaptive config
    assert not PB.differs(t.assign(best_or_off=[0, 0]))     # nothing pays: no config, whatever the bests
    # 0.98x is a break-even (within 3%), not "slower with speculation at any step count": not listed
    even = per_batch_table(batch=[16, 1], cycles=[40, 300], best_steps=[2, 5], tokens_per_s_best=[5000.0, 400.0],
                           tokens_per_s_profiled=[4800.0, 390.0], tokens_per_s_baseline=[5100.0, 300.0],
                           speedup=[0.98, 1.33], best_or_off=[0, 5], accepted_per_request=[0.9, 1.0])
    assert list(even["verdict"]) == ["break_even", "pays"] and PB.not_paying(even) == []
    assert PB.adaptive_config(even)["specprof"]["not_paying"] == []


@functools.lru_cache(maxsize=1)
def _adaptive_source() -> str:
    """adaptive_spec_params.py of the bundle, read in one pass up to it (random access to a member of a .tar.xz
    reads the whole archive to list it, then again to seek back: 5.6 s against 2.6 s)."""
    member = "./site/sglang/srt/speculative/adaptive_spec_params.py"
    with tarfile.open(BUNDLE, "r|xz") as tar:
        for info in tar:
            if info.name == member:
                return tar.extractfile(info).read().decode()
    raise KeyError(f"{member} not in {BUNDLE}")


def _sglang_adaptive_module():
    """SGLang 0.5.17's adaptive_spec_params.py, read from the bundle, run with its one import stubbed."""
    src = _adaptive_source()
    stub = types.ModuleType("sglang.srt.utils")
    stub.log_info_on_rank0 = lambda logger, msg: None
    saved = {k: sys.modules.get(k) for k in ("sglang", "sglang.srt", "sglang.srt.utils")}
    for name in ("sglang", "sglang.srt"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["sglang.srt.utils"] = stub
    try:
        mod = types.ModuleType("adaptive_spec_params")
        exec(compile(src, "adaptive_spec_params.py", "exec"), mod.__dict__)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod


@pytest.mark.skipif(not BUNDLE.exists(), reason="SGLang bundle (../shared/sglang-h200) not present")
def test_written_config_loads_in_sglangs_own_parser(tmp_path):
    t = per_batch_table(batch=[1, 8, 32], cycles=[300, 80, 40], best_steps=[5, 3, 1],
                        tokens_per_s_best=[400.0, 2000.0, 6000.0], tokens_per_s_profiled=[390.0, 1990.0, 5900.0],
                        tokens_per_s_baseline=[300.0] * 3, baseline_source=["estimated"] * 3, speedup=[1.3, 1.1, 0.9],
                        best_or_off=[5, 3, 0])
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(PB.adaptive_config(t)))
    sg = _sglang_adaptive_module()
    assert sg.resolve_candidate_steps_from_config(str(path)) == [1, 3, 5]
    params = sg.AdaptiveSpeculativeParams(initial_steps=3, cfg_path=str(path))
    params.set_cuda_graph_bs([1, 2, 4, 8, 16, 32, 64])
    # SGLang routes a batch to the largest key <= its CUDA-graph-padded size (20 pads to 32)
    assert [params.get_steps_for_batch(b) for b in (1, 2, 5, 8, 16, 20, 33, 64)] == [5, 5, 3, 3, 3, 1, 1, 1]
    # a single candidate cannot be left by SGLang's acceptance-driven switching
    for _ in range(50):
        assert params.on_verify_complete([3, 3, 3, 3], 1) is None
    assert params.get_steps_for_batch(1) == 5


def test_batch_values_option():
    assert parse_batch_values("1=546.5,16=6654", "--batch-tps") == {1: 546.5, 16: 6654.0}
    assert parse_batch_values(None, "--batch-tps") == {}
    for bad in ("1:5", "0=3", "2=-1", "x=1"):
        with pytest.raises(ValueError):
            parse_batch_values(bad, "--batch-tps")


def test_advise_adaptive_rule_fires_only_when_the_best_differs():
    from types import SimpleNamespace as NS

    from analyze import findings as F
    from analyze.tools.advise.model import rule_adaptive_steps

    rows = [{"batch": 1, "cycles": 300, "best_steps": 5, "best_or_off": 5, "speedup": 1.3, "baseline_source": "given",
             "tokens_per_s_profiled": 390.0, "tokens_per_s_best": 400.0, "tokens_per_s_baseline": 300.0,
             "verdict_uncertain": False},
            {"batch": 16, "cycles": 100, "best_steps": 2, "best_or_off": 0, "speedup": 0.9, "baseline_source": "given",
             "tokens_per_s_profiled": 4500.0, "tokens_per_s_best": 4600.0, "tokens_per_s_baseline": 5000.0,
             "verdict_uncertain": False}]       # as every row of whatif's per-batch table (per_batch.COLUMNS)
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": rows}, cycle_ns=1000.0))
    assert check.status == F.TRIGGERED and len(found) == 1
    f = found[0]
    # cycle-weighted: (300 x (1 - 390/400) + 100 x (1 - 4500/4600)) / 400 of a 1000 ns cycle
    assert f.saving_ns == pytest.approx(1000.0 * (300 * 0.025 + 100 * (1 - 4500 / 4600)) / 400)
    assert f.evidence["not_paying_batches"] == [16]
    assert [(s.action, s.name, s.value) for s in f.settings] == [
        ("set", "--speculative-adaptive", None), ("set", "--speculative-adaptive-config", "adaptive.json")]
    # nothing pays anywhere (the best step counts still differ): no adaptive config, the speculation rule's case
    none = [dict(r, best_or_off=0, speedup=0.9) for r in rows]
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": none}, cycle_ns=1000.0))
    assert not found and check.status == F.BELOW_THRESHOLD and "predicted to pay at no batch size" in check.reason
    # every batch size leaning to no speculation inside the estimate's error ('?', not 'does not pay'): the same
    lean = [dict(r, best_or_off=r["best_steps"], speedup=0.95, verdict_uncertain=True) for r in rows]
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": lean}, cycle_ns=1000.0))
    assert not found and check.status == F.BELOW_THRESHOLD and "0.95x" in check.reason
    # one of them leaning to pay, uncertain or not: the rule fires
    lean[0]["speedup"] = 1.05
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": lean}, cycle_ns=1000.0))
    assert check.status == F.TRIGGERED and len(found) == 1
    rows[1]["best_steps"] = 5
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": rows}, cycle_ns=1000.0))
    assert not found and check.status == F.BELOW_THRESHOLD
    found, check = rule_adaptive_steps(NS(whatif={"per_batch": None}, cycle_ns=1000.0))
    assert not found and check.status == F.NOT_APPLICABLE


def test_per_batch_report_says_when_one_step_count_serves_every_batch():
    from analyze.tools.whatif.render import render_per_batch

    t = per_batch_table(batch=[1, 16], cycles=[300, 90], best_steps=[5, 5], tokens_per_s_best=[340.0, 5900.0],
                        tokens_per_s_profiled=[330.0, 5800.0], tokens_per_s_baseline=[300.0, 4800.0],
                        speedup=[1.13, 1.23], best_or_off=[5, 5], calibrated=[True, True])
    text = " ".join(render_per_batch(t).split())
    assert "--speculative-num-steps 5 (--speculative-num-draft-tokens 6) does what an adaptive config would" in text
    assert "differs between batch sizes" not in text
    off = " ".join(render_per_batch(t.assign(best_or_off=[0, 0], speedup=[0.9, 0.8])).split())
    assert ("at any batch size modelled: run without --speculative-algorithm (no adaptive config: its 0 steps still "
            "verifies).") in off
    assert "does what an adaptive config would" not in off
    # against estimated baselines (a certain verdict still): measured first, as the line below them asks
    est = " ".join(render_per_batch(t.assign(best_or_off=[0, 0], speedup=[0.6, 0.6],
                                             baseline_source=["estimated", "given"])).split())
    assert "still verifies), once the estimated baselines are measured (below)." in est
    assert "Baselines marked 'estimated' come from the speculative profile" in est


@need
def test_flat_unprofiled_figures_with_per_batch_are_refused_not_ignored(tmp_path, capsys):
    """--per-batch takes its unprofiled figures per batch size; --baseline-tps / --calibrate-tps / --baseline
    with it were once ignored without a word (a newcomer's run): now one line naming the flags, exit 10."""
    from analyze import cli

    for flags in (["--baseline-tps", "729.7"], ["--calibrate-tps", "546.5"], ["--baseline", str(L64)],
                  ["--baseline-tps", "729.7", "--calibrate-tps", "546.5"]):
        rc = cli.main(["whatif", str(L8), "--per-batch", "--steps", "1..6", *flags])
        err = capsys.readouterr().err.strip()
        assert rc == 10 and err.count("\n") == 0, err
        assert all(f in err for f in flags if f.startswith("--")) and "--batch-baseline-tps M=Y" in err


@need
def test_advise_per_batch_takes_the_figures_given_for_its_batch():
    """advise --batch 1 --baseline-tps Y --calibrate-tps X: its per-batch rows use them at batch 1 (as whatif
    --per-batch --batch-baseline-tps 1=Y --batch-tps 1=X would), the other batch size stays estimated; before,
    the per-batch rule called batch 1 uncertain against an estimated baseline beside the speculation rule's
    measured one."""
    from analyze.tools.advise.model import whatif_summary

    a = shared_loads.api_load(str(L8))
    rows = {r["batch"]: r for r in whatif_summary(a, batch=1, baseline_tps=729.7, calibrate_tps=546.5)["per_batch"]}
    assert rows[1]["baseline_source"] == "given" and rows[1]["tokens_per_s_baseline"] == 729.7
    assert rows[1]["calibrated"] and rows[1]["tokens_per_s_profiled"] == pytest.approx(546.5)
    assert rows[1]["speedup"] == pytest.approx(0.76, abs=0.01) and not rows[1]["verdict_uncertain"]
    assert rows[16]["baseline_source"] == "estimated" and not rows[16]["calibrated"]
    plain = {r["batch"]: r for r in whatif_summary(a, batch=1)["per_batch"]}
    assert plain[1]["baseline_source"] == "estimated" and plain[1]["verdict_uncertain"]
    assert plain[16] == rows[16]


@need
def test_no_config_when_nothing_pays_shows_the_table_then_one_error_line(tmp_path, capsys):
    from analyze import cli

    out = tmp_path / "adaptive.json"
    rc = cli.main(["whatif", str(L8), "--per-batch", "--steps", "1..6", "--boot", "0",
                   "--batch-baseline-tps", "1=729.7,16=10749", "--batch-tps", "1=546.5,16=6654.3",
                   "--adaptive-config", str(out)])
    got = capsys.readouterr()
    assert rc == 12 and not out.exists()
    assert "0.76x  off" in got.out and "run without --speculative-algorithm" in got.out
    assert got.err.strip().count("\n") == 0 and "does not pay at any batch size" in got.err


@need
def test_per_batch_rows_carry_the_bootstrap_interval_at_the_best_step_count():
    """Issue 41's 'with intervals': each batch size's tokens/s at its best step count with the bootstrap's
    95% interval (the same seeded bootstrap as whatif's), shown as a column; none without a bootstrap."""
    from analyze.tools.whatif.render import render_per_batch

    t = PB.per_batch([str(L64)], range(1, 7), n_boot=40, seed=0)
    assert len(t) == 2
    assert (t["tokens_per_s_best_lo"] <= t["tokens_per_s_best"]).all()
    assert (t["tokens_per_s_best"] <= t["tokens_per_s_best_hi"]).all()
    assert (t["tokens_per_s_best_hi"] - t["tokens_per_s_best_lo"] > 0).all()
    assert "95% CI" in render_per_batch(t)
    plain = PB.per_batch([str(L64)], range(1, 7), n_boot=0)
    assert plain["tokens_per_s_best_lo"].isna().all() and "95% CI" not in render_per_batch(plain)
    assert plain["tokens_per_s_best"].tolist() == pytest.approx(t["tokens_per_s_best"].tolist())


@need
def test_batch_sizes_with_too_few_cycles_are_listed_as_not_modelled(tmp_path):
    """'Where the data do not cover a bucket, say so': the batch sizes the profile ran in fewer than
    MIN_CYCLES steady cycles (here the rounds' drain) are listed with their cycles, in the text and the JSON."""
    from analyze.tools.whatif.command import main_whatif
    from analyze.tools.whatif.render import render_per_batch

    counts = PB.batch_counts([str(L64)])
    few = {int(b): int(n) for b, n in counts.items() if b >= 1 and n < PB.MIN_CYCLES}
    assert few and all(n < PB.MIN_CYCLES for n in few.values())
    t = PB.per_batch([str(L64)], range(1, 7), n_boot=0)
    assert t.attrs["not_modelled"] == few and not set(few) & set(t["batch"])
    text = " ".join(render_per_batch(t).split())
    assert "Not modelled (fewer than 20 decode cycles each): " + ", ".join(
        f"batch {b} ({n})" for b, n in sorted(few.items())) in text
    out = tmp_path / "pb.json"
    assert main_whatif([str(L64), "--per-batch", "--steps", "1..6", "--boot", "0", "--json", str(out), "-q"]) == 0
    assert {int(k): v for k, v in json.loads(out.read_text())["not_modelled"].items()} == few


@need
def test_per_batch_json_holds_every_step_counts_prediction_per_batch_size(tmp_path):
    """Tokens/s per (batch size, step count) with intervals, in the JSON: the same figures whatif --batch B
    prints for each batch size, the best row of each the table's."""
    from analyze.tools.whatif import model as W
    from analyze.tools.whatif.command import main_whatif

    out = tmp_path / "pb.json"
    assert main_whatif([str(L64), "--per-batch", "--steps", "1..6", "--boot", "30", "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    grid = {int(b): rows for b, rows in doc["predictions"].items()}
    assert sorted(grid) == [r["batch"] for r in doc["per_batch"]] == [1, 16]
    for row in doc["per_batch"]:
        preds = {p["steps"]: p for p in grid[row["batch"]]}
        assert sorted(preds) == [1, 2, 3, 4, 5, 6]
        assert all(p["tokens_per_s_lo"] <= p["tokens_per_s"] <= p["tokens_per_s_hi"] for p in preds.values())
        assert preds[row["best_steps"]]["tokens_per_s"] == pytest.approx(row["tokens_per_s_best"])
        one = W.whatif(str(L64), range(1, 7), batch=row["batch"], n_boot=0)
        assert [p["tokens_per_s"] for _, p in sorted(preds.items())] == \
            pytest.approx(one["predictions"]["tokens_per_s"].tolist())


def test_the_modelled_batch_of_one_batch_size_and_its_ramps():
    """per_batch.modelled_batch without the real fixtures: several visited sizes -> the one of most cycles; one
    visited size whose ramps hold 10%+ of the cycles -> that size; one with fewer ramps, none visited, or a whole
    run's figure given -> None (pooled); ramp_share is 0 where nothing is visited."""
    import pandas as pd

    two = pd.Series({1: 300, 16: 100})
    assert PB.modelled_batch(two, None, None, None, 400) == 1
    one = pd.Series({16: 390})
    assert PB.ramp_share(one, 479) == pytest.approx(89 / 479)
    assert PB.modelled_batch(one, None, None, None, 479) == 16
    assert PB.modelled_batch(one, None, None, None, 420) is None             # 7% ramps
    assert PB.modelled_batch(one, None, 2000.0, None, 479) is None           # a whole run's figure: pooled
    assert PB.modelled_batch(one, 4, None, None, 479) == 4                   # given
    none = pd.Series(dtype="int64")
    assert PB.ramp_share(none, 9) == 0 and PB.modelled_batch(none, None, None, None, 9) is None


def test_given_figures_not_used_are_said_even_with_no_row():
    """The text of --per-batch lists figures given for sizes it did not model, with why, also where it modelled
    none (the table empty)."""
    import pandas as pd

    from analyze.tools.whatif.per_batch import COLUMNS
    from analyze.tools.whatif.render import render_per_batch

    table = pd.DataFrame(columns=list(COLUMNS))
    table.attrs.update(not_modelled={8: 9}, few_timed={15: [136, 3]},
                       unused_figures={8: ["--batch-tps", "--batch-baseline-tps"], 15: ["--batch-tps"],
                                       64: ["--batch-baseline-tps"]})
    text = " ".join(render_per_batch(table).split())
    assert ("Given but not used: --batch-tps and --batch-baseline-tps at batch 8 (9 decode cycles, not modelled); "
            "--batch-tps at batch 15 (136 cycles, 3 timed, not modelled); --batch-baseline-tps at batch 64 (no decode "
            "cycle of that batch size).") in text
