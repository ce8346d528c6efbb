"""From a newcomer's run (2026-12-07): whether speculation pays, said in one word (whatif's ``best.verdict``, its Best
lines, advise's speculation rule); the figures given for one batch size joined with the profile's own clock for the
others; the plot's legend. What it found: a 1.01x read as a sure "pays"; a Best of 3 steps beside a higher 4-step row
with no word why; a figure given for batch 8 took the clock's calibration away from batches 1 and 32; a "95% CI" band
label under --boot 0."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from analyze.cli import main
from analyze.tools.whatif import model as W
from analyze.tools.whatif.command import read_measured
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PROFILE = REAL / "sglang_h100_v2_l48_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v2_l48.json"
need = pytest.mark.skipif(not (PROFILE.exists() and SWEEP.exists()), reason="fixture not unpacked")


def test_the_verdict_bands():
    assert W.BREAK_EVEN == 0.03
    assert W.verdict(1.0, False) == "break_even"
    assert W.verdict(1.029, False) == "break_even" and W.verdict(0.971, False) == "break_even"
    assert W.verdict(1.031, False) == "pays" and W.verdict(1.5, False) == "pays"
    assert W.verdict(0.969, False) == "does_not_pay" and W.verdict(0.5, False) == "does_not_pay"
    assert W.verdict(1.5, True) == "uncertain" and W.verdict(1.0, True) == "uncertain"
    assert W.verdict(math.nan, False) == "uncertain"


@pytest.fixture(scope="module")
def side():
    return shared_loads.load_side(PROFILE)


@need
@pytest.mark.parametrize("batch, steps, top, speedup, verdict", [
    (1, 4, 5, 1.079, "pays"),           # measured: best 3 steps 1.060x
    (8, 3, 4, 1.001, "break_even"),     # measured: 3 steps 1.000x, 4 steps 1.038x (engines 8% apart)
    (32, 3, 3, 0.910, "does_not_pay"),  # measured: best 4 steps 0.961x
])
def test_the_verdict_on_the_48_layer_sweep(side, batch, steps, top, speedup, verdict):
    """Calibrated at 3 steps with the sweep's unprofiled figures: the word for each batch size, and the highest
    prediction where the recommendation is fewer steps within 1% of it."""
    m, base = read_measured(SWEEP, batch)
    r = W.whatif(side, range(1, 7), n_boot=0, batch=batch, calibrate_tps=m[3], baseline_tps=base)
    b = r["best"]
    assert (b["steps"], b["top_steps"], b["verdict"]) == (steps, top, verdict)
    assert b["speedup"] == pytest.approx(speedup, abs=0.001)
    # the word is the highest prediction's: "does not pay" = no step count searched faster than no speculation
    assert b["top_speedup"] == pytest.approx(r["predictions"]["speedup"].max(), rel=1e-12)
    assert W.verdict(b["top_speedup"], False) == verdict


@need
def test_the_best_lines_say_why_fewer_steps_and_that_it_is_break_even(capsys):
    rc = main(["whatif", str(PROFILE), "--batch", "8", "--boot", "0", "--calibrate-tps", "3250",
               "--baseline-tps", "3210"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0
    assert "Best: 3 draft steps, 3,250 tokens/s, 1.01x over the baseline (3,210 tokens/s)" in out
    assert "(3 is the fewest steps within 1% of the highest prediction, 4 steps' 3,260 tokens/s" in out
    assert "Break-even: the highest prediction, 1.02x, is within 3% of no speculation" in out
    assert "Speculation pays" not in out and "Speculation does not pay" not in out


@need
def test_the_json_carries_the_verdict(tmp_path):
    out = tmp_path / "w.json"
    assert main(["whatif", str(PROFILE), "--batch", "32", "--boot", "0", "--calibrate-tps", "9890",
                 "--baseline-tps", "10868", "--json", str(out), "-q"]) == 0
    best = json.loads(out.read_text())["best"]
    assert best["verdict"] == "does_not_pay" and best["steps"] == 3 and best["top_steps"] == 3


@need
def test_advise_says_break_even_and_takes_whatifs_k_x(tmp_path, capsys):
    out = tmp_path / "a.json"
    assert main(["advise", str(PROFILE), "--batch", "8", "--calibrate-tps", "3:3250", "--baseline-tps", "3210",
                 "--json", str(out), "-q"]) == 0
    checks = {c["rule"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["speculation"]["status"] == "below_threshold"
    assert checks["speculation"]["reason"].startswith("break-even: 3 draft steps predicted at 3,250 tokens/s against "
                                                      "3,210 without speculation (given), 1.012x")
    assert main(["advise", str(PROFILE), "--batch", "8", "--calibrate-tps", "4:3250", "-q"]) == 10
    assert "measured at 4 steps, but the profile ran 3" in capsys.readouterr().err


@need
def test_a_figure_for_one_batch_size_keeps_the_clock_for_the_others(tmp_path):
    """--per-batch with --batch-tps 8=X: batch 8 from the figure, batches 1 and 32 still from the profile's own clock
    (as with no figure at all), and advise's per-batch finding the same."""
    plain, given = tmp_path / "plain.json", tmp_path / "given.json"
    assert main(["whatif", str(PROFILE), "--per-batch", "--boot", "0", "--json", str(plain), "-q"]) == 0
    assert main(["whatif", str(PROFILE), "--per-batch", "--boot", "0", "--batch-tps", "8=3250",
                 "--batch-baseline-tps", "8=3210", "--json", str(given), "-q"]) == 0
    rows = {name: {r["batch"]: r for r in json.loads(p.read_text())["per_batch"]}
            for name, p in (("plain", plain), ("given", given))}
    for b in (1, 32):
        assert rows["given"][b]["calibrated"] and rows["plain"][b]["calibrated"]
        assert rows["given"][b]["tokens_per_s_best"] == pytest.approx(rows["plain"][b]["tokens_per_s_best"], rel=1e-9)
    assert rows["given"][8]["calibrated"] and rows["given"][8]["tokens_per_s_best"] == pytest.approx(3250, rel=1e-6)
    assert rows["given"][8]["baseline_source"] == "given"


@need
@pytest.mark.parametrize("boot, band", [(0, False), (20, True)])
def test_the_plot_labels_a_confidence_band_only_where_there_is_one(side, tmp_path, monkeypatch, boot, band):
    """--boot 0 gives point estimates (the bounds equal them): the legend names no "95% CI"."""
    from matplotlib.figure import Figure

    from analyze.tools.whatif.render import plot_whatif

    labels = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: labels.extend(fig.axes[0].get_legend_handles_labels()[1]))
    plot_whatif(W.whatif(side, range(1, 7), n_boot=boot, batch=8), tmp_path / "w.png")
    assert "predicted" in labels and ("95% CI" in labels) is band


@need
def test_a_finding_that_saves_nothing_says_it_is_a_direction(capsys):
    """verify dominating at the predicted best step count: a finding with no setting that saves time by itself (saving
    0), said so in words rather than as "saves 0.0 us per cycle (0.0%)"."""
    assert main(["advise", str(PROFILE), "--batch", "8", "--no-evidence"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("2. verify dominates the cycle (74.2%, without the profiler): a direction, no setting that saves time by "
            "itself (saving 0 us per cycle); ceiling 3,204.8 us") in out
    assert "saves 0.0 us" not in out
    # the heading's cycle is host start to next start; it says the report's headline times another (GPU to GPU)
    assert ("(mean cycle 5,524.1 us over 805 cycles at batch 8, host start to next start, 1 warm-up left out; the "
            "report's headline and decode table time a cycle GPU start to next GPU start)") in out


@need
def test_the_calibration_line_says_what_its_steady_figure_is_in_rounds(capsys):
    """The clock's figure is of steady cycles; the profiled row is of the rounds modelled (round eff): the line gives
    both, so the 3,458 of the line and the 3,191 of the row are not read as a contradiction."""
    assert main(["whatif", str(PROFILE), "--batch", "8", "--boot", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("Calibrated to 3,458 tokens/s of steady cycles (the rounds' tail is the model's); 3,191 tokens/s in the "
            "rounds modelled (column round eff)") in out


@need
def test_per_batch_marks_a_break_even_and_does_not_call_it_not_paying(tmp_path, capsys):
    """A batch size whose best is within 3% of a measured baseline: '~' in the use column and a line that says so,
    not in not_paying (the adaptive config's 'slower with speculation at any step count' list)."""
    out = tmp_path / "pb.json"
    args = ["whatif", str(PROFILE), "--per-batch", "--boot", "0", "--batch-tps", "8=3250", "--batch-baseline-tps",
            "8=3320"]
    assert main(args + ["--json", str(out), "-q"]) == 0
    rows = {r["batch"]: r for r in json.loads(out.read_text())["per_batch"]}
    assert rows[8]["verdict"] == "break_even" and rows[8]["best_or_off"] == 0
    from analyze.tools.whatif.per_batch import not_paying
    import pandas as pd

    assert 8 not in not_paying(pd.DataFrame(list(rows.values())))
    assert main(args) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert " 0.98x off~ " in text and "'~': break-even: within 3% of no speculation at batch 8" in text


@need
def test_advise_keeps_the_clock_for_the_other_batch_sizes(tmp_path):
    """advise --batch 8 --calibrate-tps X: its per-batch rows at 1 and 32 stay calibrated from the profile's clock,
    as whatif --per-batch with --batch-tps 8=X does."""
    out = tmp_path / "a.json"
    assert main(["advise", str(PROFILE), "--batch", "8", "--calibrate-tps", "3250", "--json", str(out), "-q"]) == 0
    rows = {r["batch"]: r for r in json.loads(out.read_text())["whatif"]["per_batch"]}
    assert rows[1]["calibrated"] and rows[32]["calibrated"] and rows[8]["calibrated"]
    assert rows[8]["tokens_per_s_best"] == pytest.approx(3250, rel=1e-6)


@need
@pytest.mark.parametrize("value", ["inf", "nan", "0", "-5", "3:0"])
def test_a_calibration_that_is_no_finite_positive_figure_is_refused(value, capsys):
    assert main(["advise", str(PROFILE), "--calibrate-tps", value, "-q"]) == 10
    assert "tokens/s a finite number > 0" in capsys.readouterr().err
    assert main(["whatif", str(PROFILE), "--batch", "8", "--calibrate-tps", value, "-q"]) == 10


LIVE = REAL / "sglang_live_h100_e2_on"


@pytest.mark.skipif(not LIVE.exists(), reason="fixture not unpacked")
def test_advise_on_a_live_log_names_no_gpu_start_cycle(capsys):
    """A live log's cycles are host periods only: the heading does not point at a GPU-start cycle it has not."""
    assert main(["advise", str(LIVE), "--no-evidence"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "host start to next start, 3 warm-up left out)" in out and "GPU start to next GPU start" not in out
