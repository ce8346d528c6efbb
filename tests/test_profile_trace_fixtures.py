"""The shim's ranges as recorded for real, read back by analyze-trace.

- fixtures/real/h200_shim_*.sqlite, h200_steps{1..6}, h200_nospec, h200_diff_*: nsys 2025.3.1 on
  one H200, recorded by spec_workload/record_all.sh through profile-trace (node-level CUDA graph
  tracing, the ctypes NVTX client in domain ``sglang``), scrubbed with analyze.tools.scrub.
- fixtures/real/cpu2022_shim.sqlite: nsys 2022.4.2 on a CPU-only machine (export schema 3.0),
  two spawned ranks reached through the .pth hook.
Each ``*.workload.json`` beside a trace is what the workload itself measured (rank 0).
"""

from __future__ import annotations

import csv
import json
import sqlite3
from functools import lru_cache
from pathlib import Path

import pytest

from helpers import cli_process

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "fixtures" / "real"
WARMUP, CYCLES, LAYERS = 2, 8, 4  # record_all.sh: --warmup 2 --cycles 8, --verify-layers 4


@lru_cache(maxsize=None)
def analyze(*names: str) -> dict:
    out = Path(f"/tmp/specprof_test_{'_'.join(names)}.json")
    paths = [str(REAL / f"{n}.sqlite") for n in names]
    r = cli_process.run([*paths, "--json", str(out), "-q"], cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(out.read_text())


def workload(name: str) -> dict:
    return json.loads((REAL / f"{name}.workload.json").read_text())


def phase(d, rank, name):
    (p,) = [p for p in d["phases"] if p["rank"] == rank and p["phase"] == name]
    return p


def kernel_instances(d, rank, name):
    return sum(k["instances"] for k in d["kernels"] if k["rank"] == rank and k["phase"] == name)


def stats_csv(name: str):
    with open(REAL / f"{name}.stats_nvtx_gpu_proj_sum.csv", newline="") as f:
        return [(r["Range"], r["Style"], int(r["Range Instances"]), int(r["Total Proj Time (ns)"]),
                 int(r["Total Range Time (ns)"]), int(r["Total GPU Ops"])) for r in csv.DictReader(f)]


def projection(d):
    return [(r["range"], r["style"], r["instances"], r["total_projected_ns"], r["total_range_ns"], r["gpu_ops"])
            for r in d["nvtx_projection"]]


@pytest.mark.parametrize("name", ["h200_shim_graphs_node", "h200_shim_4rank_single"])
def test_nvtx_projection_equals_nsys_stats(name):
    assert projection(analyze(name)) == stats_csv(name)


def test_one_process_cuda_graphs_node_level():
    d = analyze("h200_shim_graphs_node")
    (r,) = d["ranks"]
    assert r["rank"] == 0 and r["source"] == "mark"  # from the shim's `rank=0 world=1 device=0`
    n = WARMUP + CYCLES
    for ph in ("draft", "verify", "draft_extend"):
        assert phase(d, 0, ph)["instances"] == n
    # the all-reduces inside the captured verify graph emit no range; the 8 ranges are the eager
    # warm-up forwards before capture (2 warm-ups x 4 layers)
    assert phase(d, 0, "allreduce")["instances"] == 2 * LAYERS
    proj = {p[0]: p for p in projection(d)}
    for rng in ("decode_cycle", "draft", "graph_replay_draft", "verify", "graph_replay_verify",
                "draft_extend", "graph_replay_draft_extend"):
        assert proj[f"sglang:{rng}"][2] == n, rng
    # node-level graph tracing: 7 kernels per draft step (3 steps) + 2 per replay, per cycle
    assert kernel_instances(d, 0, "draft") == n * (7 * 3 + 2)
    # accepted tokens per cycle: the shim's accept marks == what the workload drew
    w = workload("h200_shim_graphs_node")["ranks"][0]["runs"][0]
    assert [c["accepted_tokens"] for c in d["cycles"]][WARMUP:] == [c["accepted_tokens"] for c in w["per_cycle"]]
    assert all(c["requests"] == 8 for c in d["cycles"])
    t = d["tokens"][0] if isinstance(d["tokens"], list) else d["tokens"]
    assert t["cycles"] == n and t["accepted_tokens"] == sum(c["accepted_tokens"] for c in d["cycles"])


def test_four_spawned_ranks_in_one_report():
    d = analyze("h200_shim_4rank_single")
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    assert all(r["source"] == "mark" for r in d["ranks"])
    w = workload("h200_shim_4rank_single")
    assert sorted(r["pid"] for r in d["ranks"]) == sorted(r["pid"] for r in w["ranks"])
    n = WARMUP + CYCLES
    acc = []
    for rank in range(4):
        assert phase(d, rank, "draft")["instances"] == n
        assert phase(d, rank, "verify")["instances"] == n
        # gloo: eager verify, one all-reduce range per layer per cycle
        assert phase(d, rank, "allreduce")["instances"] == n * LAYERS
        acc.append([c["accepted_tokens"] for c in d["cycles"] if c["rank"] == rank])
    assert acc[0] == acc[1] == acc[2] == acc[3]
    assert acc[0][WARMUP:] == [c["accepted_tokens"] for c in w["ranks"][0]["runs"][0]["per_cycle"]]
    proj = {p[0]: p for p in projection(d)}
    assert proj["sglang:allreduce"][2] == 4 * n * LAYERS


def test_one_report_per_process():
    names = [f"h200_shim_4rank_rank{r}" for r in range(4)]
    d = analyze(*names)
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    assert all(r["source"] == "mark" for r in d["ranks"])
    assert d["ranks"][0]["offset_ns"] == 0 and all(r["offset_ns"] != 0 for r in d["ranks"][1:])
    for rank in range(4):
        assert phase(d, rank, "allreduce")["instances"] == (WARMUP + CYCLES) * LAYERS


@pytest.mark.parametrize("k", range(1, 7))
def test_draft_steps_sweep(k):
    d = analyze(f"h200_steps{k}")
    n = WARMUP + CYCLES
    assert phase(d, 0, "draft")["instances"] == n
    assert kernel_instances(d, 0, "draft") == n * (7 * k + 2)
    w = workload(f"h200_steps{k}")["ranks"][0]["runs"][0]
    assert w["steps"] == k
    assert [c["accepted_tokens"] for c in d["cycles"]][WARMUP:] == [c["accepted_tokens"] for c in w["per_cycle"]]
    assert max(c["accepted_tokens"] for c in d["cycles"]) <= 8 * k


def test_nospec_baseline_and_unprofiled_truth():
    d = analyze("h200_nospec")
    assert phase(d, 0, "draft")["instances"] == 0
    assert phase(d, 0, "verify")["instances"] == WARMUP + CYCLES  # graph_replay_verify per step
    truth = json.loads((REAL / "h200_sweep_truth.json").read_text())
    runs = truth["ranks"][0]["runs"]
    assert [r["steps"] for r in runs] == [None, 1, 2, 3, 4, 5, 6]
    assert all(r["cycles"] == 200 and r["tokens_per_s"] > 0 for r in runs)


def test_diff_pair_differs_in_verify_layers_only():
    a, b = analyze("h200_diff_before"), analyze("h200_diff_after")
    n = WARMUP + CYCLES
    assert kernel_instances(a, 0, "draft") == kernel_instances(b, 0, "draft")
    # 4 more target layers, 5 kernels each (up, gelu, down, all-reduce, add), every cycle
    assert kernel_instances(b, 0, "verify") - kernel_instances(a, 0, "verify") == n * 4 * 5
    assert phase(b, 0, "verify")["kernel_ns"] > 1.5 * phase(a, 0, "verify")["kernel_ns"]


# ----------------------------------------------------------------------------- nsys 2022.4, CPU

def _nvtx_rows(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    rows = con.execute(
        "SELECT eventType, COALESCE(e.text, s.value), (globalTid >> 24) & 16777215, domainId, int64Value "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId").fetchall()
    ver = dict(con.execute("SELECT name, value FROM EXPORT_META_DATA").fetchall())
    return rows, ver


def test_cpu2022_shim_ranges_in_both_spawned_ranks():
    rows, ver = _nvtx_rows(REAL / "cpu2022_shim.sqlite")
    assert ver["EXPORT_PRODUCT_VERSION"].startswith("2022.4") and ver["EXPORT_SCHEMA_VERSION"] == "3.0.0"
    w = json.loads((REAL / "cpu2022_shim.workload.json").read_text())
    pids = sorted({r[2] for r in rows})
    assert len(pids) == 2 and sorted(r["pid"] for r in w["ranks"]) == pids
    sglang_domain = {pid: dom for t, txt, pid, dom, _ in rows if t == 75 and txt == "sglang"}
    assert set(sglang_domain) == set(pids)
    n = 1 + 4  # --warmup 1 --cycles 4
    for r in w["ranks"]:
        pid = r["pid"]
        mine = [x for x in rows if x[2] == pid and x[3] == sglang_domain[pid]]
        names = [x[1] for x in mine if x[0] == 59]
        for rng in ("decode_cycle", "draft", "verify", "draft_extend"):
            assert names.count(rng) == n, rng
        assert names.count("allreduce") == n * LAYERS
        assert not any(x.startswith("graph_replay") for x in names)  # eager run: no graph replays
        marks = [(x[1], x[4]) for x in mine if x[0] == 34]
        assert marks[0] == (f"rank={r['rank']} world=2 device=cpu", None)
        acc = marks[1:]
        assert len(acc) == n
        for text, payload in acc:
            assert text == f"accept_len={payload} reqs=4"
        assert [p for _, p in acc][1:] == [c["accepted_tokens"] for c in r["runs"][0]["per_cycle"]]


def test_cpu2022_trace_read_by_the_analyzer():
    """nsys 2022.4 (schema 3.0) on a CPU-only machine: no GPU time to attribute (exit 7, one line),
    but analyze-trace reads the shim's ranges back: ranks from the marks, and CPU range statistics
    equal to what nsys 2022.4's own `nsys stats -r nvtxsum` printed for the file."""
    out = Path("/tmp/specprof_test_cpu2022.json")
    out.unlink(missing_ok=True)
    r = cli_process.run([str(REAL / "cpu2022_shim.sqlite"), "--json", str(out)], cwd=REPO, timeout=600)
    assert r.returncode == 7 and r.stderr.count("\n") == 1 and "NVTX only" in r.stderr
    assert "sglang:decode_cycle" in r.stdout
    d = json.loads(out.read_text())
    assert d["gpu_activity"] is False
    assert [x["rank"] for x in d["ranks"]] == [0, 1] and all(x["source"] == "mark" for x in d["ranks"])
    with open(REAL / "cpu2022_shim.stats_nvtxsum.csv") as f:
        ref = {(row["Range"], row["Style"]): row for row in csv.DictReader(f)}
    ours = {(x["range"], x["style"]): x for x in d["nvtx_sum"]}
    assert set(ours) == set(ref)
    for key, row in ref.items():
        assert ours[key]["total_ns"] == int(row["Total Time (ns)"])
        assert ours[key]["instances"] == int(row["Instances"])
        assert ours[key]["min_ns"] == int(row["Min (ns)"]) and ours[key]["max_ns"] == int(row["Max (ns)"])
        assert ours[key]["median_ns"] == float(row["Med (ns)"])

