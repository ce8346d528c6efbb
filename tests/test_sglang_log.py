"""whatif --calibrate-sglang-log: SGLang's own 'Decode batch' log lines as the unprofiled figure.

fixtures/real/sglang_info_h100_v3_l32_s3.log: real SGLang 0.5.17 at --log-level info (recipes/sglang_info_log.sh,
2026-12-06, one H100), the held-out configuration (V = 3, 32 layers, 3 steps) at batches 1 and 16; its own
tokens/s of rounds beside it (``.sweep.json``). The profile is tests/test_whatif_sglang_heldout.py's.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyze.read.sglang_log import decode_lines, read_decode_lines
from analyze.tools.whatif.command import main_whatif, read_measured

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
LOG = REAL / "sglang_info_h100_v3_l32_s3.log"
PROFILE = REAL / "sglang_h100_v3_l32_s3.sqlite"
SWEEP = REAL / "sglang_sweep_h100_v3_l32.json"
need = pytest.mark.skipif(not (LOG.exists() and PROFILE.exists() and SWEEP.exists()), reason="fixtures not unpacked")


def test_decode_lines_reads_the_fields_and_skips_the_rest():
    lines = [
        "[2026-12-06 07:03:50] Decode batch, #running-req: 16, #token: 1351, token usage: 0.00, accept len: 1.43, "
        "accept rate: 0.14, cuda graph: True, gen throughput (token/s): 7298.70, #queue-req: 0",
        "[2026-12-06 07:03:50] Prefill batch, #new-seq: 16, #new-token: 16, #cached-token: 0",
        "[2026-12-06 07:03:51] Decode batch, #running-req: 3, #token: 99, token usage: 0.00, cuda graph: True, "
        "gen throughput (token/s): 1200.00, #queue-req: 0",
        "Decode batch, #running-req: x, gen throughput (token/s): 1",
    ]
    f = decode_lines(lines)
    assert f["running"].tolist() == [16, 3]
    assert f["tokens_per_s"].tolist() == [7298.70, 1200.0]
    assert f["accept_len"].iloc[0] == 1.43 and f["accept_len"].isna().iloc[1]   # no speculation: no accept len


@need
def test_the_real_log_holds_decode_lines_at_both_batch_sizes():
    f = read_decode_lines(LOG)
    counts = f["running"].value_counts()
    assert counts[1] == 123 and counts[16] == 102
    # SGLang's accept len (tokens a request a cycle, the bonus included) is the profile's 1.49 at 3 steps
    assert f.loc[f["running"] == 16, "accept_len"].median() == pytest.approx(1.47, abs=0.01)


@need
@pytest.mark.parametrize("batch", (1, 16))
def test_calibrated_from_the_log_the_sweep_holds(tmp_path, batch):
    """The log's median gen throughput at the batch size, a steady rate (the prediction at 3 steps is it times
    the rounds' tail): every step count 1..6 within 8% of the unprofiled sweep (another engine than the log's;
    measured: +2 to +5% at batch 1, -7 to +3% at batch 16), the verdict off, and the source in the JSON."""
    out = tmp_path / "w.json"
    m, base = read_measured(SWEEP, batch)
    assert main_whatif([str(PROFILE), "--batch", str(batch), "--steps", "1..6", "--boot", "0",
                        "--calibrate-sglang-log", str(LOG), "--baseline-tps", str(base), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    pred = {p["steps"]: p for p in doc["predictions"]}
    for s in range(1, 7):
        assert pred[s]["tokens_per_s"] == pytest.approx(m[s], rel=0.08), s
    assert doc["best"]["speedup"] < 1
    cal = doc["calibration"]
    x = read_decode_lines(LOG).query("running == @batch")["tokens_per_s"].median()
    assert cal["tokens_per_s"] == pytest.approx(x) and cal["steady"] is True
    assert cal["source"]["kind"] == "sglang_log" and cal["source"]["lines"] == {1: 123, 16: 102}[batch]
    assert pred[3]["tokens_per_s"] == pytest.approx(x * pred[3]["round_efficiency"], rel=1e-9)


@need
@pytest.mark.parametrize("extra, code, words", [
    (["--batch", "4"], 12, "fewer than 5"),                       # 2 lines at 4 running requests
    ([], 10, "give --batch M"),                                    # the profile ran 1, 4, 16, 64
    (["--batch", "16", "--calibrate-tps", "7000"], 10, "give one of them"),
])
def test_what_it_refuses(extra, code, words):
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", "whatif", str(PROFILE), "--calibrate-sglang-log",
                           str(LOG), *extra], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == code and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr


@need
def test_a_missing_log_is_one_line(tmp_path):
    """A log path that does not exist: MissingInput, exit 2 (docs/bad_input.md), one line naming the option."""
    proc = subprocess.run([sys.executable, "-m", "analyze.cli", "whatif", str(PROFILE), "--batch", "16",
                           "--calibrate-sglang-log", str(tmp_path / "none.log")], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--calibrate-sglang-log" in proc.stderr


@need
def test_per_batch_calibrates_each_batch_size_the_log_has_lines_of(tmp_path):
    """--per-batch --calibrate-sglang-log: batch 1 and 16 calibrated from their own lines (as whatif --batch B
    --calibrate-sglang-log gives them), batch 4 and 64 (no lines at those sizes) not, and said so per row."""
    out = tmp_path / "pb.json"
    assert main_whatif([str(PROFILE), "--per-batch", "--calibrate-sglang-log", str(LOG), "--steps", "1..6",
                        "--boot", "0", "--json", str(out)]) == 0
    rows = {r["batch"]: r for r in json.loads(out.read_text())["per_batch"]}
    assert rows[1]["calibrated"] and rows[16]["calibrated"]
    assert not rows[4]["calibrated"] and not rows[64]["calibrated"]
    one = tmp_path / "one.json"
    assert main_whatif([str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(LOG), "--steps", "1..6",
                        "--boot", "0", "--json", str(one)]) == 0
    assert rows[16]["tokens_per_s_best"] == pytest.approx(json.loads(one.read_text())["best"]["tokens_per_s"],
                                                          rel=1e-9)


@need
def test_advise_takes_the_log_as_whatif_does(tmp_path):
    """advise --calibrate-sglang-log: the same calibration as whatif's (a steady rate: at 3 steps the log's rate
    times the rounds' tail), and the speculation rule fires against the sweep's no-speculation figure."""
    from analyze.tools.advise.command import main_advise

    out, one = tmp_path / "a.json", tmp_path / "w.json"
    _, base = read_measured(SWEEP, 16)
    assert main_advise([str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(LOG), "--baseline-tps", str(base),
                        "--json", str(out)]) == 0
    assert main_whatif([str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(LOG), "--baseline-tps", str(base),
                        "--steps", "1..10", "--boot", "0", "--json", str(one)]) == 0
    doc, w = json.loads(out.read_text()), json.loads(one.read_text())
    at3 = next(p for p in w["predictions"] if p["steps"] == 3)["tokens_per_s"]
    assert doc["whatif"]["tokens_per_s_profiled"] == pytest.approx(at3, rel=1e-9)
    assert any(f["rule"] == "speculation" and f["title"].startswith("speculation does not pay") for f in doc["findings"])
    from analyze.errors import UsageError
    with pytest.raises(UsageError, match="give --batch M"):         # the profile ran batch sizes 1..64
        main_advise([str(PROFILE), "--calibrate-sglang-log", str(LOG)])
