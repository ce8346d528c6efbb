"""Every case of docs/bad_input.md's table "Every case, its exit code and what it says" reproduced: the
table is read from the document, each row's case is built here, and the exit code and the verbatim
text must be what the document says (a row without a reproduction, or a reproduction without a row,
fails too)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from analyze import cli

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
DOC = ROOT / "docs" / "bad_input.md"
GRAPH = REAL / "h200_1proc_graphs_graphlevel.sqlite"      # small, one process, every op table
EAGER = REAL / "h200_4proc_eager.sqlite"                   # eager: kernel launches, kernels, memcpys
LOST = REAL / "sglang_eager_lost_cuda.sqlite"              # real SGLang: the worker's CUDA data lost
TAIL = REAL / "sglang_graphs.sqlite"                       # real SGLang: the last ~3 s of CUDA data lost
DAY_NS = 86_400 * 10**9


def documented_cases() -> dict[str, tuple[int, str | None]]:
    """case -> (exit code, verbatim text or None) from the document's table."""
    text = DOC.read_text()
    section = text.split("## Every case, its exit code and what it says", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"^\| `([a-z0-9-]+)` \|.*\| (\d+) \| (.*) \|$", line)
        if not m:
            continue
        said = m.group(3).strip()
        verbatim = None if said.startswith("(") else said.strip("`")
        out[m.group(1)] = (int(m.group(2)), verbatim)
    return out


# ------------------------------------------------------------------ helpers

class Run:
    def __init__(self, tmp: Path):
        self.tmp = tmp

    def cli(self, *args) -> tuple[int, str]:
        """analyze-trace in this process, in the scratch directory: (exit code, stdout + stderr)."""
        out, err = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.tmp)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = cli.main([str(a) for a in args])
        finally:
            os.chdir(cwd)
        return rc, out.getvalue() + err.getvalue()

    def cli_leaving(self, path: Path, *args) -> tuple[int, str]:
        """:meth:`cli`, checking that ``path`` (an input the command must not write) has the same
        bytes afterwards."""
        before = path.read_bytes()
        out = self.cli(*args)
        assert path.read_bytes() == before, f"{path.name} was changed"
        return out

    def sub(self, *args, module: str = "analyze.cli", timeout: float = 120) -> tuple[int, str, str]:
        proc = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True,
                              cwd=self.tmp, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        return proc.returncode, proc.stdout, proc.stderr

    def copy(self, src: Path, name: str) -> Path:
        dst = self.tmp / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, dst)
        dst.chmod(0o644)
        return dst

    def sql(self, path: Path, *statements: str) -> None:
        with sqlite3.connect(path) as c:
            for s in statements:
                c.execute(s)

    def ranks(self, directory: str = "runs", n: int = 2) -> list[Path]:
        """``n`` per-rank reports (synthetic, one rank each) in ``directory``, named rank0.sqlite, ..."""
        from fixtures.synth import TraceSpec, write_trace

        d = self.tmp / directory
        paths, _ = write_trace(TraceSpec(ranks=n, cycles=2, one_file=False), d)
        out = []
        for i, p in enumerate(sorted(paths)):
            q = d / f"rank{i}.sqlite"
            if Path(p) != q:
                os.replace(p, q)
            out.append(q)
        return out


def set_host(path: Path, host: str) -> None:
    with sqlite3.connect(path) as c:
        c.execute("CREATE TABLE IF NOT EXISTS TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, "
                  "name TEXT, nameEnum INTEGER, value TEXT)")
        c.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")
        c.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (1, 'Local (CLI)', 'Hostname', 619, ?)", (host,))


def drop_cuda(r: Run, path: Path, *, runtime: bool = True, nvtx: bool = False) -> None:
    tables = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"] + (["CUPTI_ACTIVITY_KIND_RUNTIME"] if runtime else []) + \
        (["NVTX_EVENTS"] if nvtx else [])
    r.sql(path, *[f"DROP TABLE IF EXISTS {t}" for t in tables], "DELETE FROM DIAGNOSTIC_EVENT")


def without_not_null(r: Run, path: Path, table: str) -> None:
    """``table`` rebuilt without its NOT NULL constraints (CREATE TABLE AS keeps no constraint)."""
    r.sql(path, f"CREATE TABLE tmp_copy AS SELECT * FROM {table}", f"DROP TABLE {table}",
          f"ALTER TABLE tmp_copy RENAME TO {table}")


def json_totals(path: Path) -> list[dict]:
    return json.loads(path.read_text())["totals"]


def sound(path: Path) -> None:
    """No negative figure, kernel time never above busy time, exclusive + unattributed = busy."""
    doc = json.loads(path.read_text())
    for t in doc["totals"]:
        assert 0 <= t["kernel_ns"] <= t["busy_ns"], t
    excl = {}
    for p in doc["phases"]:
        assert p["exclusive_ns"] >= 0 and p["kernel_ns"] >= 0 and p["busy_ns"] >= 0, p
        excl[p["rank"]] = excl.get(p["rank"], 0) + (p["exclusive_ns"] if p["phase"] != "other" else 0)
    for t in doc["totals"]:
        assert excl.get(t["rank"], 0) + t["unattributed_ns"] == t["busy_ns"], t


# ------------------------------------------------------------------ the cases: each returns (rc, text)

def case_output_is_input(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    before = run.read_bytes()
    rc, text = r.cli("run.sqlite", "--json", "run.sqlite", "-q")
    for flag in ("--html",):
        assert r.cli("run.sqlite", flag, "run.sqlite", "-q")[0] == 8
    assert run.read_bytes() == before
    return rc, text


def case_output_symlink_to_input(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    (r.tmp / "out.json").symlink_to("run.sqlite")
    before = run.read_bytes()
    out = r.cli("run.sqlite", "--json", "out.json", "-q")
    assert run.read_bytes() == before and (r.tmp / "out.json").is_symlink()
    return out


def case_output_hard_link_to_input(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    os.link(run, r.tmp / "hard.json")
    return r.cli_leaving(run, "run.sqlite", "--json", "hard.json", "-q")


def case_output_is_wal_of_input(r: Run):
    r.copy(GRAPH, "run.sqlite")
    (r.tmp / "run.sqlite-wal").write_bytes(b"")
    out = r.cli("run.sqlite", "--json", "run.sqlite-wal", "-q")
    assert (r.tmp / "run.sqlite-wal").read_bytes() == b""
    return out


def case_output_is_sibling_rank(r: Run):
    paths = r.ranks()
    return r.cli_leaving(paths[1], "runs/", "--html", "runs/rank1.sqlite", "-q")


def case_diff_output_is_input(r: Run):
    r.copy(GRAPH, "run.sqlite")
    assert r.cli("run.sqlite", "--json", "before.json", "-q")[0] == 0
    shutil.copy(r.tmp / "before.json", r.tmp / "after.json")
    return r.cli_leaving(r.tmp / "before.json", "diff", "before.json", "after.json", "--json", "before.json", "-q")


def case_whatif_output_is_input(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    return r.cli_leaving(run, "whatif", "run.sqlite", "--json", "run.sqlite", "-q")


def case_output_existing_report(r: Run):
    r.copy(GRAPH, "run.sqlite")
    other = r.copy(GRAPH, "other.sqlite")
    return r.cli_leaving(other, "run.sqlite", "--json", "other.sqlite", "-q")


def case_output_existing_report_forced(r: Run):
    r.copy(GRAPH, "run.sqlite")
    r.copy(GRAPH, "other.sqlite")
    rc, text = r.cli("run.sqlite", "--json", "other.sqlite", "-q", "--force")
    assert json.loads((r.tmp / "other.sqlite").read_text())["schema"] == 2
    return rc, text


def case_output_dev_null(r: Run):
    r.copy(GRAPH, "run.sqlite")
    rc, text = r.cli("run.sqlite", "--json", "/dev/null", "--html", "/dev/null", "-q")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    return rc, text


def case_output_stdout(r: Run):
    r.copy(GRAPH, "run.sqlite")
    rc, out, err = r.sub("run.sqlite", "--json", "-", "-q")
    assert json.loads(out)["schema"] == 2, err
    return rc, out + err


def case_output_fifo(r: Run):
    r.copy(GRAPH, "run.sqlite")
    fifo = r.tmp / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    rc, text = r.cli("run.sqlite", "--json", "pipe", "-q")
    reader.join(timeout=60)
    assert json.loads(got[0])["schema"] == 2
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    return rc, text


def case_output_directory(r: Run):
    r.copy(GRAPH, "run.sqlite")
    (r.tmp / "outdir").mkdir()
    return r.cli("run.sqlite", "--json", "outdir", "-q")


def case_outputs_one_file(r: Run):
    r.copy(GRAPH, "run.sqlite")
    rc, text = r.cli("run.sqlite", "--json", "out.json", "--html", "out.json", "-q")
    assert not (r.tmp / "out.json").exists()
    return rc, text


def case_output_trailing_slash(r: Run):
    r.copy(GRAPH, "run.sqlite")
    rc, text = r.cli("run.sqlite", "--json", "newdir/", "-q")
    assert not (r.tmp / "newdir").exists()
    return rc, text


def case_scrub_target_exists(r: Run):
    r.copy(GRAPH, "run.sqlite")
    (r.tmp / "s.sqlite").write_text("mine\n")
    out = r.cli("scrub", "run.sqlite", "-o", "s.sqlite")
    assert (r.tmp / "s.sqlite").read_text() == "mine\n"
    assert r.cli("scrub", "run.sqlite", "-o", "s.sqlite", "--force")[0] == 0
    return out


def case_scrub_onto_input(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    return r.cli_leaving(run, "scrub", "run.sqlite", "-o", "run.sqlite", "--force")


def case_profile_trace_existing_report(r: Run):
    nsys = r.tmp / "nsys"
    nsys.write_text("#!/bin/sh\necho 'NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0'\n")
    nsys.chmod(0o755)
    (r.tmp / "run1.nsys-rep").write_bytes(b"NVIDIA Tegra Profiler earlier run")
    rc, out, err = r.sub("--nsys", nsys, "--no-install-pth", "-o", "run1", "--", "true",
                         module="nvtx_annotate.profile_trace")
    assert (r.tmp / "run1.nsys-rep").read_bytes() == b"NVIDIA Tegra Profiler earlier run"
    return rc, out + err


def case_fifo_input(r: Run):
    os.mkfifo(r.tmp / "pipe.sqlite")
    rc, out, err = r.sub("pipe.sqlite", "-q", "--cache", timeout=60)      # no hang, not even for the cache key
    return rc, out + err


def case_device_input(r: Run):
    return r.cli("/dev/zero", "-q")


def case_non_utf8_path(r: Run):
    name = os.fsdecode(b"r\xff.sqlite")
    r.copy(GRAPH, name)
    rc, text = r.cli(name, "--json", "o.json", "--csv", "csv", "--parquet", "pq", "--html", "o.html", "--cache")
    assert rc == 0, text
    assert r.cli(name, "--memory-budget", "1MB", "-q")[0] == 0
    assert json.loads((r.tmp / "o.json").read_text())["inputs"][0]["path"] == "r\\xff.sqlite"
    return rc, text


def case_same_report_twice(r: Run):
    r.copy(GRAPH, "run.sqlite")
    return r.cli("run.sqlite", "run.sqlite", "-q")


def case_same_directory_twice(r: Run):
    r.ranks()
    return r.cli("runs", "runs", "-q")


def case_same_report_allowed(r: Run):
    r.copy(GRAPH, "run.sqlite")
    return r.cli("run.sqlite", "run.sqlite", "--allow-mixed")


def case_different_hosts(r: Run):
    a, b = r.ranks()
    set_host(a, "node-a")
    set_host(b, "node-b")
    return r.cli("runs/rank0.sqlite", "runs/rank1.sqlite", "-q")


def _sessions_apart(r: Run):
    a, b = r.ranks()
    r.sql(b, f"UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = utcEpochNs + {776 * DAY_NS}")


def case_sessions_apart(r: Run):
    _sessions_apart(r)
    return r.cli("runs/rank0.sqlite", "runs/rank1.sqlite", "-q")


def case_mixed_allowed(r: Run):
    _sessions_apart(r)
    return r.cli("runs/rank0.sqlite", "runs/rank1.sqlite", "--allow-mixed")


def case_unreadable_in_directory(r: Run):
    r.ranks()
    (r.tmp / "runs" / "bad.sqlite").write_text("not a report\n")
    rc, text = r.cli("runs", "--json", "o.json")
    assert rc == 0 and sorted(t["rank"] for t in json_totals(r.tmp / "o.json")) == [0, 1]
    return rc, text


def case_unreadable_in_directory_strict(r: Run):
    r.ranks()
    (r.tmp / "runs" / "bad.sqlite").write_text("not a report\n")
    return r.cli("runs", "--strict", "-q")


def case_failed_capture_in_directory(r: Run):
    r.ranks()
    r.copy(LOST, "runs/lost.sqlite")
    rc, text = r.cli("runs", "--json", "o.json")
    assert rc == 0 and len(json_totals(r.tmp / "o.json")) == 2
    return rc, text


def case_jobs_below_one(r: Run):
    r.copy(GRAPH, "run.sqlite")
    rc, out, err = r.sub("run.sqlite", "--jobs", "0", "-q")
    return rc, out + err


def case_stale_wal_cache(r: Run):
    import analyze

    run = r.copy(GRAPH, "w.sqlite")
    writer = sqlite3.connect(run)
    try:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1 WHERE rowid = 1")
        writer.commit()
        first = int(analyze.load(run, cache=True).totals["kernel_ns"].sum())
        writer.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000")    # only the -wal changes
        writer.commit()
        assert (r.tmp / "w.sqlite-wal").stat().st_size > 0
        second = int(analyze.load(run, cache=True).totals["kernel_ns"].sum())
        fresh = int(analyze.load(run).totals["kernel_ns"].sum())
    finally:
        writer.close()
    assert second == fresh == first + 1000 * 244
    return 0, ""


def _mutated(r: Run, *statements, rebuild: str | None = None) -> tuple[int, str]:
    run = r.copy(GRAPH, "run.sqlite")
    if rebuild:
        without_not_null(r, run, rebuild)
    r.sql(run, *statements)
    rc, text = r.cli("run.sqlite", "--json", "o.json")
    assert rc == 0, text
    sound(r.tmp / "o.json")
    def left_out(name: str) -> list:
        return [(n["code"], n["count"]) for n in json.loads((r.tmp / name).read_text())["notes"] if n["code"] in (
            "bad_timestamps", "negative_durations", "outside_session", "duplicate_rows")]

    whole = left_out("o.json")
    assert whole
    # the same rows left out, and said, in chunks; in chunks filling the cache; from that cache
    for out in ("c.json", "c1.json", "c2.json"):
        extra = ("--cache",) if out != "c.json" else ()
        rc_chunked, _ = r.cli("run.sqlite", "--memory-budget", "1MB", *extra, "--json", out, "--force")
        assert rc_chunked == 0 and left_out(out) == whole, out
    return rc, text


def case_end_before_start(r: Run):
    return _mutated(r, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = end, end = start WHERE rowid % 4 = 0")


def case_duplicate_rows(r: Run):
    return _mutated(r, "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")


def case_compressed_report(r: Run):
    import gzip
    import lzma

    data = GRAPH.read_bytes()[:1 << 16]
    (r.tmp / "run.sqlite.gz").write_bytes(gzip.compress(data))
    rc, text = r.cli("run.sqlite.gz", "-q")
    assert rc == 4 and "(gzip-compressed); decompress it first (`gzip -dc run.sqlite.gz > run.sqlite`)" in text, text
    (r.tmp / "my trace.sqlite").write_bytes(lzma.compress(data))           # no suffix to drop; a space
    rc, text = r.cli("my trace.sqlite", "-q")
    assert rc == 4 and "(`xz -dc 'my trace.sqlite' > 'my trace.sqlite.sqlite'`)" in text, text
    (r.tmp / "run.sqlite.xz").write_bytes(lzma.compress(data))
    return r.cli("run.sqlite.xz", "-q")


def case_text_timestamp(r: Run):
    return _mutated(r, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' || start WHERE rowid % 5 = 0")


def case_null_timestamp(r: Run):
    return _mutated(r, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid % 5 = 0",
                    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL WHERE rowid % 7 = 0",
                    rebuild="CUPTI_ACTIVITY_KIND_KERNEL")


def _without_paths(doc):
    """A JSON result without the values that name its report's file."""
    if isinstance(doc, dict):
        return {k: _without_paths(v) for k, v in doc.items() if k not in ("input", "inputs", "path")}
    if isinstance(doc, list):
        return [_without_paths(v) for v in doc]
    return doc


def case_rowid_gaps(r: Run):
    same = r.copy(EAGER, "orig.sqlite")
    run = r.copy(EAGER, "run.sqlite")
    r.sql(run, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid + (1 << 40) WHERE rowid > 1000",
          "UPDATE NVTX_EVENTS SET rowid = rowid + (1 << 40) WHERE rowid > 500",
          "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = -rowid",
          "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = -rowid * 1000")
    text = ""
    for budget in ("none", "1MB"):
        docs = []
        for report in (same, run):
            rc, said = r.cli(report.name, "--memory-budget", budget, "--json", f"{report.stem}.json", "--force")
            assert rc == 0, said
            docs.append(_without_paths(json.loads((r.tmp / f"{report.stem}.json").read_text())))
            text += said
        assert docs[0] == docs[1], budget
    return 0, text


def case_outside_session(r: Run):
    return _mutated(r, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + (SELECT max(duration) FROM "
                       "ANALYSIS_DETAILS) WHERE rowid % 10 = 0")


def case_every_op_corrupt(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    r.sql(run, *[f"DROP TABLE {t}" for t in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                                               "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")],
          "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x'")
    rc, text = r.cli("run.sqlite", "-q")
    assert r.cli("run.sqlite", "-q", "--memory-budget", "1MB")[0] == rc
    return rc, text


def case_kernel_table_missing(r: Run):
    run = r.copy(EAGER, "run.sqlite")
    r.sql(run, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    return r.cli("run.sqlite", "-q")


def case_cuda_data_lost(r: Run):
    r.copy(LOST, "lost.sqlite")
    rc, text = r.cli("lost.sqlite")
    assert "sglang:decode_cycle" in text              # what the NVTX holds, before the error line
    assert "profile with -t cuda" not in text
    return rc, text


def case_cuda_tail_lost(r: Run):
    r.copy(TAIL, "graphs.sqlite")
    rc, text = r.cli("graphs.sqlite", "--json", "o.json")
    note = next(n for n in json.loads((r.tmp / "o.json").read_text())["notes"] if n["code"] == "lost_cuda_tail")
    assert note["count"] == 48 and "--cuda-flush-interval" in note["message"]
    assert "Not all CUDA events might have been collected." in note["message"]
    return rc, text


def case_nsys_said_why(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    drop_cuda(r, run, nvtx=True)
    r.sql(run, "INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
               "VALUES (5, 1, 1, 3, 'CUDA driver is not supported by this version of CUPTI: CUDA tracing is "
               "disabled.', 281474976710656)")
    return r.cli("run.sqlite", "-q")


def case_nsys_errors_noted(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    r.sql(run, "INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
               "VALUES (5, 1, 1, 3, 'Event requestor failed: Source ID=1 Type=ErrorInformation.', NULL)")
    return r.cli("run.sqlite")


def case_uvm_migrations(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    r.sql(run, "CREATE TABLE two AS SELECT * FROM CUPTI_ACTIVITY_KIND_MEMCPY LIMIT 2",
          "UPDATE two SET copyKind = 11, correlationId = 0, start = start + 1",
          "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY SELECT * FROM two", "DROP TABLE two")
    rc, text = r.cli("run.sqlite", "--json", "o.json")
    notes = {n["code"]: n for n in json.loads((r.tmp / "o.json").read_text())["notes"]}
    assert notes["uvm_migrations"]["count"] == 2 and "unlinked_ops" not in notes
    return rc, text


def case_empty_capture(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    drop_cuda(r, run, nvtx=True)
    return r.cli("run.sqlite", "-q")


def case_nvtx_only(r: Run):
    run = r.copy(GRAPH, "run.sqlite")
    drop_cuda(r, run)
    return r.cli("run.sqlite", "-q")


def case_sigterm(r: Run):
    from tests.test_processes import start, wait_for

    run = r.copy(GRAPH, "run.sqlite")
    proc = start(r.tmp, "json", run, "--json", r.tmp / "r.json", "-q")
    wait_for(proc, "writing")
    proc.terminate()
    rc = proc.wait(timeout=60)
    err = proc.stderr.read()
    assert not [p for p in r.tmp.iterdir() if p.name.endswith(".tmp")]
    return rc, err


CASES = {name[len("case_"):].replace("_", "-"): fn for name, fn in list(globals().items()) if name.startswith("case_")}


def test_every_documented_case_has_a_reproduction():
    assert set(documented_cases()) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_documented_case(case, tmp_path):
    if not GRAPH.exists():
        pytest.skip("fixtures not unpacked")
    exit_code, said = documented_cases()[case]
    rc, text = CASES[case](Run(tmp_path))
    assert rc == exit_code, text
    if said is not None:       # the terminal report wraps long notes: compared with whitespace collapsed
        assert " ".join(said.split()) in " ".join(text.split()), text
    if rc not in (0, 130, 143) and "analyze-trace: error:" in text:
        assert text.count("analyze-trace: error:") == 1 and "Traceback" not in text, text
