"""diff: exact deltas on synthetic traces with a known change, bootstrap intervals, kernel matching,
JSON inputs, the command line; the real before/after pair when it is present."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.render.outputs import to_json_dict, write_json
from analyze.timeline.cycles import steady
from analyze.tools import sides
from analyze.tools.diff import model as D
from helpers import cli_process

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
DELAY = 50_000
LAYER_NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>" \
             "(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)"


def _spec(**kw):
    from fixtures.synth import TraceSpec

    base = dict(ranks=2, cycles=12, jitter=0, second_thread_ranges=False, accept_lengths=[[1, 2, 3, 0] * 3] * 2)
    base.update(kw)
    return TraceSpec(**base)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Before; after = rank 0's first verify kernel 50 us longer in every cycle (a slow kernel)."""
    from fixtures.synth import write_trace

    pb, tb = write_trace(_spec(), tmp_path_factory.mktemp("before"))
    pa, ta = write_trace(_spec(straggler={0: {"cycle": None, "phase": "verify", "delay_ns": DELAY}}),
                         tmp_path_factory.mktemp("after"))
    return analyze.load(pb), analyze.load(pa), tb, ta


def _truth_mean(truth, rank, phase):
    cyc = truth["ranks"][rank]["cycles"][1:]        # the first cycle is warm-up (timeline.cycles.steady)
    return np.mean([c["phase_ns"][phase] if phase in c["phase_ns"] else c[f"{phase}_ns"] for c in cyc])


def test_exact_deltas_in_the_right_phase_and_rank(pair):
    before, after, tb, ta = pair
    d = D.diff_results(before, after, n_boot=500)
    s = d["summary"].set_index(["rank", "figure"])
    for rank in (0, 1):
        for phase in ("draft", "verify", "draft_extend", "allreduce", "other"):
            want = _truth_mean(ta, rank, phase) - _truth_mean(tb, rank, phase)
            row = s.loc[(str(rank), f"{phase}_ns")]
            assert row["delta"] == pytest.approx(want, abs=1e-6), (rank, phase)
            assert row["before"] == pytest.approx(_truth_mean(tb, rank, phase))
    # the slow kernel is rank 0's verify; rank 1 waits for it inside the all-reduce
    assert s.loc[("0", "verify_ns"), "delta"] == pytest.approx(DELAY)
    assert s.loc[("0", "verify_ns"), "significant"]
    assert s.loc[("1", "allreduce_ns"), "delta"] > 0.5 * DELAY
    assert s.loc[("1", "allreduce_ns"), "significant"]
    assert s.loc[("1", "verify_ns"), "delta"] == pytest.approx(0.0)
    assert not s.loc[("0", "draft_ns"), "significant"]
    # cycle time: the mean periods' difference, the same on both ranks' average
    for rank in ("0", "1"):
        r = int(rank)
        want = (steady(after.cycles).query("rank == @r")["period_ns"].mean()
                - steady(before.cycles).query("rank == @r")["period_ns"].mean())
        assert s.loc[(rank, "cycle_ns"), "delta"] == pytest.approx(want)
    # all ranks: per cycle mean over ranks
    assert s.loc[("all", "verify_ns"), "delta"] == pytest.approx(DELAY / 2)
    # tokens did not change; tokens/s fell with the longer cycle
    assert s.loc[("all", "tokens"), "delta"] == 0
    # same seeded acceptance on both sides: paired bootstrap, the tokens delta has a zero-width interval
    assert (s.loc[("all", "tokens"), "ci_lo"], s.loc[("all", "tokens"), "ci_hi"]) == (0, 0)
    assert any("paired" in n for n in d["notes"])
    assert s.loc[("0", "tokens_per_s"), "significant"]
    kept = steady(before.cycles).query("rank == 0")         # 11 steady cycles
    tps_b = kept["tokens"].astype(float).mean() * 1e9 / kept["period_ns"].mean()
    assert s.loc[("0", "tokens_per_s"), "before"] == pytest.approx(tps_b)
    assert s.loc[("0", "tokens_per_s"), "delta"] < 0


def test_kernel_deltas(pair):
    before, after, _, _ = pair
    k = D.diff_results(before, after, n_boot=10)["kernels"].set_index(["phase", "kernel"])
    ln = D.normalize_kernel(LAYER_NORM)
    assert ln == "at::native::anon::vectorized_layer_norm_kernel"
    # 50 us once per cycle on one of two ranks: +25 us per cycle per rank
    assert k.loc[("verify", ln), "delta_ns"] == pytest.approx(DELAY / 2)
    assert k.loc[("verify", ln), "status"] == "changed"
    top = D.diff_results(before, after, n_boot=10)["kernels"].iloc[0]
    assert (top["phase"], top["kernel"]) in {("verify", ln), ("allreduce", "ncclDevKernel_AllReduce_Sum_bf16")}


def test_new_and_vanished_kernels():
    """NCCL RING -> TREE matches as one kernel; a kernel only on one side is new / vanished."""
    cyc = pd.DataFrame({"rank": [0, 0], "cycle": [0, 1], "duration_ns": [100, 100]})
    kb = pd.DataFrame({"rank": 0, "phase": ["allreduce", "draft"], "instances": [2, 2], "total_ns": [1000, 400],
                       "name": ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "void foo<int>(int)"]})
    ka = pd.DataFrame({"rank": 0, "phase": ["allreduce", "verify"], "instances": [2, 2], "total_ns": [600, 300],
                       "name": ["ncclDevKernel_AllReduce_Sum_bf16_TREE_LL128", "triton_poi_fused_add_3"]})
    b = sides.Side("b", cyc, kb, ["draft", "verify", "allreduce"])
    a = sides.Side("a", cyc, ka, ["draft", "verify", "allreduce"])
    k = D.kernel_diff(b, a).set_index(["phase", "kernel"])
    row = k.loc[("allreduce", "ncclDevKernel_AllReduce_Sum_bf16")]
    assert (row["before_ns"], row["after_ns"], row["delta_ns"], row["status"]) == (500, 300, -200, "changed")
    assert row["names_after"] == ["ncclDevKernel_AllReduce_Sum_bf16_TREE_LL128"]
    assert k.loc[("draft", "foo"), "status"] == "vanished"
    assert k.loc[("verify", "triton_poi_fused_add"), "status"] == "new"
    assert k.loc[("verify", "triton_poi_fused_add"), "after_ns"] == 150


@pytest.mark.parametrize("name,want", [
    ("void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm<(int)128>>(T1::Params)", "cutlass::Kernel2"),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_SIMPLE", "ncclDevKernel_AllReduce_Sum_bf16"),
    ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT", "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128>, (bool)0>(Flash_fwd_params)",
     "flash::flash_fwd_splitkv_kernel"),
    ("[CUDA memcpy Device-to-Host]", "[CUDA memcpy Device-to-Host]"),
    ("[CUDA graph 3]", "[CUDA graph]"),
])
def test_normalize_kernel(name, want):
    assert D.normalize_kernel(name) == want


def test_noise_is_not_a_win(tmp_path):
    """Same configuration, 5% jitter, different seeds: nothing moved significantly, and the bootstrap
    is reproducible."""
    from fixtures.synth import write_trace

    pb, _ = write_trace(_spec(ranks=1, cycles=40, jitter=0.05, seed=1, accept_lengths=[[2] * 40]), tmp_path / "b")
    pa, _ = write_trace(_spec(ranks=1, cycles=40, jitter=0.05, seed=2, accept_lengths=[[2] * 40]), tmp_path / "a")
    b, a = analyze.load(pb), analyze.load(pa)
    d1 = D.diff_results(b, a, n_boot=1000, seed=7)
    d2 = D.diff_results(b, a, n_boot=1000, seed=7)
    pd.testing.assert_frame_equal(d1["summary"], d2["summary"])
    s = d1["summary"].set_index(["rank", "figure"])
    for fig in ("cycle_ns", "draft_ns", "verify_ns", "tokens_per_s"):
        row = s.loc[("all", fig)]
        assert row["ci_lo"] <= row["delta"] <= row["ci_hi"]
        assert abs(row["delta"]) < 0.05 * row["before"], fig
    # self-diff: zero deltas, none significant
    z = D.diff_results(b, b, n_boot=200)["summary"]
    assert (z["delta"] == 0).all() and not z["significant"].any()


def test_json_inputs_equal_reports(pair, tmp_path):
    before, after, _, _ = pair
    direct = D.diff_results(before, after, n_boot=300)
    jb, ja = tmp_path / "b.json", tmp_path / "a.json"
    write_json(before, jb)
    write_json(after, ja)
    via = D.diff_results(sides.load_side(jb), sides.load_side(ja), n_boot=300)
    pd.testing.assert_frame_equal(direct["summary"], via["summary"], check_dtype=False)
    cols = ["phase", "kernel", "before_ns", "after_ns", "delta_ns", "status"]
    pd.testing.assert_frame_equal(direct["kernels"][cols].reset_index(drop=True),
                                  via["kernels"][cols].reset_index(drop=True))
    # an in-memory JSON dict works too
    again = D.diff_results(to_json_dict(before), to_json_dict(after), n_boot=300)
    pd.testing.assert_frame_equal(direct["summary"], again["summary"], check_dtype=False)


def test_cli_diff(pair, tmp_path):
    before, after, _, _ = pair
    jb, ja = tmp_path / "b.json", tmp_path / "a.json"
    write_json(before, jb)
    write_json(after, ja)
    out, png = tmp_path / "d.json", tmp_path / "d.png"
    proc = cli_process.run(["diff", str(jb), str(ja), "--json", str(out), "--plot", str(png), "--boot", "300"],
                           cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 120
    assert any(line.startswith("verify (us)") and line.rstrip().endswith("*") for line in lines)
    data = json.loads(out.read_text())
    row = next(r for r in data["summary"] if r["rank"] == "0" and r["figure"] == "verify_ns")
    assert row["delta"] == pytest.approx(DELAY) and row["significant"] is True
    assert png.stat().st_size > 10_000
    bad = cli_process.run(["diff", str(jb), str(tmp_path / "missing.sqlite")], cwd=ROOT)
    assert bad.returncode not in (0, 1) and len(bad.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------- real H200 pair
need_real = pytest.mark.skipif(not (REAL / "h200_diff_before.sqlite").exists()
                               or not (REAL / "h200_diff_after.sqlite").exists(),
                               reason="real H200 before/after pair not recorded yet")


@need_real
def test_real_diff_moves_the_changed_phase():
    d = D.diff_results(REAL / "h200_diff_before.sqlite", REAL / "h200_diff_after.sqlite")
    s = d["summary"]
    s = s[(s["rank"] == "all") & s["figure"].str.endswith("_ns") & (s["figure"] != "cycle_ns")
          & (s["figure"] != "gap_ns")]
    moved = s.loc[s["delta"].abs().idxmax()]
    assert moved["significant"]
    # the two recordings differ in the target model's depth (4 -> 8 layers): the verify pass moves
    assert moved["figure"] == "verify_ns"
    assert moved["delta"] > 0


@need_real
def test_tokens_per_s_are_shown_whole():
    """tokens/s to the token (a newcomer read 21,903.46 as false precision: runs differ by percents), the other
    figures as before."""
    from analyze.tools.diff.render import render_diff

    text = render_diff(D.diff_results(REAL / "h200_diff_before.sqlite", REAL / "h200_diff_after.sqlite"), width=120)
    assert "tokens / s         21,903   17,454  -4,449   -20.3%  [-5,341, -3,596]  *" in text
    assert "tokens / cycle      20.33    20.33    0.00    +0.0%      [0.00, 0.00]" in text


def test_side_of_a_chunked_analysis_has_the_kernels_of_the_whole(monkeypatch):
    """A report analysed in chunks (no per-op table, e.g. when it would not fit in memory) gives diff the
    kernel list of the whole analysis: the kernels inside decode cycles, from its spilled op store
    (until 2026-12-05: every op of the report, set-up included, with a note)."""
    from analyze import memory

    import analyze

    path = REAL / "h200_diff_after.sqlite"
    whole = sides.load_side(path)
    n_ops = len(analyze.load(str(path)).gpu_ops)
    monkeypatch.setattr(memory, "available_bytes", lambda: 1)
    side = sides.load_side(path)
    # the rows whatif reads (the lowest rank's draft ops and attention kernels, each cycle's first op),
    # from the op store alike whichever way the report was analysed; not the per-op table
    pd.testing.assert_frame_equal(side.gpu_ops, whole.gpu_ops)
    assert len(side.gpu_ops) < n_ops / 2 and len(side.kernels) > 0
    assert not any("no per-op table" in n for n in side.notes)
    key = ["rank", "phase", "name"]
    pd.testing.assert_frame_equal(side.kernels.sort_values(key).reset_index(drop=True),
                                  whole.kernels.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert int(side.kernels["instances"].sum()) < n_ops


def test_notes_are_wrapped_to_the_terminal_never_cut():
    """Each note whole, in lines within the width (it was cut at 120 characters with '…')."""
    from analyze.tools.diff.render import render_diff

    d = D.diff_results(REAL / "h200_diff_before.sqlite", REAL / "h200_diff_after.sqlite")
    assert d["notes"] and max(len(str(n)) for n in d["notes"]) > 60
    for width in (60, 300):
        text = render_diff(d, width=width)
        tail = text[text.index("note: "):]
        lines = tail.splitlines()
        assert all(len(line) <= width for line in lines) and "…" not in tail
        assert " ".join(" ".join(lines).split()) == " ".join(" ".join(f"note: {n}" for n in d["notes"]).split())


def test_diff_of_saved_json_results_lists_the_same_kernels_as_of_the_reports(tmp_path):
    """Saved --json results carry the kernels inside decode cycles (cycle_kernels): the diff of two
    results listed 'other [CUDA memcpy] 22,206.70 -> 35,012.02 us per cycle' in a ~1,000 us cycle (the
    whole report's ops, set-up included, divided by the cycles); now it equals the reports' diff."""
    import analyze
    from analyze.render.outputs import write_json
    from analyze.tools.diff.model import diff_results

    real = Path(__file__).resolve().parents[1] / "fixtures" / "real"
    paths = [real / f"h200_diff_{s}.sqlite" for s in ("before", "after")]
    if not all(p.exists() for p in paths):
        pytest.skip("fixtures not unpacked")
    results = [analyze.load(str(p)) for p in paths]
    jsons = []
    for p, a in zip(paths, results):
        out = tmp_path / (p.stem + ".json")
        write_json(a, str(out))
        jsons.append(str(out))
    from_reports = diff_results(*results)["kernels"]
    from_json = diff_results(*jsons)["kernels"]
    cols = ["phase", "kernel", "before_ns", "after_ns"]
    assert from_json[cols].reset_index(drop=True).equals(from_reports[cols].reset_index(drop=True))
    cycle = 1_300_000                               # both runs' cycles are ~1.0-1.2 ms
    per_cycle = [c for c in from_json.columns if c.endswith("_ns") and "delta" not in c]
    assert (from_json[per_cycle].abs().to_numpy() < cycle).all()


def test_timed_carried_scales_the_timed_split_and_drops_cycles_only_some_ranks_timed():
    """A sampled live log's per-cycle frame (sides.per_cycle): phases null where the cycle was not timed; the flag
    False also where only some ranks timed it (a mean over those ranks, no cycle's split): those phases are left
    out too, the rest x mean period of all / mean period of the timed, the flag dropped. Every cycle timed: unchanged
    but the flag."""
    from analyze.tools.diff.model import timed_carried

    f = pd.DataFrame({"cycle": [0, 1, 2, 3], "period_ns": [1100.0, 1000.0, 900.0, 1000.0],
                      "draft_ns": [110.0, np.nan, 90.0, np.nan], "tokens": [2.0, 2.0, 2.0, 2.0],
                      "timed": [True, False, False, False]})       # cycle 2: timed by one rank of two
    out = timed_carried(f, "period_ns")
    assert "timed" not in out.columns and np.isnan(out.loc[2, "draft_ns"])
    assert out.loc[0, "draft_ns"] == pytest.approx(110.0 * 1000.0 / 1100.0)
    assert out["period_ns"].tolist() == f["period_ns"].tolist() and out["tokens"].tolist() == [2.0] * 4
    every = timed_carried(f.assign(timed=True, draft_ns=[110.0, 100.0, 90.0, 100.0]), "period_ns")
    assert every["draft_ns"].tolist() == [110.0, 100.0, 90.0, 100.0] and "timed" not in every.columns
