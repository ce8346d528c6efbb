"""profile-trace: the nsys command it builds, its errors, and (with nsys on PATH) a real run of
the workload whose NVTX ranges come back in the SQLite export."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtx_annotate import profile_trace as pt

REPO = Path(__file__).resolve().parents[1]


def run_pt(args, env=None, cwd=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "nvtx_annotate.profile_trace", *args], capture_output=True,
                          text=True, env=e, cwd=cwd or REPO, timeout=600)


def fake_nsys(tmp_path, version_line):
    p = tmp_path / "nsys"
    p.write_text(f"#!/bin/sh\necho '{version_line}'\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return str(p)


def test_dry_run_prints_the_full_nsys_command(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
    r = run_pt(["--dry-run", "--nsys", nsys, "-o", "run1", "--package", "spec_workload", "--duration", "30",
                "--delay", "5", "--stats", "--", "python3", "-m", "sglang.launch_server", "--tp", "8"])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == (
        "(T=$(date +%s%N); SPECPROF_CLOCK_STOP_AT_NS=$((T+4000000000)) "
        "SPECPROF_CLOCK_MARKS_AT_NS=$((T+10000000000)),$((T+20000000000)) "
        f"SPECPROF_NVTX=1 SPECPROF_NVTX_PACKAGE=spec_workload {nsys} profile -t cuda,nvtx,osrt "
        "--trace-fork-before-exec=true --cuda-graph-trace=node --cuda-flush-interval=1000 -o run1 --delay=5 "
        "--duration=30 --sample=none --cpuctxsw=none python3 -m sglang.launch_server --tp 8)")
    # the line runs as printed: the command gets the clock's times on the wall clock of its start
    show = tmp_path / "show_env"
    show.write_text("#!/bin/sh\necho \"$SPECPROF_CLOCK_STOP_AT_NS $SPECPROF_CLOCK_MARKS_AT_NS $SPECPROF_NVTX\"\n")
    show.chmod(0o755)
    line = lines[0].replace(nsys + " profile", str(show) + " profile")
    t0 = time.time_ns()
    got = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True).stdout.split()
    stop, marks, nvtx = int(got[0]), [int(x) for x in got[1].split(",")], got[2]
    assert nvtx == "1" and stop - t0 == pytest.approx(4e9, abs=2e9)
    assert [m - stop for m in marks] == [6_000_000_000, 16_000_000_000]
    assert lines[1] == f"{nsys} export --type sqlite --force-overwrite true -o run1.sqlite run1.nsys-rep"
    assert lines[2].startswith(f"{nsys} stats -r cuda_gpu_kern_sum,nvtx_gpu_proj_sum --format csv")
    assert lines[-1] == "analyze-trace run1.sqlite --json run1.json"
    # --delay: when the shim's clock stops (1 s before nsys is due at 5 s) and its marks go out (5 and 15 s after that,
    # inside the first third and two thirds of the 30 s collection)
    assert "the shim's clock stops 4 s after the start and its marks are written at 10 s, 20 s" in r.stderr


def test_dry_run_cuda_profiler_api_capture(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2024.6.1")
    r = run_pt(["--dry-run", "--nsys", nsys, "-o", "x.nsys-rep", "--capture", "cudaprofilerapi",
                "--cuda-graph-trace", "graph", "--", "srv"])
    first = r.stdout.splitlines()[0]
    assert "--capture-range=cudaProfilerApi --capture-range-end=stop" in first
    assert "--cuda-graph-trace=graph" in first and " -o x " in first and "--delay" not in first


def test_missing_nsys_is_a_clear_error(tmp_path):
    r = run_pt(["-o", str(tmp_path / "r"), "--", "true"], env={"PATH": str(tmp_path), "NSYS": ""})
    assert r.returncode == 127
    assert "nsys not found" in r.stderr and "--nsys" in r.stderr


def test_too_old_nsys_is_refused(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2021.3.1.54-ee9c30a")
    r = run_pt(["--nsys", nsys, "-o", str(tmp_path / "r"), "--", "true"])
    assert r.returncode == 2
    assert "nsys 2021.3.1.54 is too old; need >= 2022.4" in r.stderr


def test_no_command_is_a_usage_error():
    r = run_pt(["--dry-run"])
    assert r.returncode == 2 and "no command given" in r.stderr


def test_version_parsing_and_stats_report_names():
    assert pt.parse_nsys_version("NVIDIA Nsight Systems version 2022.4.2.1-df9881f") == (2022, 4, 2, 1)
    assert pt.parse_nsys_version("2025.3.1") == (2025, 3, 1)
    assert pt.parse_nsys_version("garbage") is None
    assert pt.stats_reports((2022, 4, 2, 1)) == "gpukernsum,nvtxsum"
    assert pt.stats_reports((2025, 3, 1)) == "cuda_gpu_kern_sum,nvtx_gpu_proj_sum"


@pytest.mark.nsys
def test_real_nsys_records_the_shim_in_spawned_ranks(tmp_path):
    pytest.importorskip("torch")
    if shutil.which("nsys") is None:
        pytest.skip("nsys not on PATH")
    from helpers.pth_site import hook_pythonpath

    # the .pth hook that `pip install specprof` puts into site-packages, here in a site dir of its own
    # (a sitecustomize on PYTHONPATH adds it): profile-trace itself writes nothing into site-packages
    from fixtures import nsys_record

    secret = "hunter2-specprof-secret"
    pythonpath, base = hook_pythonpath(tmp_path), tmp_path

    def run(attempt):
        nonlocal tmp_path
        tmp_path = base / f"try{attempt}"
        tmp_path.mkdir()
        return run_pt(["-o", "t", "--package", "spec_workload", "-t", "nvtx,osrt", "--scrub",
                       "--nsys-arg=--sample=none", "--nsys-arg=--cpuctxsw=none", "--",
                       sys.executable, "-m", "spec_workload", "--world", "2", "--device", "cpu", "--hidden", "32",
                       "--vocab", "64", "--reqs", "2", "--steps", "2", "--cycles", "2", "--warmup", "0", "--eager"],
                      cwd=tmp_path, env={"SPECPROF_TEST_TOKEN": secret, "PYTHONPATH": pythonpath})
    r = nsys_record.with_retry(run)     # nsys 2022.4's rare agent failures (no report): once more
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("analyze-trace t.sqlite --json t.json")
    # --scrub: the shareable copy has no trace of the environment, the original still does
    assert secret.encode() in (tmp_path / "t.sqlite").read_bytes()
    assert secret.encode() not in (tmp_path / "t.scrubbed.sqlite").read_bytes()
    assert str(tmp_path).encode() not in (tmp_path / "t.scrubbed.sqlite").read_bytes()
    con = sqlite3.connect(tmp_path / "t.sqlite")
    rows = con.execute("SELECT eventType, COALESCE(e.text, s.value), (globalTid >> 24) & 16777215 "
                       "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId").fetchall()
    pids = {p for _, _, p in rows}
    assert len(pids) == 2  # both spawned ranks, none from the launcher
    for pid in pids:
        names = [t for e, t, p in rows if p == pid and e == 59]
        assert names.count("decode_cycle") == 2 and names.count("verify") == 2
        assert names.count("allreduce") == 2 * 4
        marks = [t for e, t, p in rows if p == pid and e == 34]
        assert marks[0] in ("rank=0 world=2 device=cpu", "rank=1 world=2 device=cpu")
        assert len([m for m in marks if m.startswith("accept_len=")]) == 2
        assert all(" cycle=" in m for m in marks if m.startswith("accept_len="))
        payloads = [v for (v,) in con.execute(
            "SELECT e.int64Value FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE eventType = 59 "
            "AND COALESCE(e.text, s.value) = 'decode_cycle' AND (globalTid >> 24) & 16777215 = ?", (pid,))]
        assert payloads == [1, 2]  # the cycle numbers, recorded by nsys 2022.4 as the push payload
    scrubbed = sqlite3.connect(tmp_path / "t.scrubbed.sqlite").execute(
        "SELECT eventType, COALESCE(e.text, s.value), (globalTid >> 24) & 16777215 "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId").fetchall()
    assert scrubbed == rows



def test_cpu_sampling_off_by_default_unless_asked(tmp_path):
    """The analyzer reads no CPU samples or context switches: off by default (nsys' sampling costs time in
    every TP worker); a --nsys-arg that sets either wins."""
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
    r = run_pt(["--dry-run", "--nsys", nsys, "-o", "r", "--nsys-arg=--sample=cpu", "--", "python3", "x.py"])
    first = r.stdout.splitlines()[0]
    assert "--cpuctxsw=none" in first and "--sample=cpu" in first and "--sample=none" not in first


def test_options_after_the_command_without_separator_are_refused(tmp_path):
    """`profile-trace CMD ... --dry-run` (no --) ran CMD with --dry-run passed to it: refused, exit 2."""
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
    r = run_pt(["--nsys", nsys, "python3", "-c", "pass", "--dry-run"])
    assert r.returncode == 2 and "--dry-run after the command" in r.stderr
    r = run_pt(["--version"])
    assert r.returncode == 0 and r.stdout.startswith("profile-trace ")


def test_dry_run_drive_shows_the_http_steps(tmp_path):
    nsys = fake_nsys(tmp_path, "NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
    r = run_pt(["--dry-run", "--nsys", nsys, "-o", "r", "--drive", "--capture", "cudaprofilerapi", "--sglang-steps",
                "400", "--requests", "32", "--concurrency", "4", "--", "python3", "-m", "sglang.launch_server",
                "--port", "30001"])
    assert r.returncode == 0, r.stderr
    plan = [ln for ln in r.stdout.splitlines() if ln.startswith("# --drive:")]
    assert plan[0].endswith("GET http://127.0.0.1:30001/health")
    assert any('/start_profile {"activities": ["CUDA_PROFILER"], "num_steps": 400}' in ln for ln in plan)
    assert "32 POST http://127.0.0.1:30001/generate, 4 at a time" in " ".join(plan)
    assert plan[-1].startswith("# --drive: stop the server as Ctrl-C would")


def test_a_command_failing_under_node_tracing_gets_the_graph_level_hint(tmp_path):
    """nsys's per-node graph tracing made real SGLang's graph replays fail (recipes/nsys_node_check.sh): a
    command that exits non-zero under --cuda-graph-trace=node gets one warning naming the way round it; under
    graph-level tracing it does not."""
    p = tmp_path / "nsys"
    p.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'NVIDIA Nsight Systems version 2025.3.1.90'; "
                 "exit 0; fi\nexit 134\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    for trace, hinted in (("node", True), ("graph", False)):
        r = run_pt(["--nsys", str(p), "-o", str(tmp_path / f"r_{trace}"), "--no-install-pth", "--cuda-graph-trace",
                    trace, "--", "true"])
        assert r.returncode == 134
        assert ("--cuda-graph-trace graph" in r.stderr) == hinted, r.stderr
        assert "nsys wrote no report" in r.stderr
