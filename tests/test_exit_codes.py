"""Exit codes as the README documents them, on every subcommand: option errors are 10 (never
argparse's 2), unsuitable input for diff/whatif has its own code (12, never 1), and every error is
one `analyze-trace: error:` line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyze import cli

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
EAGER = str(REAL / "h200_4proc_eager.sqlite")
STEPS3 = str(REAL / "h200_steps3.sqlite")
NOSPEC = str(REAL / "h200_nospec.sqlite")


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("analyze-trace: error: "), err
    return lines[0]


@pytest.mark.parametrize("argv", [
    ["--bogus"], ["--top", "x"], ["--memory-budget", "zz"], ["--jobs"],
    ["diff"], ["diff", EAGER], ["diff", EAGER, EAGER, "--top", "many"],
    ["whatif"], ["whatif", STEPS3, "--steps", "x"], ["whatif", STEPS3, "--steps", "0"],
    ["whatif", STEPS3, "--calibrate-tps", "-3"], ["whatif", STEPS3, "--profiled-steps", "a"],
    ["whatif", STEPS3, "--extrapolate", "nonsense"],
    ["scrub"], ["scrub", EAGER],
    [EAGER, "--phase", "nothing"],
    # counts below 1: a negative --top sliced the tables ([:-3]), --boot 0 or below crashed diff (whatif
    # takes 0: point estimates)
    [EAGER, "--top", "-3"], [EAGER, "--top", "0"], ["diff", EAGER, EAGER, "--top", "-2"],
    ["diff", EAGER, EAGER, "--boot", "0"], ["diff", EAGER, EAGER, "--boot", "-5"],
    ["whatif", STEPS3, "--boot", "-1"], ["advise", EAGER, "--jobs", "0"],
], ids=lambda a: " ".join(Path(x).name for x in a))
def test_option_errors_are_10(capsys, argv):
    code, out, err = run(capsys, *argv)
    assert code == 10, err
    assert "usage:" not in err
    one_error_line(err)


def test_argparse_message_names_the_subcommand_and_help(capsys):
    code, _, err = run(capsys, "diff", EAGER)
    assert code == 10
    assert one_error_line(err) == ("analyze-trace: error: diff: the following arguments are required: after "
                                   "(see analyze-trace diff --help)")


@pytest.mark.parametrize("argv, hint", [
    (["--jsno", "out.json"], "; did you mean --json? (see analyze-trace --help)"),
    (["whatif", "--calibrate-tsp", "3"], "; did you mean --calibrate-tps? (see analyze-trace whatif --help)"),
    (["whatif", "--zzzz", "3"], " (see analyze-trace whatif --help)"),
])
def test_a_mistyped_option_is_told_the_closest_one(capsys, argv, hint):
    code, _, err = run(capsys, *argv[:-2], EAGER, *argv[-2:]) if argv[0] == "whatif" else run(capsys, EAGER, *argv)
    assert code == 10 and one_error_line(err).endswith("unrecognized arguments: " + " ".join(argv[-2:]) + hint)


def test_help_still_exits_0(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["whatif", "--help"])
    assert ei.value.code == 0
    assert "usage: analyze-trace whatif" in capsys.readouterr().out


def test_whatif_on_a_profile_without_draft_steps_is_12(capsys):
    """A trace without speculation: 'no decode cycles' is said first (before: it asked for
    --profiled-steps, then said there were no cycles)."""
    code, out, err = run(capsys, "whatif", NOSPEC)
    assert code == 12
    assert "no decode cycles" in one_error_line(err)
    code, out, err = run(capsys, "whatif", NOSPEC, "--profiled-steps", "3")
    assert code == 12 and "no decode cycles" in one_error_line(err)


def test_diff_and_whatif_on_a_json_that_is_not_a_result_are_12(capsys, tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps([1, 2]))
    for argv in (["diff", str(bad), EAGER], ["whatif", str(bad)]):
        code, _, err = run(capsys, *argv)
        assert code == 12 and "not an `analyze-trace --json` result" in one_error_line(err)


def test_truncated_json_side_is_6_and_missing_measured_is_2(capsys, tmp_path):
    half = tmp_path / "half.json"
    half.write_text('{"cycles": [')
    code, _, err = run(capsys, "diff", str(half), EAGER)
    assert code == 6 and "not valid JSON" in one_error_line(err)
    code, _, err = run(capsys, "whatif", STEPS3, "--measured", str(tmp_path / "none.json"), "-q")
    assert code == 2 and "--measured" in one_error_line(err)
    bad = tmp_path / "m.json"
    bad.write_text("3")
    code, _, err = run(capsys, "whatif", STEPS3, "--measured", str(bad), "-q")
    assert code == 10 and "not a JSON of measured tokens/s" in one_error_line(err)
    for text in ('{"3": 1e400}', '{"3": -5}', '{"2": 10, "nospec": NaN}'):      # no measurement: refused
        bad.write_text(text)
        code, _, err = run(capsys, "whatif", STEPS3, "--measured", str(bad), "-q")
        assert code == 10 and "not a finite number >= 0" in one_error_line(err), text


def test_an_empty_path_is_2_not_the_demo_nor_the_current_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "")
    assert code == 2 and out == ""
    assert "empty path" in one_error_line(err)


@pytest.mark.parametrize("argv", [["advise", ""], ["whatif", ""], ["diff", "", EAGER], ["diff", EAGER, " "],
                                  ["advise", EAGER, ""], ["", EAGER], ["scrub", "", "-o", "out.sqlite"]],
                         ids=lambda a: " ".join(Path(x).name or repr(x) for x in a))
def test_an_empty_path_is_2_on_every_subcommand_even_beside_a_report(capsys, tmp_path, monkeypatch, argv):
    """Path("") is the current directory: with a report there, advise/whatif/diff analysed it (exit 0)
    and scrub said it was a directory, before read/inputs.refuse_empty refused an empty path for
    every command (find_reports and connection.open_report)."""
    import shutil

    shutil.copy(STEPS3, tmp_path / "here.sqlite")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, *argv, *([] if argv[0] == "scrub" else ["-q"]))
    assert code == 2 and out == ""
    assert "empty path" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here.sqlite"]


@pytest.mark.parametrize("sub", [[], ["advise"]])
def test_a_bad_phase_configuration_is_10_for_analyze_and_advise(capsys, tmp_path, sub):
    """command_inputs.phase_config: one parse for both commands (advise had its own copy)."""
    code, _, err = run(capsys, *sub, EAGER, "--phase", "nothing", "-q")
    assert code == 10 and "phase configuration" in one_error_line(err)
    code, _, err = run(capsys, *sub, EAGER, "--config", str(tmp_path / "absent.toml"), "-q")
    assert code == 10 and "phase configuration" in one_error_line(err)


def test_an_empty_directory_is_2_not_the_demo(capsys, tmp_path):
    code, out, err = run(capsys, str(tmp_path))
    assert code == 2 and out == ""
    assert "holds no .sqlite report" in one_error_line(err)


def test_the_demo_run_says_it_is_the_demo(capsys):
    code, out, _ = run(capsys)
    assert code == 0
    head = "\n".join(out.splitlines()[:6])
    assert "demo: no report was given, so this is specprof's bundled trace" in head


def test_a_report_run_is_not_called_the_demo_and_lists_what_it_wrote(capsys, tmp_path):
    js, csv, page = tmp_path / "r.json", tmp_path / "csv", tmp_path / "r.html"
    code, out, _ = run(capsys, EAGER, "--json", str(js), "--csv", str(csv), "--html", str(page))
    assert code == 0 and "demo:" not in out
    tail = out.rstrip().splitlines()
    at = tail.index("wrote:")
    listed = [ln.strip() for ln in tail[at + 1:]]
    assert listed[0] == str(js) and listed[-1] == str(page)
    assert sorted(Path(x).name for x in listed[1:-1]) == sorted(p.name for p in csv.iterdir())
    assert all(Path(x).is_file() for x in listed)
    code, out, _ = run(capsys, EAGER)                     # nothing written, nothing listed
    assert "wrote:" not in out


@pytest.mark.parametrize("sub", [[], ["diff"], ["whatif"], ["advise"], ["scrub"]])
def test_help_names_only_files_that_exist(capsys, sub):
    """A path the help points to (``docs/reference.md``) is in the repository; no source paths."""
    import re

    with pytest.raises(SystemExit):
        cli.main([*sub, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    named = re.findall(r"\b((?:analyze|nvtx_annotate|docs)/[\w/]+\.(?:py|md))", text)
    root = REAL.parents[1]
    assert all((root / p).is_file() for p in named), named
    if not sub:
        assert named == ["docs/reference.md"] and "section Phases" in text   # for users, not a source path
        assert "protobuf" in text and "Chrome JSON" not in text        # what --perfetto writes


def test_json_to_stdout_is_the_only_thing_on_stdout(capsys):
    """`--json -` piped to a JSON reader failed with 'Extra data': the text report followed the JSON on
    stdout. It goes to stderr then."""
    code, out, err = run(capsys, NOSPEC, "--json", "-", "--no-advice")
    assert code == 0
    doc = json.loads(out)
    assert "ranks" in doc and "Exclusive GPU time per phase" in err


def test_no_option_abbreviations_and_a_version(capsys):
    """`--plot out` was silently taken as `--plots`: abbreviations are off (exit 10, one line)."""
    code, out, err = run(capsys, NOSPEC, "--plot", "/tmp/x")
    assert code == 10 and "unrecognized arguments: --plot" in one_error_line(err)
    with pytest.raises(SystemExit) as ei:
        cli.main(["--version"])
    assert ei.value.code == 0 and capsys.readouterr().out.startswith("analyze-trace ")


def test_whatif_on_a_profile_without_accept_marks_names_it_and_says_how_to_record_them(capsys):
    """The bundled eager trace was recorded without the shim: decode cycles, no accept marks. The one line names the
    report and the way to get them (a newcomer's reading: it named neither)."""
    code, _, err = run(capsys, "whatif", EAGER)
    line = one_error_line(err)
    assert code == 12 and f"{EAGER}: no accept marks (`accept_len=N reqs=M`) in the profile" in line
    assert line.endswith("the shim writes them: record the server with profile-trace (README section 1), or give a "
                         "live timing log (docs/live.md)")


def test_per_batch_says_why_a_profile_has_no_batch_size(capsys):
    """--per-batch on a trace without accept marks or without decode cycles printed 'no batch size with 20 decode
    cycles or more' and exited 0; it now gives the single prediction's line and 12."""
    code, _, err = run(capsys, "whatif", EAGER, "--per-batch")
    assert code == 12 and f"{EAGER}: no accept marks" in one_error_line(err)
    code, _, err = run(capsys, "whatif", NOSPEC, "--per-batch")
    assert code == 12 and "no decode cycles" in one_error_line(err)


def test_a_directory_of_unfinished_live_log_files_says_why_it_cannot_be_read(capsys, tmp_path):
    """A live log whose process was killed before completing its file (SGLang's server SIGKILLs its schedulers at
    Ctrl-C; the shim now completes the file on the signal first): one line saying so, exit 2."""
    (tmp_path / "specprof_live-r0-p1771-00001.parquet.tmp").write_bytes(b"PAR1" + b"\0" * 64)
    code, out, err = run(capsys, str(tmp_path))
    assert code == 2 and out == ""
    line = one_error_line(err)
    assert "holds only 1 unfinished live timing log file(s) (*.parquet.tmp)" in line and "SIGKILL" in line
