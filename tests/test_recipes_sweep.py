"""recipes/sglang_sweep.py on the CPU: the sglang.Engine kwargs of a fixed step count, of SGLang's default
adaptive config and of an adaptive config file (what the H200 run will be given), the measuring loop
against a stand-in Engine, and the merged sweep.json read by the repo's own reader (whatif --measured)
with the adaptive engines kept apart. SGLang 0.5.17's adaptive parser (from the bundle in
../shared/sglang-h200) is the reference for the config checks."""
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from analyze.tools.whatif.command import read_measured, sweep_tokens_per_s
from helpers.per_batch_table import per_batch_table

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sglang_sweep.py"
BUNDLE = ROOT.parent / "shared" / "sglang-h200" / "h200_bundle_sglang0.5.17.tar.xz"
need_bundle = pytest.mark.skipif(not BUNDLE.exists(), reason="SGLang bundle (../shared/sglang-h200) not present")


def recipe():
    spec = importlib.util.spec_from_file_location("sglang_sweep_recipe", RECIPE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def kwargs(*argv):
    m = recipe()
    a = m.parse_args(["/tmp/tiny_v2_l64", "--vocab", "2", "--out", "unused.json", *argv])
    return m.engine_kwargs(a, [int(b) for b in a.batches.split(",")])


BASE = {"model_path": "/tmp/tiny_v2_l64/target", "load_format": "dummy", "skip_tokenizer_init": True,
        "attention_backend": "triton", "sampling_backend": "pytorch", "grammar_backend": "none",
        "mem_fraction_static": 0.5, "tp_size": 1, "max_running_requests": 64,
        "cuda_graph_bs_decode": [1, 2, 4, 8, 16, 32, 64], "log_level": "warning", "random_seed": 0}
SPEC = {"speculative_algorithm": "EAGLE3", "speculative_draft_model_path": "/tmp/tiny_v2_l64/eagle3",
        "speculative_eagle_topk": 1}


def specprof_config(path):
    """A config as `analyze-trace whatif --per-batch --adaptive-config` writes it (per_batch.adaptive_config)."""
    from analyze.tools.whatif import per_batch as PB

    t = per_batch_table(batch=[1, 4, 16, 64], cycles=[300, 200, 90, 40], best_steps=[5, 4, 2, 1],
                        tokens_per_s_best=[340.0, 1300.0, 5200.0, 15000.0], tokens_per_s_profiled=[330.0] * 4,
                        tokens_per_s_baseline=[300.0, 1200.0, 4800.0, 16000.0], speedup=[1.13, 1.08, 1.08, 0.94],
                        best_or_off=[5, 4, 2, 0])
    path.write_text(json.dumps(PB.adaptive_config(t)))
    return path


def test_fixed_step_kwargs():
    kw, adaptive = kwargs("--steps", "3")
    assert adaptive is None
    assert kw == {**BASE, **SPEC, "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
    kw, adaptive = kwargs("--steps", "0")
    assert kw == BASE and adaptive is None          # no speculation: no speculative_* at all
    kw, _ = kwargs("--steps", "2", "--graph-bs", "1,4,16,64", "--batches", "1,16")
    assert kw["cuda_graph_bs_decode"] == [1, 4, 16, 64] and kw["max_running_requests"] == 16
    kw, _ = kwargs("--steps", "3", "--graph-bs", "none")        # eager: SGLang's --disable-cuda-graph
    assert kw["disable_cuda_graph"] is True and "cuda_graph_bs_decode" not in kw


def test_adaptive_default_kwargs():
    m = recipe()
    kw, adaptive = kwargs("--adaptive", "default", "--log-level", "info")
    # the largest candidate of SGLang's default config (union [0, 1, 3, 7]) is the start
    assert kw == {**BASE, **SPEC, "log_level": "info", "speculative_num_steps": 7, "speculative_num_draft_tokens": 8,
                  "speculative_adaptive": True}
    assert adaptive == {"mode": "default", "config_path": None, "config": m.DEFAULT_ADAPTIVE_CONFIG,
                        "candidate_steps": [0, 1, 3, 7], "start_steps": 7}
    kw, adaptive = kwargs("--adaptive", "default", "--steps", "3")
    assert kw["speculative_num_steps"] == 3 and kw["speculative_num_draft_tokens"] == 4
    assert adaptive["start_steps"] == 3
    with pytest.raises(ValueError, match=r"not in the adaptive config's candidate_steps \[0, 1, 3, 7\]"):
        kwargs("--adaptive", "default", "--steps", "4")
    with pytest.raises(SystemExit):                   # 0: SGLang would report no spec_verify_ct
        kwargs("--adaptive", "default", "--steps", "0")


def test_adaptive_file_kwargs(tmp_path):
    cfg = specprof_config(tmp_path / "v2_l64.json")
    kw, adaptive = kwargs("--adaptive", str(cfg))
    assert kw == {**BASE, **SPEC, "speculative_num_steps": 5, "speculative_num_draft_tokens": 6,
                  "speculative_adaptive": True, "speculative_adaptive_config": str(cfg.resolve())}
    assert adaptive["mode"] == "file" and adaptive["config_path"] == str(cfg.resolve())
    assert adaptive["config"] == json.loads(cfg.read_text())       # the content, recorded
    assert adaptive["candidate_steps"] == [1, 2, 4, 5] and adaptive["start_steps"] == 5
    assert kwargs("--adaptive", str(cfg), "--steps", "2")[0]["speculative_num_steps"] == 2
    with pytest.raises(ValueError, match="not in"):
        kwargs("--adaptive", str(cfg), "--steps", "3")
    bad = tmp_path / "bad.json"
    for text in ('{"note": 1}', '{"1": {"candidate_steps": []}}', '{"1": {"candidate_steps": [1, -1]}}'):
        bad.write_text(text)
        with pytest.raises(ValueError, match="adaptive config"):
            kwargs("--adaptive", str(bad))


def test_argument_errors():
    m = recipe()
    with pytest.raises(SystemExit):
        m.parse_args(["/tmp/t", "--vocab", "2", "--out", "x.json"])          # --steps needed without --adaptive
    a = m.parse_args(["/tmp/t", "--vocab", "2", "--adaptive", "default", "--out", "x.json"])
    assert a.steps is None
    assert m.parse_args(["--merge", "d", "o.json"]).merge == ["d", "o.json"]


@need_bundle
def test_configs_agree_with_sglangs_own_parser(tmp_path):
    from tests.test_whatif_per_batch import _sglang_adaptive_module

    sg = _sglang_adaptive_module()
    m = recipe()
    assert m.DEFAULT_ADAPTIVE_CONFIG == sg.DEFAULT_ADAPTIVE_CONFIG
    assert m.candidate_steps(m.DEFAULT_ADAPTIVE_CONFIG) == sg.resolve_candidate_steps_from_config(None)
    cfg = specprof_config(tmp_path / "c.json")
    assert kwargs("--adaptive", str(cfg))[1]["candidate_steps"] == sg.resolve_candidate_steps_from_config(str(cfg))
    # SGLang's routing of the measured batch sizes with the sweep's CUDA-graph sizes: the default config
    # starts at 7 in bucket 1 (batches 1, 4), the middle candidate elsewhere; the file pins each bucket
    for path, want in ((None, [7, 7, 1, 0]), (str(cfg), [5, 4, 2, 1])):
        params = sg.AdaptiveSpeculativeParams(initial_steps=max(sg.resolve_candidate_steps_from_config(path)),
                                              cfg_path=path)
        params.set_cuda_graph_bs([1, 2, 4, 8, 16, 32, 64])
        assert [params.get_steps_for_batch(b) for b in (1, 4, 16, 64)] == want


def test_dry_run_prints_the_kwargs_without_sglang(tmp_path):
    poison = tmp_path / "poison"
    (poison / "sglang").mkdir(parents=True)
    (poison / "sglang" / "__init__.py").write_text("raise ImportError('sglang imported by a dry run')\n")
    cfg = specprof_config(tmp_path / "c.json")
    for argv, steps in ((["--steps", "3"], 3), (["--adaptive", "default"], 7), (["--adaptive", str(cfg)], 5)):
        out = subprocess.run([sys.executable, str(RECIPE), "/tmp/tiny_v2_l64", "--vocab", "2", *argv, "--dry-run"],
                             capture_output=True, text=True, env={"PYTHONPATH": str(poison), "PATH": "/usr/bin:/bin"},
                             check=True).stdout
        d = json.loads(out)
        assert d["engine_args"]["speculative_num_steps"] == steps
        assert d["engine_args"].get("speculative_adaptive", False) == ("--adaptive" in argv)


class FakeEngine:
    """sglang.Engine stand-in: each request finishes its max_new_tokens in cycles of `acc` tokens."""
    acc = 2.0

    def __init__(self, **kw):
        self.kw = kw

    def generate(self, input_ids, sampling_params):
        n = sampling_params["max_new_tokens"]
        spec = "speculative_algorithm" in self.kw
        meta = {"completion_tokens": n}
        if spec:
            meta.update(spec_verify_ct=int(n / self.acc), spec_correct_drafts_histogram=[1, 2, int(n / self.acc) - 3])
        return [{"meta_info": dict(meta)} for _ in input_ids]

    def shutdown(self):
        pass


def run_recipe(monkeypatch, tmp_path, capsys, name, *argv):
    fake = types.ModuleType("sglang")
    fake.Engine, fake.__version__ = FakeEngine, "0.5.17-fake"
    monkeypatch.setitem(sys.modules, "sglang", fake)
    out = tmp_path / "w" / f"{name}.json"
    out.parent.mkdir(exist_ok=True)
    recipe().main(["/tmp/tiny_v2_l64", "--vocab", "2", "--batches", "1,4", "--min-new", "128",
                   "--tokens-per-round", "512", "--min-round-s", "0", *argv, "--out", str(out)])
    log = capsys.readouterr()
    (out.parent / f"{name}.log").write_text(log.out + log.err)
    return json.loads(out.read_text())


def test_measuring_loop_and_merged_sweep(monkeypatch, tmp_path, capsys):
    r0 = run_recipe(monkeypatch, tmp_path, capsys, "v2_l64_s0", "--steps", "0")
    r3 = run_recipe(monkeypatch, tmp_path, capsys, "v2_l64_s3", "--steps", "3")
    ra = run_recipe(monkeypatch, tmp_path, capsys, "v2_l64_adefault_sauto", "--adaptive", "default")
    assert r0["adaptive"] is None and r0["batches"][0]["tokens_per_request_cycle"] is None
    assert r3["steps"] == 3 and r3["batches"][0]["tokens_per_request_cycle"] == pytest.approx(2.0)
    assert r3["batches"][1]["rounds"][0]["spec_correct_drafts_histogram"] == [4, 8, 4 * (64 - 3)]
    assert ra["steps"] == 7 and ra["adaptive"]["candidate_steps"] == [0, 1, 3, 7]
    assert ra["engine_args"]["speculative_adaptive"] is True
    # SGLang's switch log lines (info level, from the scheduler) land between the recipe's batch marks
    log = tmp_path / "w" / "v2_l64_adefault_sauto.log"
    text = log.read_text().replace(
        "sweep: batch 4 begin",
        "[2026-12-05 10:00:01 TP0] Adaptive spec params updated: steps 7 -> 3 (ema_accept_len=0.95)\n"
        "sweep: batch 4 begin\n[2026-12-05 10:00:02 TP0] Adaptive spec params updated: steps 3 -> 1 "
        "(ema_accept_len=0.40)")
    log.write_text(text)
    doc = recipe().merge(str(tmp_path / "w"), str(tmp_path / "sweep.json"))
    assert [r["steps"] for r in doc["runs"]] == [0, 3] and len(doc["adaptive_runs"]) == 1
    a = doc["adaptive_runs"][0]
    assert [b["adaptive_switches"] for b in a["batches"]] == [[[7, 3]], [[3, 1]]]
    # the repo's reader: the fixed engines only
    assert read_measured(tmp_path / "sweep.json", 1) == ({3: r3["batches"][0]["tokens_per_s"]},
                                                         r0["batches"][0]["tokens_per_s"])
    # and the tests' own reading of a sweep (tests/test_whatif_sglang_real.py::truth) still works
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert {(r["steps"], b["batch"]) for r in data["runs"] for b in r["batches"]} == {(0, 1), (0, 4), (3, 1), (3, 4)}
    lines = recipe().summary_lines(doc)
    assert len(lines) == 6 and "adaptive default (start 7)" in lines[-1] and "switches [[3, 1]]" in lines[-1]
    want = ",".join(f"{b['batch']}={b['tokens_per_s']:.1f}" for b in r0["batches"])
    assert recipe().whatif_args(doc, 3, max_spread=float("inf")).startswith(f"--batch-baseline-tps {want} --batch-tps 1=")
    assert recipe().whatif_args(doc, 3, max_spread=-1) == f"--batch-baseline-tps {want}"
    table = recipe().compare([doc])
    assert len(table) == 2 and table[0].startswith("batch   1: 0:") and "best fixed" in table[0]
    assert "| default " in table[1] and "switches [[3, 1]]" in table[1]


def test_reader_leaves_adaptive_runs_out():
    data = {"runs": [{"steps": 0, "batches": [{"batch": 1, "tokens_per_s": 100.0}]},
                     {"steps": 3, "batches": [{"batch": 1, "tokens_per_s": 120.0}]},
                     {"steps": 7, "adaptive": {"mode": "default"}, "batches": [{"batch": 1, "tokens_per_s": 999.0}]}]}
    assert sweep_tokens_per_s(data, 1) == ({3: 120.0}, 100.0)


@pytest.mark.parametrize("script", ["sglang_sweep.sh", "sglang_profiles.sh", "sglang_env.sh", "device_tree.sh"])
def test_recipe_scripts_parse(script):
    subprocess.run(["bash", "-n", str(ROOT / "recipes" / script)], check=True)


def test_short_rounds_repeat_their_requests(monkeypatch, tmp_path, capsys):
    """A round shorter than --min-round-s (measured on the first) repeats the same requests back to back
    until it is not: each request's context stays the profile's, the timing window grows (at batch 16 on
    the H200 a round of 4,096 tokens lasted under a second and one slow step moved it 10-40%)."""
    rec = recipe()
    clock = types.SimpleNamespace(t=0.0)

    class TimedEngine(FakeEngine):
        def generate(self, input_ids, sampling_params):
            clock.t += 0.4 if sampling_params["max_new_tokens"] != 64 else 0.0     # warm-up: free
            return super().generate(input_ids, sampling_params)

    fake = types.ModuleType("sglang")
    fake.Engine, fake.__version__ = TimedEngine, "0.5.17-fake"
    monkeypatch.setitem(sys.modules, "sglang", fake)
    monkeypatch.setattr(rec, "time", types.SimpleNamespace(time=lambda: clock.t, perf_counter=lambda: clock.t))
    out = tmp_path / "r.json"
    rec.main(["/tmp/tiny_v2_l64", "--vocab", "2", "--batches", "4", "--tokens-per-round", "512", "--steps", "3",
              "--min-round-s", "1.0", "--out", str(out)])
    row = json.loads(out.read_text())["batches"][0]
    assert row["round_repeats"] == 3 and len(row["rounds"]) == 3        # the sizing round is not kept
    assert [r["seconds"] for r in row["rounds"]] == pytest.approx([1.2, 1.2, 1.2])
    assert row["rounds"][0]["tokens"] == 3 * 4 * 128 and row["new_tokens"] == 128
    assert rec.round_repeats(5.0, 3.0) == 1 and rec.round_repeats(0.7, 3.0) == 5
    assert rec.round_repeats(0.0, 3.0) == rec.MAX_ROUND_REPEATS


def test_alternating_timing_rounds_and_their_overhead(tmp_path, monkeypatch):
    """--alternate-timing: even rounds with the timing on (the pause file removed), odd rounds paused (made);
    the row's overhead is 1 - median(on) / median(paused), and each on round over the paused one after it."""
    m = recipe()
    monkeypatch.setattr(m.time, "sleep", lambda s: None)
    pause = tmp_path / "pause"
    assert m.set_timing(None, 0) is None and not pause.exists()
    assert m.set_timing(str(pause), 0) is True and not pause.exists()
    assert m.set_timing(str(pause), 1) is False and pause.exists()
    assert m.set_timing(str(pause), 2) is True and not pause.exists()
    rounds = [{"tokens_per_s": x, "timing": i % 2 == 0} for i, x in enumerate([99.0, 100.0, 98.0, 100.0, 97.0, 101.0])]
    got = m.timing_overhead(rounds)
    assert got["tokens_per_s_timing_on"] == 98.0 and got["tokens_per_s_timing_paused"] == 100.0
    assert got["timing_overhead"] == pytest.approx(0.02)
    assert got["timing_pair_ratios"] == pytest.approx([0.99, 0.98, 97 / 101])
    a = m.parse_args(["/tmp/t", "--vocab", "2", "--steps", "3", "--out", "o.json", "--alternate-timing", str(pause)])
    assert a.alternate_timing == str(pause)
