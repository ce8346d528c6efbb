"""The one output policy (analyze/output_policy.py, analyze/atomic.py): a property test that every
output path the CLI accepts, for every writer, leaves every input's bytes unchanged and never replaces a
non-regular file; and the policy's parts one by one."""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from analyze import cli, output_policy
from analyze.atomic import atomic_path, atomic_write
from analyze.errors import OutputError

ROOT = Path(__file__).resolve().parents[1]
GRAPH = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A directory run of two synthetic per-rank reports (with accept marks: whatif runs on them)."""
    from fixtures.synth import TraceSpec, write_trace

    d = tmp_path_factory.mktemp("template") / "runs"
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=3, one_file=False), d)
    for i, p in enumerate(sorted(paths)):
        os.replace(p, d / f"rank{i}.sqlite")
    return d


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def run_cli(cwd: Path, args: list[str]) -> int:
    out, err = io.StringIO(), io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(args)
    finally:
        os.chdir(old)
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue(), err.getvalue()
    return rc


# where an output may point: relative to the scratch directory (made by `target`)
TARGETS = ["new.out", "existing.txt", "runs/rank0.sqlite", "runs/rank1.sqlite", "link-to-input", "hard-link",
           "runs/rank0.sqlite-wal", "/dev/null", "-", "other-report.sqlite", "link-to-wal"]
WRITERS = ["--json", "--html", "--csv", "--parquet", "diff", "whatif", "scrub"]


def prepare(tmp: Path, template: Path) -> list[Path]:
    """The scratch directory; returns every file a command might read (the directory run's reports)."""
    shutil.copytree(template, tmp / "runs")
    inputs = sorted((tmp / "runs").glob("*.sqlite"))
    (tmp / "runs" / "rank0.sqlite-wal").write_bytes(b"")        # a sidecar beside an input
    (tmp / "existing.txt").write_text("keep me?\n")
    shutil.copy(inputs[1], tmp / "other-report.sqlite")          # a report that is not an input
    (tmp / "link-to-input").symlink_to("runs/rank0.sqlite")
    (tmp / "link-to-wal").symlink_to("runs/rank0.sqlite-wal")
    os.link(inputs[1], tmp / "hard-link")
    return inputs + [tmp / "runs" / "rank0.sqlite-wal"]


def inputs_of(writer: str) -> set[str]:
    """The inputs of each command (whatif and scrub read rank 0 only: rank 1 is a bystander there, an
    existing report that ``--force`` may replace)."""
    return {"runs/rank0.sqlite", "runs/rank0.sqlite-wal"} | (set() if writer in ("whatif", "scrub")
                                                             else {"runs/rank1.sqlite"})


def command(writer: str, target: str) -> list[str]:
    if writer in ("--json", "--html", "--csv", "--parquet"):
        return ["runs", writer, target, "-q"]
    if writer == "diff":
        return ["diff", "runs/rank0.sqlite", "runs/rank1.sqlite", "--json", target, "-q"]
    if writer == "whatif":
        return ["whatif", "runs/rank0.sqlite", "--json", target, "-q", "--boot", "20"]
    return ["scrub", "runs/rank0.sqlite", "-o", target]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(writer=st.sampled_from(WRITERS), target=st.sampled_from(TARGETS), force=st.booleans())
def test_outputs_never_touch_inputs(template, tmp_path_factory, writer, target, force):
    tmp = tmp_path_factory.mktemp("case")
    files = prepare(tmp, template)
    mine = {tmp / p for p in inputs_of(writer)}
    before = {p: digest(p) for p in files}
    rc = run_cli(tmp, command(writer, target) + (["--force"] if force else []))
    assert rc in (0, 2, 7, 8, 10), (writer, target, rc)
    for p in files:                   # an input: never changed; any other report: only with --force
        assert digest(p) == before[p] or (force and p not in mine), (writer, target, p)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert (tmp / "link-to-input").is_symlink() and (tmp / "link-to-wal").is_symlink()
    aliases = {"link-to-input": "runs/rank0.sqlite", "link-to-wal": "runs/rank0.sqlite-wal",
               "hard-link": "runs/rank1.sqlite"}
    if aliases.get(target, target) in inputs_of(writer) and writer not in ("--csv", "--parquet"):
        assert rc == 8, (writer, target)          # an input, whatever --force says
    if target == "other-report.sqlite" and not force and writer not in ("--csv", "--parquet"):
        assert rc == 8 and digest(tmp / "other-report.sqlite") == before[files[1]]
    assert not [q for q in tmp.rglob("*.tmp")], list(tmp.rglob("*"))


# ------------------------------------------------------------------ the parts

def test_target_kinds(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert output_policy.target_kind("-") == output_policy.STREAM
    assert output_policy.target_kind("/dev/null") == output_policy.STREAM
    assert output_policy.target_kind(fifo) == output_policy.STREAM
    assert output_policy.target_kind(tmp_path / "new.json") == output_policy.FILE
    (tmp_path / "f").write_text("x")
    assert output_policy.target_kind(tmp_path / "f") == output_policy.FILE
    with pytest.raises(OutputError, match="it is a directory"):
        output_policy.target_kind(tmp_path)
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        with pytest.raises(OutputError, match="socket"):
            output_policy.target_kind(tmp_path / "s")
    finally:
        sock.close()
    with pytest.raises(OutputError, match="a parent of it is a file"):
        output_policy.target_kind(tmp_path / "f" / "x.json")


def test_identities_follow_links_and_sidecars(tmp_path):
    run = tmp_path / "run.sqlite"
    shutil.copy(GRAPH, run)
    (tmp_path / "run.sqlite-shm").write_bytes(b"")
    (tmp_path / "l.json").symlink_to(run)
    os.link(run, tmp_path / "h.json")
    with output_policy.protect([tmp_path]):            # a directory run: its reports and their sidecars
        assert output_policy.same_file_as_input(tmp_path / "l.json") == str(run)
        assert output_policy.same_file_as_input(tmp_path / "h.json") == str(run)
        assert output_policy.same_file_as_input(tmp_path / "run.sqlite-shm") == str(run) + "-shm"
        assert output_policy.same_file_as_input(tmp_path / "other.json") is None
    assert output_policy.same_file_as_input(tmp_path / "l.json") is None     # the scope ended


def test_writing_through_a_symlink_keeps_the_link(tmp_path):
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    with atomic_write(tmp_path / "link.json") as f:
        f.write("new")
    assert (tmp_path / "link.json").is_symlink() and (tmp_path / "real.json").read_text() == "new"


def test_stream_targets_are_written_not_replaced(tmp_path):
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    with atomic_path(fifo) as tmp:                 # a writer that wants a file name
        Path(tmp).write_bytes(b"payload")
    reader.join(timeout=30)
    assert got == [b"payload"] and stat.S_ISFIFO(os.stat(fifo).st_mode)
    with atomic_write("/dev/null") as f:
        f.write("x" * 1000)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    # a failed write sends nothing to the stream and leaves no staged file
    staged_before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob(".specprof-*"))
    with pytest.raises(RuntimeError):
        with atomic_write("/dev/null") as f:
            f.write("partial")
            raise RuntimeError("boom")
    assert set(Path(os.environ.get("TMPDIR", "/tmp")).glob(".specprof-*")) <= staged_before


def test_existing_report_needs_force_and_scrub_target_never_replaced_without_it(tmp_path):
    other = tmp_path / "other.sqlite"
    shutil.copy(GRAPH, other)
    with pytest.raises(OutputError, match="existing Nsight Systems report"):
        output_policy.check_output(other)
    with output_policy.protect([], force=True):
        assert output_policy.check_output(other) == output_policy.FILE
    text = tmp_path / "notes.txt"
    text.write_text("x")
    assert output_policy.check_output(text) == output_policy.FILE            # not a report: replaced
    with pytest.raises(OutputError, match="it exists"):
        output_policy.check_output(text, overwrite="never")


def test_api_writers_protect_the_inputs_of_the_result(tmp_path):
    import analyze
    from analyze.render import outputs

    run = tmp_path / "run.sqlite"
    shutil.copy(GRAPH, run)
    result = analyze.load(run)
    before = digest(run)
    with pytest.raises(OutputError, match="it is an input of this run"):
        outputs.write_json(result, run)
    (tmp_path / "alias.json").symlink_to(run)
    with pytest.raises(OutputError, match="it is an input of this run"):
        outputs.write_json(result, tmp_path / "alias.json")
    assert digest(run) == before


def test_profile_trace_uses_the_policy_without_pandas(tmp_path):
    (tmp_path / "run1.sqlite").write_bytes(b"SQLite format 3\x00")
    code = ("import sys\nfrom nvtx_annotate import profile_trace as pt\n"
            f"print(pt.refuse_outputs({str(tmp_path / 'run1')!r}, False))\n"
            f"print(pt.refuse_outputs({str(tmp_path / 'run1')!r}, True))\n"
            f"print(pt.refuse_outputs({str(tmp_path / 'run2')!r}, False))\n"
            "print('pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=str(ROOT))).stdout.splitlines()
    assert out[0] == f"cannot write {tmp_path / 'run1.sqlite'}: it exists; choose another path, or --force to " \
                     "replace it (an earlier run?)"
    assert out[1:] == ["None", "None", "False"]


@pytest.mark.parametrize("args,clash", [
    (["--json", "out/same", "--html", "out/same"], True),
    (["--json", "out/a.json", "--perfetto", "out/../out/a.json"], True),
    (["--json", "out/a.json", "--html", "out/link.json"], True),            # a symbolic link to it
    (["--json", "out/a.json", "--csv", "out/a.json"], True),                # a file and a directory
    (["--json", "-", "--perfetto", "-"], True),                            # both to standard output
    (["--json", "out/newdir/"], True),                                      # a directory's name
    (["--json", "out/a.json/."], True),
    (["--json", "sub/../out/a.json", "--html", "out/b.json"], False),      # sub -> out/deep: not one file
    (["--json", "sub/../a.json", "--html", "out/a.json"], True),           # sub/.. is out: one file
    (["--json", "/dev/null", "--html", "/dev/null"], False),
    (["--json", "out/a.json", "--html", "out/a.html", "--csv", "out", "--plots", "out"], False),
])
def test_two_outputs_never_name_one_file(tmp_path, args, clash):
    """One output would silently replace the other (the JSON lost, the HTML kept): refused with exit 8
    before any work, nothing written; devices and shared output directories stay allowed."""
    (tmp_path / "out" / "deep").mkdir(parents=True)
    os.symlink("a.json", tmp_path / "out" / "link.json")
    os.symlink("out/deep", tmp_path / "sub")                 # sub/.. is out, not the current directory
    rc = run_cli(tmp_path, [str(GRAPH), "-q", *args])
    assert rc == (8 if clash else 0)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    if clash:
        assert written == ["deep", "link.json"]
    else:
        assert "a.html" in written or "b.json" in written or args[1] == "/dev/null"


@pytest.mark.parametrize("command", ["diff", "whatif"])
def test_diff_and_whatif_json_and_plot_never_one_file(tmp_path, template, command):
    runs = sorted(str(p) for p in template.glob("*.sqlite"))
    argv = [command, *runs, "-q", "--json", "x.out", "--plot", "./x.out"]
    assert run_cli(tmp_path, argv) == 8
    assert not (tmp_path / "x.out").exists()
