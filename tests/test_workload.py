"""spec_workload on CPU torch: the SGLang-shaped module tree, the spawned ranks reached by the
shim's .pth hook, the accept-length distribution and the JSON it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from nvtx_annotate.pth import PTH_LINE  # noqa: E402
from nvtx_annotate.check import resolve_static  # noqa: E402
from nvtx_annotate.targets import TARGETS  # noqa: E402
from spec_workload.cli import accept_sampler, expected_accept  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--hidden", "32", "--vocab", "64", "--reqs", "4", "--device", "cpu"]


def test_workload_mirrors_the_sglang_targets():
    rows = resolve_static(str(REPO), "spec_workload")
    found = {r["target"].split(":", 1)[1] for r in rows if r["found"]}
    assert {
        "EAGLEWorker.forward_batch_generation", "EAGLEWorker.draft", "EAGLEWorker.verify",
        "EAGLEWorker.forward_draft_extend_after_decode", "GroupCoordinator.all_reduce",
        "GroupCoordinator.__init__", "CudaGraphRunner.replay", "EAGLEDraftCudaGraphRunner.replay",
        "EAGLEDraftExtendCudaGraphRunner.replay",
    } <= found


def test_accept_sampler_is_seeded_and_capped():
    a = accept_sampler([0.1, 0.2, 0.3, 0.4], steps=2, seed=5)
    b = accept_sampler([0.1, 0.2, 0.3, 0.4], steps=2, seed=5)
    xs, ys = a(1000), b(1000)
    assert xs == ys and max(xs) == 2 and min(xs) == 0
    # P(0)=.1, P(1)=.2, P(>=2)=.7 -> mean 1.6
    assert expected_accept([0.1, 0.2, 0.3, 0.4], 2) == pytest.approx(1.6)
    assert sum(xs) / len(xs) == pytest.approx(1.6, abs=0.08)


def _run(args, tmp_path, shim=True, timeout=240):
    """Runs the workload with the .pth hook reachable by every spawned interpreter: a
    sitecustomize on PYTHONPATH adds a site dir holding exactly the line `install-pth` writes."""
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    (site_dir / "specprof_nvtx.pth").write_text(PTH_LINE)
    boot = tmp_path / "boot"
    boot.mkdir(exist_ok=True)
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(boot), str(REPO)]),
               SPECPROF_NVTX_PACKAGE="spec_workload", SPECPROF_NVTX_BACKEND="record")
    env.pop("SPECPROF_NVTX", None)
    if shim:
        env["SPECPROF_NVTX"] = "1"
    out = tmp_path / "w.json"
    r = subprocess.run([sys.executable, "-m", "spec_workload", *SMALL, *args, "--out-json", str(out)],
                       env=env, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def test_two_spawned_ranks_are_annotated_through_the_pth_hook(tmp_path):
    d = _run(["--world", "2", "--steps", "3", "--cycles", "4", "--warmup", "1", "--eager"], tmp_path)
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    pids = {r["pid"] for r in d["ranks"]}
    assert len(pids) == 2 and os.getpid() not in pids
    for r in d["ranks"]:
        assert r["world"] == 2 and r["backend"] == "gloo" and r["cuda_graphs"] is False
        assert r["shim_installed"] is True
        assert set(r["patched"]) >= {"decode_cycle", "draft", "draft_extend", "verify", "allreduce",
                                     "graph_replay_draft", "graph_replay_draft_extend",
                                     "graph_replay_verify", "accept", "rank"}
        # 1 warmup + 4 cycles, one accept mark each, one rank mark per process, no shim fault
        assert r["shim_stats"] == {"cycles": 5, "prefills": 0, "marks": 5, "rank_marks": 1, "config_marks": 0, "faults": 0,
                                   "faults_by_target": {}}
        (run,) = r["runs"]
        assert run["steps"] == 3 and run["cycles"] == 4 and len(run["per_cycle"]) == 4
        for c in run["per_cycle"]:
            assert c["tokens"] == c["accepted_tokens"] + 4 and 0 <= c["accepted_tokens"] <= 12
        assert run["tokens"] == sum(c["tokens"] for c in run["per_cycle"])
        assert run["tokens_per_s"] == pytest.approx(run["tokens"] / (run["wall_ns"] / 1e9))
    # same seed on every rank: identical accept lengths, like SGLang's TP ranks
    acc = [[c["accepted_tokens"] for c in r["runs"][0]["per_cycle"]] for r in d["ranks"]]
    assert acc[0] == acc[1]


def test_shim_off_leaves_workload_untouched(tmp_path):
    d = _run(["--world", "1", "--steps", "2", "--cycles", "2", "--warmup", "0"], tmp_path, shim=False)
    (r,) = d["ranks"]
    assert r["shim_installed"] is False and r["patched"] == {} and r["shim_stats"]["cycles"] == 0


def test_sweep_measures_every_step_count_and_the_baseline(tmp_path):
    d = _run(["--world", "1", "--sweep-steps", "1,2,3", "--cycles", "3", "--warmup", "1",
              "--accept-dist", "0,0,0,1"], tmp_path, shim=False)
    runs = d["ranks"][0]["runs"]
    assert [(x["mode"], x["steps"]) for x in runs] == [("nospec", None), ("spec", 1), ("spec", 2), ("spec", 3)]
    assert runs[0]["tokens"] == 3 * 4  # baseline: one token per request per step
    # accept-dist all mass on 3 accepted: capped at the step count
    for x in runs[1:]:
        assert x["expected_accept_per_req"] == x["steps"]
        assert all(c["accepted_tokens"] == 4 * x["steps"] for c in x["per_cycle"])
        assert x["tokens"] == 3 * 4 * (x["steps"] + 1)
