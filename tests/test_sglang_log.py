"""whatif --calibrate-sglang-log: SGLang's own 'Decode batch' log lines as the unprofiled figure.

fixtures/real/sglang_info_h100_v3_l32_s3.log: real SGLang 0.5.17 at --log-level info (recipes/sglang_info_log.sh,
2026-12-06, one H100), the held-out configuration (V = 3, 32 layers, 3 steps) at batches 1 and 16; its own
tokens/s of rounds beside it (``.sweep.json``). The profile is tests/test_whatif_sglang_heldout.py's.
"""
import json
from pathlib import Path

import pytest

from analyze.read.sglang_log import parse_log, read_log
from analyze.tools.whatif.command import main_whatif, read_measured
from helpers import cli_process

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
    f = parse_log(lines).lines
    assert f["running"].tolist() == [16, 3]
    assert f["tokens_per_s"].tolist() == [7298.70, 1200.0]
    assert f["accept_len"].iloc[0] == 1.43 and f["accept_len"].isna().iloc[1]   # no speculation: no accept len


def test_steady_lines_ranks_and_the_servers_step_count():
    """A line is steady when the same rank's previous decode line ran the same batch with no prefill between;
    each DP rank's lines are its own; the server's --speculative-num-steps comes from its logged arguments."""
    d = "Decode batch, #running-req: {m}, #token: 1, accept len: 1.50, gen throughput (token/s): {x}, #queue-req: 0"
    lines = ["[t] server_args=ServerArgs(model_path='m', speculative_num_steps=5, speculative_eagle_topk=1)",
             "[t DP0 TP0] " + d.format(m=16, x=1), "[t DP1 TP0] " + d.format(m=16, x=2),
             "[t DP0 TP0] " + d.format(m=16, x=3),                       # steady: DP0 ran 16 before
             "[t DP1 TP0] Prefill batch, #new-seq: 1", "[t DP1 TP0] " + d.format(m=16, x=4),   # a prefill between
             "[t DP0 TP0] " + d.format(m=15, x=5), "[t DP0 TP0] " + d.format(m=15, x=6)]
    log = parse_log(lines)
    assert log.num_steps == 5
    f = log.lines
    assert f["rank"].tolist() == ["DP0 TP0", "DP1 TP0", "DP0 TP0", "DP1 TP0", "DP0 TP0", "DP0 TP0"]
    assert f["steady"].tolist() == [False, False, True, False, False, True]


def test_a_log_that_starts_with_nuls_is_still_a_log(tmp_path):
    """logrotate's copytruncate can leave a log starting with NUL bytes: its decode lines are read; only a file without
    any is then called binary data."""
    from analyze.read.sglang_log import what_instead

    line = "[t] Decode batch, #running-req: 16, #token: 1, accept len: 1.50, gen throughput (token/s): 700.0, #queue-req: 0\n"
    log = tmp_path / "server.log"
    log.write_bytes(b"\0" * 4096 + (line * 50).encode())
    assert len(read_log(log).lines) == 50 and what_instead(log) == "binary data"
    plain = tmp_path / "plain.log"
    plain.write_text(line)
    assert what_instead(plain) is None


@need
def test_the_real_log_holds_decode_lines_at_both_batch_sizes():
    log = read_log(LOG)
    f = log.lines
    counts = f["running"].value_counts()
    assert counts[1] == 123 and counts[16] == 102 and log.num_steps == 3 and set(f["rank"]) == {""}
    # steady lines (the same batch as the line before, no prefill between): 113 at 1, 76 at 16; the others hold a
    # round's tail or the gap between rounds (737 to 5,990 tokens/s at 16 after a prefill)
    steady = f[f["steady"]]["running"].value_counts()
    assert steady[1] == 113 and steady[16] == 76
    assert f[(f["running"] == 16) & ~f["steady"]]["tokens_per_s"].min() < 1000
    # SGLang's accept len (tokens a request a cycle, the bonus included) is the profile's 1.49 at 3 steps
    assert f.loc[f["running"] == 16, "accept_len"].median() == pytest.approx(1.47, abs=0.01)


@need
@pytest.mark.parametrize("batch", (1, 16))
def test_calibrated_from_the_log_the_sweep_holds(tmp_path, batch):
    """The median gen throughput of the log's steady lines at the batch size, a steady rate (the prediction at 3
    steps is it times the rounds' tail): every step count 1..6 within 8% of the unprofiled sweep (another engine
    than the log's), the verdict off, and the source in the JSON."""
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
    x = read_log(LOG).lines.query("running == @batch and steady")["tokens_per_s"].median()
    assert cal["tokens_per_s"] == pytest.approx(x) and cal["steady"] is True
    assert cal["source"]["kind"] == "sglang_log" and cal["source"]["lines"] == {1: 113, 16: 76}[batch]
    gap = pred[3]["cycle_ns"] / (pred[3]["cycle_ns"] + (pred[3].get("round_gap_ns") or 0.0))   # the round's gap
    assert pred[3]["tokens_per_s"] == pytest.approx(x * pred[3]["round_efficiency"] * gap, rel=1e-9)


@need
@pytest.mark.parametrize("extra, code, words", [
    (["--batch", "4"], 12, "fewer than 5"),                       # 2 lines at 4 running requests, none steady
    ([], 10, "give --batch M"),                                    # the profile ran 1, 4, 16, 64 (20+ cycles each)
    (["--batch", "16", "--calibrate-tps", "7000"], 10, "give one of them"),
])
def test_what_it_refuses(extra, code, words):
    proc = cli_process.run(["whatif", str(PROFILE), "--calibrate-sglang-log", str(LOG), *extra], cwd=ROOT)
    assert proc.returncode == code and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr


@need
@pytest.mark.parametrize("make, code, words", [
    (lambda d: PROFILE, 10, "not SGLang's log (an SQLite file: a report?)"),
    (lambda d: SWEEP, 10, "not SGLang's log (JSON: a sweep's figures go to --measured)"),
    (lambda d: (d / "x.bin").write_bytes(b"ab\0cd" * 10) and d / "x.bin", 10, "not SGLang's log (binary data)"),
    (lambda d: (d / "notes.txt").write_text("a text file\nwith no decode line\n") and d / "notes.txt", 12,
     "no 'Decode batch' line in the file: SGLang prints them at --log-level info"),
    # SGLang's own lines start with '[': a log without decode lines is no JSON (the review found it called so)
    (lambda d: (d / "warn.log").write_text("[2026-12-06 07:02:57] Fail to set RLIMIT_NOFILE\n") and d / "warn.log", 12,
     "no 'Decode batch' line in the file"),
])
def test_a_file_that_is_no_log_is_said_to_be_none(tmp_path, make, code, words):
    """A newcomer passed the report, a JSON sweep or any text to --calibrate-sglang-log and was told '0 steady
    Decode batch lines ... (none steady: ...)': now what the file is instead, in one line."""
    proc = cli_process.run(["whatif", str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(make(tmp_path))],
                           cwd=ROOT)
    assert proc.returncode == code and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr


@need
def test_a_report_given_as_the_log_is_named_before_it_is_read_line_by_line(monkeypatch, capsys):
    """The 150 MB report was parsed line by line (12 s) before the error named it: its first bytes say what it is."""
    from analyze.cli import main
    from analyze.read import sglang_log

    def never(path):
        raise AssertionError(f"read line by line: {path}")
    monkeypatch.setattr(sglang_log, "read_log", never)
    assert main(["whatif", str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(PROFILE)]) == 10
    assert "not SGLang's log (an SQLite file: a report?)" in capsys.readouterr().err


@need
def test_a_missing_log_is_one_line(tmp_path):
    """A log path that does not exist: MissingInput, exit 2 (docs/bad_input.md), one line naming the option."""
    proc = cli_process.run(["whatif", str(PROFILE), "--batch", "16", "--calibrate-sglang-log",
                            str(tmp_path / "none.log")], cwd=ROOT)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--calibrate-sglang-log" in proc.stderr


@need
def test_per_batch_calibrates_each_batch_size_the_log_has_lines_of(tmp_path):
    """--per-batch --calibrate-sglang-log: batch 1 and 16 calibrated from their own lines (as whatif --batch B
    --calibrate-sglang-log gives them), batch 4 and 64 (no steady line at those sizes) not, said so per row."""
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


@need
def test_the_one_batch_size_of_a_profile_needs_no_batch_and_another_step_count_is_refused(tmp_path):
    """The 5-step profile ran batch 16 (its drain's smaller batches in fewer than 20 cycles each): no --batch
    needed, and it models batch 16; but the log's server ran 3 steps (its logged arguments): refused, exit 10.
    The same log with its arguments line cut is taken (the lines do not say the step count)."""
    second = REAL / "sglang_h100_v3_l32_s5.sqlite"
    if not second.exists():
        pytest.skip("5-step profile not unpacked")
    proc = cli_process.run(["whatif", str(second), "--calibrate-sglang-log", str(LOG)], cwd=ROOT)
    assert proc.returncode == 10 and "--speculative-num-steps 3, the profile 5" in proc.stderr, proc.stderr
    cut = tmp_path / "cut.log"
    cut.write_text("".join(line for line in LOG.read_text().splitlines(True) if "server_args=" not in line))
    out = tmp_path / "w.json"
    assert main_whatif([str(second), "--calibrate-sglang-log", str(cut), "--boot", "0", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["calibration"]["source"]["batch"] == 16 and doc["profiles"][0]["batch_filter"] == 16


@need
def test_lines_of_several_ranks_or_none_steady_are_refused(tmp_path):
    """Each DP rank logs its own throughput: a log of two ranks is refused (exit 10); a log with no steady line at
    any batch size the profile ran calibrates nothing under --per-batch (exit 12), as --calibrate-live."""
    d = "Decode batch, #running-req: 16, #token: 1, accept len: 1.50, gen throughput (token/s): 7000.0, #queue-req: 0"
    two = tmp_path / "two.log"
    two.write_text("".join(f"[t DP{i % 2} TP0] {d}\n" for i in range(20)))
    proc = cli_process.run(["whatif", str(PROFILE), "--batch", "16", "--calibrate-sglang-log", str(two)], cwd=ROOT)
    assert proc.returncode == 10 and "lines of 2 ranks" in proc.stderr, proc.stderr
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    proc = cli_process.run(["whatif", str(PROFILE), "--per-batch", "--calibrate-sglang-log", str(empty), "--boot", "0"],
                           cwd=ROOT)
    assert proc.returncode == 12 and proc.stderr.count("\n") == 1 and "--log-level info" in proc.stderr, proc.stderr


@need
def test_without_batch_the_log_is_read_at_the_one_size_the_load_visits():
    """The rule advise and whatif's modelled batch use (per_batch.visited_batches): a profile of 300 cycles at 16 and
    25 at 8 (a drain: 20+ cycles but under 10%) is read at 16; before, the log's own "20+ cycles" rule saw two sizes
    and asked for --batch."""
    import pandas as pd

    from analyze.tools import sides as S
    from analyze.tools.whatif.command import sglang_log_calibration

    requests = (16,) * 300 + (8,) * 25
    cycles = pd.DataFrame({"rank": 0, "cycle": range(1, len(requests) + 1), "period_ns": 4_000_000,
                           "requests": pd.array(requests, dtype="Int64"),
                           "tokens": pd.array([24] * len(requests), dtype="Int64")})
    side = S.Side("p.sqlite", cycles, pd.DataFrame(), [])
    steps, tps, source = sglang_log_calibration(LOG, [side], [3], None)
    assert steps == 3 and source["batch"] == 16 and tps > 0


def test_damaged_decode_lines_are_counted_and_left_out_never_an_internal_error():
    """Fields that do not read as SGLang prints them (found by hand: '1.4.3', '.', a 23-digit batch were a
    ValueError / OverflowError, an internal error): the line is left out and counted; the others read."""
    good = ("[2026-12-06 07:03:50] Decode batch, #running-req: 16, #token: 1351, token usage: 0.00, accept len: 1.43, "
            "accept rate: 0.14, cuda graph: True, gen throughput (token/s): 7298.70, #queue-req: 0")
    bad = [good.replace("1.43", "1.4.3"), good.replace("7298.70", "."), good.replace("7298.70", "72.98.70"),
           good.replace("#running-req: 16", "#running-req: " + "9" * 23)]
    log = parse_log([good, *bad, good])
    assert log.unreadable == 4 and log.lines["tokens_per_s"].tolist() == [7298.7, 7298.7]
    assert log.lines["steady"].tolist() == [False, True]


@need
def test_a_damaged_log_calibrates_as_the_intact_one_and_says_what_it_left_out(tmp_path):
    lines = LOG.read_text().splitlines(keepends=True)
    decode = [i for i, x in enumerate(lines) if "Decode batch" in x]
    for i in decode[1:40:10]:          # four decode lines' throughput garbled
        lines[i] = lines[i].replace("gen throughput (token/s): ", "gen throughput (token/s): ..")
    damaged = tmp_path / "damaged.log"
    damaged.write_text("".join(lines))
    outs = []
    for log in (LOG, damaged):
        out = tmp_path / f"{log.stem}.json"
        assert main_whatif([str(PROFILE), "--batch", "16", "--steps", "1..4", "--boot", "0",
                            "--calibrate-sglang-log", str(log), "--json", str(out)]) == 0
        outs.append(json.loads(out.read_text())["calibration"]["source"])
    assert outs[0]["unreadable_lines"] == 0 and outs[1]["unreadable_lines"] == 4
    assert outs[1]["lines"] <= outs[0]["lines"]
