"""Bad input and odd traces through the CLI: one line on stderr, a documented exit code, the input
unchanged; third-party exports analyze sensibly; a fuzzer never gets a traceback."""
from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import analyze
from analyze import cli
from helpers import cli_process
from fixtures import nsys_record

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
PUBLIC = ROOT.parent / "shared" / "public-traces"


def run_cli(*args) -> tuple[int, str, str]:
    proc = cli_process.run([*map(str, args)])
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("analyze-trace: error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_missing_file(tmp_path):
    rc, _, err = run_cli(tmp_path / "nope.sqlite")
    assert rc == 2 and "no such file" in one_line_error(err)


def test_a_missing_report_with_its_xz_beside_it_says_how_to_unpack(tmp_path):
    """A newcomer's find: the bundled fixtures ship as .sqlite.xz; naming the .sqlite before unpacking said
    only 'no such file or directory'. Now the one line names the .xz and the unpack commands."""
    (tmp_path / "prof.sqlite.xz").write_bytes(b"not really xz")
    rc, _, err = run_cli(tmp_path / "prof.sqlite")
    line = one_line_error(err)
    assert rc == 2 and "no such file or directory (prof.sqlite.xz is beside it" in line
    assert "xz -dk" in line and "python -m fixtures.unpack" in line
    rc, _, err = run_cli(tmp_path / "other.sqlite")
    assert rc == 2 and one_line_error(err).endswith("other.sqlite: no such file or directory")


def test_directory_without_reports(tmp_path):
    rc, _, err = run_cli(tmp_path)
    assert rc == 2 and "no .sqlite report" in one_line_error(err)


def test_nsys_rep_given_names_the_export_command(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Pro" + b"\0" * 100)
    rc, _, err = run_cli(rep)
    line = one_line_error(err)
    assert rc == 3 and "nsys export --type sqlite" in line


def test_not_sqlite(tmp_path):
    f = tmp_path / "notes.sqlite"
    f.write_text("hello\n")
    rc, _, err = run_cli(f)
    assert rc == 4, err
    one_line_error(err)


def test_sqlite_but_not_nsys(tmp_path):
    f = tmp_path / "other.sqlite"
    with sqlite3.connect(f) as c:
        c.execute("CREATE TABLE t(x)")
    rc, _, err = run_cli(f)
    assert rc == 5 and "nsys" in one_line_error(err)


def test_truncated_report(tmp_path):
    data = (REAL / "h200_1proc_graphs_graphlevel.sqlite").read_bytes()
    f = tmp_path / "cut.sqlite"
    f.write_bytes(data[: len(data) // 2])
    rc, _, err = run_cli(f)
    assert rc == 6, err
    one_line_error(err)


def test_nvtx_only_export_says_so(tmp_path):
    f = tmp_path / "nvtx_only.sqlite"
    shutil.copy(REAL / "h200_1proc_graphs_graphlevel.sqlite", f)
    with sqlite3.connect(f) as c:
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
            c.execute(f"DROP TABLE IF EXISTS {t}")
    rc, _, err = run_cli(f)
    assert rc == 7 and "NVTX only" in one_line_error(err)


def test_unwritable_output_location(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run_cli(REAL / "h200_1proc_graphs_graphlevel.sqlite", "--json", blocker / "out.json", "-q")
    assert rc == 8, err
    one_line_error(err)


def test_bad_phase_option():
    rc, _, err = run_cli(REAL / "h200_1proc_graphs_graphlevel.sqlite", "--phase", "nonsense", "-q")
    assert rc == 10 and "phase" in one_line_error(err)


def test_two_reports_claiming_one_rank_are_refused(tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(REAL / "h200_1proc_graphs_graphlevel.sqlite", a)
    shutil.copy(REAL / "h200_1proc_graphs_graphlevel.sqlite", b)
    rc, _, err = run_cli(a, b)
    assert rc == 9 and "rank 0" in one_line_error(err)


def test_inputs_unchanged_by_every_command(tmp_path):
    src = REAL / "h200_4proc_eager.sqlite"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    mtime = src.stat().st_mtime_ns
    assert run_cli(src, "--json", tmp_path / "o.json", "--csv", tmp_path / "csv", "--parquet", tmp_path / "pq",
                   "-q")[0] == 0
    assert run_cli("scrub", src, "-o", tmp_path / "s.sqlite")[0] == 0
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest
    assert src.stat().st_mtime_ns == mtime
    assert not list(REAL.glob("*-journal")) and not list(REAL.glob("*-wal"))


def test_failed_output_leaves_no_partial_file(tmp_path, monkeypatch):
    from analyze.render import outputs

    target = tmp_path / "r.json"
    target.write_text("previous run\n")

    real_dumps, calls = outputs.json.dumps, []

    def boom(*a, **k):          # interrupted half-way through the (streamed) document
        calls.append(1)
        if len(calls) > 5:
            raise KeyboardInterrupt
        return real_dumps(*a, **k)

    monkeypatch.setattr(outputs.json, "dumps", boom)
    with pytest.raises(KeyboardInterrupt):
        outputs.write_json(analyze.load(REAL / "h200_1proc_graphs_graphlevel.sqlite"), target)
    assert target.read_text() == "previous run\n"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# --- third-party exports: old schemas, sliced captures, no NVTX -------------------------------

needs_public = pytest.mark.skipif(not PUBLIC.is_dir(), reason="../shared/public-traces not present")


@needs_public
def test_sliced_two_gpu_capture_counts_kernels_without_launch_call():
    result = analyze.load(PUBLIC / "GindaChen_nsys-ai__h100_2gpu_1s.sqlite")
    assert list(result.ranks["rank"]) == [0, 1]
    assert set(result.ranks["source"]) == {"device"}
    kernels = result.gpu_ops[result.gpu_ops["kind"] == "kernel"]
    assert len(kernels) == 3442
    unlinked = int(((result.gpu_ops["call_pos"] < 0)).sum())
    assert unlinked > 0
    note = next(n for n in result.notes if n.code == "unlinked_ops")
    assert note.count == unlinked and note.message.startswith(f"{unlinked} GPU ops had no launching API call")
    t = result.totals.set_index("rank")
    named = result.phases[result.phases["phase"] != "other"].groupby("rank")["exclusive_ns"].sum()
    assert (named + t["unattributed_ns"] == t["busy_ns"]).all()


@needs_public
def test_export_without_nvtx_puts_everything_in_other():
    rc, out, err = run_cli(PUBLIC / "GindaChen_nsys-ai__mock.sqlite")
    assert rc == 0, err
    assert "no NVTX ranges" in out
    result = analyze.load(PUBLIC / "GindaChen_nsys-ai__mock.sqlite")
    t = result.totals.iloc[0]
    assert t["unattributed_ns"] == t["busy_ns"] > 0
    assert len(result.gpu_ops[result.gpu_ops["kind"] == "kernel"]) == 2


@needs_public
@pytest.mark.parametrize("name", ["amir-ghz_DynamicViT__nsys_profile.sqlite",
                                  "amir-ghz_DynamicViT__nsys_profile__reexport_2022.4.sqlite"])
def test_empty_captures_old_schemas(name):
    rc, _, err = run_cli(PUBLIC / name)
    assert rc == 7 and "no GPU activity" in one_line_error(err)


# --- fuzzing: mutated schemas and contents never give a traceback -------------------------------

MUTATIONS = st.lists(st.sampled_from([
    ("drop_table", "CUPTI_ACTIVITY_KIND_RUNTIME"), ("drop_table", "StringIds"), ("drop_table", "NVTX_EVENTS"),
    ("drop_table", "PROCESSES"), ("drop_table", "TARGET_INFO_GPU"), ("drop_table", "META_DATA_EXPORT"),
    ("drop_column", "CUPTI_ACTIVITY_KIND_KERNEL.demangledName"), ("drop_column", "NVTX_EVENTS.textId"),
    ("drop_column", "NVTX_EVENTS.domainId"), ("drop_column", "CUPTI_ACTIVITY_KIND_KERNEL.globalPid"),
    ("drop_column", "CUPTI_ACTIVITY_KIND_RUNTIME.nameId"), ("add_column", "CUPTI_ACTIVITY_KIND_KERNEL.extra"),
    ("rename_table", "CUPTI_ACTIVITY_KIND_KERNEL"), ("null_column", "CUPTI_ACTIVITY_KIND_KERNEL.end"),
    ("null_column", "NVTX_EVENTS.end"), ("null_column", "CUPTI_ACTIVITY_KIND_RUNTIME.correlationId"),
    ("null_column", "NVTX_EVENTS.globalTid"), ("garbage", "StringIds.value"), ("garbage", "NVTX_EVENTS.text"),
    ("negative", "CUPTI_ACTIVITY_KIND_KERNEL.globalPid"), ("negative", "NVTX_EVENTS.globalTid"),
    ("shuffle_times", "CUPTI_ACTIVITY_KIND_KERNEL"), ("delete_half", "CUPTI_ACTIVITY_KIND_RUNTIME"),
    # issue 16: rows nsys never writes, a dropped kernel table, nsys' own diagnostics
    ("drop_table", "CUPTI_ACTIVITY_KIND_KERNEL"), ("duplicate_rows", "CUPTI_ACTIVITY_KIND_KERNEL"),
    ("duplicate_rows", "CUPTI_ACTIVITY_KIND_MEMCPY"), ("text_start", "CUPTI_ACTIVITY_KIND_KERNEL"),
    ("text_start", "CUPTI_ACTIVITY_KIND_RUNTIME"), ("text_start", "NVTX_EVENTS"),
    ("null_start", "CUPTI_ACTIVITY_KIND_KERNEL"), ("null_start", "CUPTI_ACTIVITY_KIND_MEMSET"),
    ("outside_session", "CUPTI_ACTIVITY_KIND_KERNEL"), ("fractional", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
    ("backwards", "NVTX_EVENTS"), ("diagnostic_error", "DIAGNOSTIC_EVENT"),
]), min_size=1, max_size=4, unique=True)


def mutate(path: Path, mutations) -> None:
    with sqlite3.connect(path) as c:
        for kind, target in mutations:
            table, _, col = target.partition(".")
            exists = c.execute("SELECT 1 FROM sqlite_master WHERE name=?", (table,)).fetchone()
            if not exists:
                continue
            cols = [r[1] for r in c.execute(f"PRAGMA table_info({table})")]
            if col and col not in cols and kind != "add_column":
                continue
            if kind == "drop_table":
                c.execute(f"DROP TABLE {table}")
            elif kind == "drop_column":
                c.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
            elif kind == "add_column":
                c.execute(f"ALTER TABLE {table} ADD COLUMN {col} TEXT DEFAULT 'x'")
            elif kind == "rename_table":
                c.execute(f"ALTER TABLE {table} RENAME TO {table}_OLD")
            elif kind == "null_column":
                try:
                    c.execute(f"UPDATE {table} SET {col}=NULL WHERE rowid % 3 = 0")
                except sqlite3.IntegrityError:  # a NOT NULL column: nsys never writes NULL there
                    pass
            elif kind == "garbage":
                c.execute(f"UPDATE {table} SET {col}=CAST(X'FF00FEC3' AS TEXT) WHERE rowid % 2 = 0")
            elif kind == "negative":
                c.execute(f"UPDATE {table} SET {col} = {col} | (-9223372036854775807 - 1) WHERE rowid % 2 = 0")
            elif kind == "shuffle_times":
                c.execute(f"UPDATE {table} SET start = end, end = start WHERE rowid % 4 = 0")
            elif kind == "delete_half":
                c.execute(f"DELETE FROM {table} WHERE rowid % 2 = 0")
            elif kind == "duplicate_rows":
                c.execute(f"INSERT INTO {table} SELECT * FROM {table} WHERE rowid % 3 = 0")
            elif kind == "text_start":
                c.execute(f"UPDATE {table} SET start = 'x' || start WHERE rowid % 5 = 0")
            elif kind == "null_start":          # the table rebuilt without its NOT NULL constraints
                c.execute(f"CREATE TABLE fuzz_copy AS SELECT * FROM {table}")
                c.execute(f"DROP TABLE {table}")
                c.execute(f"ALTER TABLE fuzz_copy RENAME TO {table}")
                c.execute(f"UPDATE {table} SET start = NULL WHERE rowid % 4 = 0")
            elif kind == "outside_session":
                c.execute(f"UPDATE {table} SET end = end + 10000000000000 WHERE rowid % 6 = 0")
            elif kind == "fractional":
                c.execute(f"UPDATE {table} SET start = start + 0.5 WHERE rowid % 2 = 0")
            elif kind == "backwards":
                c.execute(f"UPDATE {table} SET end = start - 5 WHERE end IS NOT NULL AND rowid % 3 = 0")
            elif kind == "diagnostic_error":
                c.execute(f"INSERT INTO {table} (timestamp, timestampType, source, severity, text, globalPid) "
                          "VALUES (1, 1, 1, 3, 'CUDA driver is not supported by this version of CUPTI.', NULL)")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=MUTATIONS)
def test_fuzzed_reports_give_results_or_one_clear_error(mutations):
    err = io.StringIO()
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "fuzz.sqlite"
        shutil.copy(REAL / "h200_1proc_graphs_graphlevel.sqlite", f)
        mutate(f, mutations)
        with contextlib.redirect_stderr(err):
            rc = cli.main([str(f), "--json", str(Path(d) / "o.json"), "-q"])
        if rc == 0:
            assert (Path(d) / "o.json").stat().st_size > 0
            sound_result(Path(d) / "o.json")
    assert rc in (0, 2, 4, 5, 6, 7, 9), (mutations, err.getvalue())
    if rc:
        one_line_error(err.getvalue())


def sound_result(path: Path) -> None:
    """What corrupt rows must never make: a negative duration or total, exclusive phase time +
    unattributed other than busy. (Kernel time may exceed busy time only where kernels of one rank
    overlap on several streams: a mutation that merges processes makes that legitimately; duplicated
    rows, which made it before, are tested on a trace without overlap in test_documented_cases.)"""
    import json

    doc = json.loads(path.read_text())
    for t in doc["totals"]:
        assert t["kernel_ns"] >= 0 and t["busy_ns"] >= 0, t
        assert t["idle_ns"] is None or t["idle_ns"] >= 0, t
    named = {}
    for p in doc["phases"]:
        assert min(p["exclusive_ns"], p["kernel_ns"], p["busy_ns"]) >= 0, p
        if p["phase"] != "other":
            named[p["rank"]] = named.get(p["rank"], 0) + p["exclusive_ns"]
    for t in doc["totals"]:
        assert named.get(t["rank"], 0) + t["unattributed_ns"] == t["busy_ns"], t
    for k in doc["kernels"]:
        assert k["total_ns"] >= 0 and k["instances"] > 0, k
    for c in doc["cycles"]:
        assert c["duration_ns"] >= 0 and c["busy_ns"] >= 0, c


def test_odd_cases_are_counted_and_reported(tmp_path):
    from fixtures.synth import TraceSpec, write_trace

    paths, truth = write_trace(TraceSpec(ranks=2, cycles=2, start_end_ranges=True, unclosed_range=True,
                                         missing_runtime=2, zero_length_kernels=2, negative_globaltid=True,
                                         invalid_utf8=True), tmp_path)
    rc, out, err = run_cli(*paths)
    assert rc == 0, err
    # per rank: 2 kernels without runtime row, 2 zero-length kernels, 1 never-closed range,
    # 1 start/end range ending on another thread
    assert "4 GPU ops had no launching API call" in out
    assert "4 GPU ops have zero duration" in out
    assert "2 NVTX ranges were never closed" in out
    assert "2 start/end NVTX ranges end on another thread" in out
    assert "negative globalTid" in out
    assert "correlation ids occur in several processes" in out
    assert "1 strings were not valid UTF-8" in out


@pytest.mark.nsys
def test_nsys_rep_is_exported_when_nsys_is_on_path(tmp_path):
    """A real .nsys-rep (recorded here by nsys) is exported beside itself and analyzed."""
    if shutil.which("nsys") is None:
        pytest.skip("nsys not on PATH")
    code = ("from nvtx_annotate import _nvtx\n"
            "for i in range(3):\n    _nvtx.push('verify'); _nvtx.mark('rank=0 world=1 device=cpu'); _nvtx.pop()\n")
    rec, rep = nsys_record.record(tmp_path / "t", [sys.executable, "-c", code], trace="nvtx", cwd=ROOT)
    assert rep.exists(), rec.stderr[-2000:]
    rc, out, err = run_cli(rep)
    # exported to t.sqlite beside the report; NVTX only (no GPU here): the ranges are shown, exit 7
    assert (tmp_path / "t.sqlite").exists()
    assert rc == 7 and "NVTX only" in one_line_error(err)
    row = next(line for line in out.splitlines() if line.startswith("sglang:verify"))
    assert row.split()[1:3] == ["PushPop", "3"]


# --- issue 16: captures that went wrong, reports that do not belong together ---------------------

REAL3 = Path("/work/coord/real3")


@needs_public
def test_unrelated_public_reports_are_refused():
    """Two third-party runs given as ranks of one: refused, naming why (the same machine, the second run
    started 78 minutes after the first ended; two machines)."""
    rc, _, err = run_cli(PUBLIC / "GindaChen_nsys-ai__mfu_2gpu_before.sqlite",
                         PUBLIC / "GindaChen_nsys-ai__mfu_2gpu_after.sqlite", "-q")
    line = one_line_error(err)
    assert rc == 11 and "sessions that never ran at the same time" in line and "78 minutes after the first ended" in line
    rc, _, err = run_cli(PUBLIC / "GindaChen_nsys-ai__mock.sqlite", PUBLIC / "GindaChen_nsys-ai__h100_2gpu_1s.sqlite",
                         "-q")
    line = one_line_error(err)
    assert rc == 11 and "recorded on different hosts: DESKTOP-KBEMEQS" in line and "modal" in line


@pytest.mark.parametrize("budget", [None, "1MB"])
def test_lost_cuda_tail_is_counted_whole_and_chunked(budget):
    """The committed real SGLang graph capture lost its last ~3 s of CUDA data: 48 of its 63 decode
    cycles have NVTX but no GPU op: rows of the cycle table without GPU columns (no_gpu_ops), the
    last cycle with GPU work before them cut short (truncated), both left out of steady-state figures."""
    from analyze.timeline import cycles as cycles_mod

    result = analyze.load(REAL / "sglang_graphs.sqlite", memory_budget=budget and 10**6)
    note = next(n for n in result.notes if n.code == "lost_cuda_tail")
    assert note.count == 48 and "rank 0: 48 of 63 cycles, the last 2.9 s" in note.message
    assert "no_gpu_ops" in note.message
    assert len(result.cycles) == 63
    reasons = result.cycles["warmup_reason"].value_counts().to_dict()
    assert reasons["no_gpu_ops"] == 48 and reasons["truncated"] == 1
    measured = cycles_mod.with_gpu(result.cycles)
    assert len(measured) == 63 - 48 and result.cycles.loc[measured.index, "start_ns"].notna().all()
    assert int(measured["start_ns"].max()) < int(result.totals["window_end_ns"].max())


@pytest.mark.skipif(not (REAL3 / "sglang_graphs.sqlite").exists(), reason=f"{REAL3} not present (captures kept on the development machine only)")
def test_real3_captures_say_what_was_lost():
    result = analyze.load(REAL3 / "sglang_graphs.sqlite")
    note = next(n for n in result.notes if n.code == "lost_cuda_tail")
    assert note.count == 49 and "49 of 64 cycles, the last 3.0 s" in note.message
    rc, out, err = run_cli(REAL3 / "sglang_eager.sqlite")
    line = one_line_error(err)
    assert rc == 7 and "CUDA was traced (6 CUDA API calls in 2 processes)" in line
    assert '"No CUDA events collected. Does the process use CUDA?" (warning, 117 processes)' in line
    assert "profile with -t cuda" not in line and "sglang:decode_cycle" in out


def test_the_committed_lost_capture_is_the_scrubbed_real_one():
    from analyze.read.connection import open_report

    conn = open_report(REAL / "sglang_eager_lost_cuda.sqlite")
    try:
        assert conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'").fetchone()[0] == "<host>"
        decode = conn.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text = 'decode_cycle'").fetchone()[0]
        assert decode == 64
        assert not [t for (t,) in conn.execute("SELECT name FROM sqlite_master") if t == "CUPTI_ACTIVITY_KIND_KERNEL"]
    finally:
        conn.close()


def test_a_misspelt_subcommand_is_named(tmp_path):
    rc, _, err = run_cli("dif", tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    assert rc == 2 and "did you mean the subcommand `analyze-trace diff`?" in one_line_error(err)
    rc, _, err = run_cli("help")
    assert rc == 2 and "did you mean `analyze-trace --help`?" in one_line_error(err)
    rc, _, err = run_cli(tmp_path / "nope.sqlite")          # a path that is no near miss: as before
    assert rc == 2 and "did you mean" not in one_line_error(err)


@pytest.mark.skipif(not (REAL / "sglang_server.sqlite").exists(), reason="fixtures not unpacked")
def test_a_report_left_out_of_a_directory_is_named_under_the_inputs(tmp_path):
    """Not only in the notes at the end (line ~140 of the report): under the input lines at the top."""
    shutil.copy(REAL / "sglang_server.sqlite", tmp_path / "a.sqlite")
    other = sqlite3.connect(tmp_path / "other.sqlite")
    other.execute("CREATE TABLE t (x)")
    other.commit()
    other.close()
    rc, out, err = run_cli(tmp_path)
    assert rc == 0, err
    top = out.splitlines()[:4]
    assert any(line.startswith("  left out ") and "other.sqlite" in line for line in top), top
    assert "left out (--strict to stop instead)" in " ".join(out.split())      # and its note (wrapped anywhere)
