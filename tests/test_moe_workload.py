"""spec_workload's MoE-like target and varying batch (issue 20), on CPU torch: the MoE layer is a
real routed MoE (equals a dense per-token reference, and experts not hit are never read), its cost
grows with the tokens (distinct experts touched, wall time), the batch process is seeded, and the
shim's accept marks carry the per-cycle request counts (in-memory recorder, and a real nsys 2022.4
capture read back by the analyzer's reader)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spec_workload.batches import batch_sizes, make_batches  # noqa: E402
from spec_workload.graphs import Captured  # noqa: E402
from spec_workload.moe import MoELayer, MoEModel, route, run_experts  # noqa: E402
from spec_workload.srt.distributed import parallel_state  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _tp_group():
    """A one-rank TP group without torch.distributed: all_reduce returns its input."""
    parallel_state.init_model_parallel_group(0, 1, CPU, "gloo")
    yield


def _reference(x, router, up, down, top_k):
    """Dense per-token MoE in float64 numpy: softmax router, top-k, renormalized weights,
    sum_j w_j relu(x up[e_j]) down[e_j]; also the set of experts any token chose."""
    x, router, up, down = (t.detach().double().numpy() for t in (x, router, up, down))
    logits = x @ router
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    y = np.zeros((x.shape[0], down.shape[2]))
    chosen = set()
    for t in range(x.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:top_k]
        w = probs[t, top] / probs[t, top].sum()
        for e, wj in zip(top, w):
            y[t] += wj * np.maximum(x[t] @ up[e], 0.0) @ down[e]
            chosen.add(int(e))
    return y, chosen


def test_moe_layer_equals_the_dense_reference_of_its_routed_experts():
    layer = MoELayer(hidden=24, expert_ffn=40, experts=16, top_k=3, world=1, device=CPU,
                     dtype=torch.float64, seed=11)
    x = torch.randn(10, 24, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with torch.inference_mode():
        out = layer(x)
    y_ref, chosen = _reference(x, layer.router, layer.up, layer.down, 3)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y_ref, rtol=1e-10, atol=1e-12)
    assert layer.experts_hit == sorted(chosen)
    assert 3 <= len(chosen) < 16  # 10 tokens x 3 of 16: some experts are left out


def test_experts_not_hit_are_never_read():
    layer = MoELayer(hidden=16, expert_ffn=32, experts=32, top_k=2, world=1, device=CPU,
                     dtype=torch.float32, seed=5)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        before = layer(x).clone()
        hit = list(layer.experts_hit)
        idle = [e for e in range(32) if e not in hit]
        assert len(idle) >= 24  # 4 tokens x 2 experts: at most 8 hit
        layer.up[idle] = float("nan")
        layer.down[idle] = float("nan")
        after = layer(x)
    assert torch.isfinite(after).all() and torch.equal(after, before)


def test_route_and_run_experts_by_hand():
    """Two tokens, four experts, top-2: the weights and the per-expert sums checked by hand."""
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    router = torch.tensor([[2.0, 1.0, 0.0, -5.0], [0.5, 0.0, 3.0, -5.0]])
    w, ids = route(x, router, 2)
    assert ids.tolist() == [[0, 1], [2, 0]]
    e = np.exp([2.0, 1.0])
    np.testing.assert_allclose(w[0].numpy(), e / e.sum(), rtol=1e-6)
    up = torch.eye(2).repeat(4, 1, 1) * torch.tensor([1.0, 2.0, 3.0, 4.0]).view(4, 1, 1)  # expert e scales by e+1
    down = torch.eye(2).repeat(4, 1, 1)
    y, hit = run_experts(x, w, ids, up, down)
    assert hit == [0, 1, 2]  # expert 3 never chosen
    # token 0: w00*1*x0 + w01*2*x0; token 1: w10*3*x1 + w11*1*x1 (relu of positive values)
    exp0 = (w[0, 0] * 1 + w[0, 1] * 2) * x[0]
    exp1 = (w[1, 0] * 3 + w[1, 1] * 1) * x[1]
    torch.testing.assert_close(y, torch.stack([exp0, exp1]))


def _model(experts=128, hidden=128, ffn=512):
    return MoEModel(layers=2, hidden=hidden, expert_ffn=ffn, experts=experts, top_k=4, vocab=512,
                    world=1, device=CPU, dtype=torch.float32)


def test_distinct_experts_touched_grow_with_the_tokens_verified():
    model = _model()
    g = torch.Generator().manual_seed(0)
    hits = {}
    with torch.inference_mode():
        for n in (4, 8, 16, 28, 56):
            per = []
            for _ in range(5):
                model(model.embed(torch.randint(0, 512, (n,), generator=g)))
                per.append(sum(model.experts_hit))
            hits[n] = float(np.mean(per))
    ns = sorted(hits)
    assert all(hits[a] < hits[b] for a, b in zip(ns, ns[1:])), hits
    # 2 layers x E (1 - (1 - k/E)^n), E = 128, k = 4: 30.5 at n = 4, 150.8 at n = 28, 212.7 at n = 56
    for n, expect in ((4, 30.5), (28, 150.8), (56, 212.7)):
        assert hits[n] == pytest.approx(expect, rel=0.08), (n, hits[n])


def test_verify_time_grows_with_the_tokens_on_cpu():
    """Coarse: the best of 7 timings of a 2-layer pass over 28 tokens is well above that over 4
    (about 4.9x as many experts run; asserted only 1.5x so a loaded machine cannot fail it)."""
    torch.set_num_threads(1)
    model = _model()
    x4, x28 = (model.embed(torch.arange(n) * 17 % 512) for n in (4, 28))

    def best(x):
        ts = []
        for _ in range(7):
            t = time.perf_counter()
            model(x)
            ts.append(time.perf_counter() - t)
        return min(ts)

    with torch.inference_mode():
        model(x28)
        t4, t28 = best(x4), best(x28)
    assert t28 > 1.5 * t4, (t4, t28)


def test_batch_sizes_are_seeded_bounded_and_vary():
    a = batch_sizes(8, 1, 60, seed=0)
    assert a == batch_sizes(8, 1, 60, seed=0) and a != batch_sizes(8, 1, 60, seed=1)
    assert a[0] == 8 and min(a) >= 1 and max(a) <= 8 and len(set(a)) >= 5
    assert batch_sizes(8, 8, 30, seed=0) == [8] * 30  # reqs_min == reqs: constant
    assert min(batch_sizes(8, 5, 200, seed=2)) == 5  # refilled up to reqs_min
    # stationary mean reqs * arrive / (arrive + finish) = 8 * 0.2 / 0.5 = 3.2
    long = batch_sizes(8, 1, 20000, seed=3, finish_p=0.3, arrive_p=0.2)
    assert np.mean(long[100:]) == pytest.approx(3.2, abs=0.1)
    # the tokens are drawn per slot: the same seed gives the same tokens to the same slots
    b = make_batches(8, 1, 5, seed=0, finish_p=0.3, arrive_p=0.3, vocab=1000)
    assert [x.batch_size() for x in b] == a[:5]
    assert all(0 <= t < 1000 for x in b for t in x.input_ids)
    with pytest.raises(ValueError):
        batch_sizes(4, 5, 3, seed=0)


def test_padded_graph_replay_returns_the_rows_of_the_batch():
    """Captured pads a smaller batch to the captured size: the first rows of each output belong
    to the batch (a stand-in graph replays fn on the static buffers, as a CUDA graph would)."""
    w = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))

    def fn(x):
        return x @ w, (x * 2).sum(dim=1)

    cap = Captured(fn, torch.zeros(8, 6), use_graph=False)
    cap.static_out = fn(cap.static_in)

    class Replay:
        def replay(self):
            for dst, src in zip(cap.static_out, fn(cap.static_in)):
                dst.copy_(src)

    cap.graph = Replay()
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    for m in (8, 5, 1):
        out = cap.run(x[:m])
        assert out[0].shape == (m, 3) and out[1].shape == (m,)
        torch.testing.assert_close(out[0], x[:m] @ w)
        torch.testing.assert_close(out[1], (x[:m] * 2).sum(dim=1))
    with pytest.raises(ValueError):
        cap.run(torch.zeros(9, 6))


SMALL = ["--target", "moe", "--device", "cpu", "--hidden", "32", "--vocab", "64", "--experts", "32",
         "--reqs", "8", "--reqs-min", "1", "--world", "1", "--seed", "4"]

_RECORD = """
import json, sys
from nvtx_annotate import shim
shim.install("spec_workload")
from spec_workload.cli import main
rc = main(sys.argv[1:])
print("MARKS=" + json.dumps(shim._nvtx.get_backend().marks()))
sys.exit(rc)
"""


def _record(args, tmp_path):
    """Runs the workload in one process with the shim on and the in-memory NVTX recorder."""
    out = tmp_path / "w.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), SPECPROF_NVTX="1", SPECPROF_NVTX_BACKEND="record",
               SPECPROF_NVTX_PACKAGE="spec_workload")
    r = subprocess.run([sys.executable, "-c", _RECORD, *SMALL, *args, "--out-json", str(out)],
                       env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    marks = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("MARKS="))[6:])
    return json.loads(out.read_text()), marks


def _parse(text):
    from analyze.timeline.cycles import ACCEPT_MARK  # the analyzer's own reader of the mark

    m = ACCEPT_MARK.search(text)
    assert m, text
    return int(m["n"]), int(m["reqs"]), [int(v) for v in m["lens"].split(",")]


def test_moe_workload_marks_carry_the_seeded_request_counts(tmp_path):
    d, marks = _record(["--steps", "3", "--cycles", "12", "--warmup", "2"], tmp_path)
    (rank,) = d["ranks"]
    assert rank["target"] == "moe" and rank["shim_installed"] and rank["verify_graph"] is False
    assert rank["shim_stats"]["cycles"] == 14 and rank["shim_stats"]["marks"] == 14
    expect = batch_sizes(8, 1, 14, seed=4)
    assert len(set(expect)) >= 3  # the run really varies the batch
    accept = [m for m in marks if m[0].startswith("accept_len=")]
    parsed = [_parse(t) for t, _ in accept]
    assert [reqs for _, reqs, _ in parsed] == expect
    for (n, reqs, lens), (_, payload) in zip(parsed, accept):
        assert len(lens) == reqs and sum(lens) == n == payload and all(0 <= v <= 3 for v in lens)
    (run,) = rank["runs"]
    assert [c["reqs"] for c in run["per_cycle"]] == expect[2:]
    assert [c["accepted_tokens"] for c in run["per_cycle"]] == [n for n, _, _ in parsed[2:]]
    for c in run["per_cycle"]:
        assert c["tokens"] == c["accepted_tokens"] + c["reqs"] and c["verified_tokens"] == 4 * c["reqs"]
        assert len(c["experts_hit"]) == 2 and all(1 <= h <= 32 for h in c["experts_hit"])
    assert run["mean_reqs"] == pytest.approx(np.mean(expect[2:]))


def test_moe_sweep_sees_the_same_batches_and_touches_more_experts_per_step(tmp_path):
    d, _ = _record(["--sweep-steps", "1,3", "--cycles", "10", "--warmup", "1"], tmp_path)
    runs = d["ranks"][0]["runs"]
    assert [(x["mode"], x["steps"]) for x in runs] == [("nospec", None), ("spec", 1), ("spec", 3)]
    sizes = [[c["reqs"] for c in x["per_cycle"]] for x in runs]
    assert sizes[0] == sizes[1] == sizes[2] == batch_sizes(8, 1, 11, seed=4)[1:]
    assert runs[0]["tokens"] == sum(sizes[0])  # no-spec: one token per running request
    for x in runs[1:]:
        assert x["tokens"] == sum(c["accepted_tokens"] + c["reqs"] for c in x["per_cycle"])
        assert x["tokens_per_s"] == pytest.approx(x["tokens"] / (x["wall_ns"] / 1e9))
    hit = [np.mean([sum(c["experts_hit"]) for c in x["per_cycle"]]) for x in runs]
    assert hit[0] < hit[1] < hit[2], hit


def test_dense_target_keeps_a_constant_batch_by_default(tmp_path):
    d, marks = _record(["--target", "dense", "--reqs-min", "8", "--steps", "2", "--cycles", "3",
                        "--warmup", "0"], tmp_path)
    run = d["ranks"][0]["runs"][0]
    assert [c["reqs"] for c in run["per_cycle"]] == [8, 8, 8] and "experts_hit" not in run["per_cycle"][0]
    assert [_parse(t)[1] for t, _ in marks if t.startswith("accept_len=")] == [8, 8, 8]


@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys")
def test_moe_workload_under_nsys_marks_read_back_by_the_analyzer(tmp_path):
    """profile-trace + nsys (2022.4 on this CPU machine: -t nvtx): the export's decode cycles and
    accept marks, read with the analyzer's report reader, give the seeded request counts."""
    from analyze.read import report

    out = tmp_path / "w.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "nvtx_annotate.profile_trace", "--package", "spec_workload", "-t", "nvtx",
           "--nsys-arg=--sample=none", "--nsys-arg=--cpuctxsw=none", "-o", str(tmp_path / "moe"), "--",
           sys.executable, "-m", "spec_workload", *SMALL, "--steps", "2", "--cycles", "8", "--warmup", "1",
           "--eager", "--out-json", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    tables = report.read_report(str(tmp_path / "moe.sqlite"))
    names = tables.ranges["name"].astype(str)
    assert (names.str.endswith("decode_cycle")).sum() == 9
    texts = [t for t in tables.marks.sort_values("time_ns")["text"] if str(t).startswith("accept_len=")]
    assert [_parse(t)[1] for t in texts] == batch_sizes(8, 1, 9, seed=4)
    w = json.loads(out.read_text())["ranks"][0]["runs"][0]
    assert [_parse(t)[0] for t in texts[1:]] == [c["accepted_tokens"] for c in w["per_cycle"]]


def test_batch_period_repeats_the_first_timed_batches(tmp_path):
    """--batch-period P: timed cycle j runs timed batch j mod P (warm-up untouched), so a long
    unprofiled run has exactly the batch mix of a P-cycle profile."""
    d, marks = _record(["--steps", "1", "--cycles", "10", "--warmup", "2", "--batch-period", "4"], tmp_path)
    seq = batch_sizes(8, 1, 6, seed=4)
    expect = seq[:2] + [seq[2 + j % 4] for j in range(10)]
    assert [_parse(t)[1] for t, _ in marks if t.startswith("accept_len=")] == expect
    run = d["ranks"][0]["runs"][0]
    assert [c["reqs"] for c in run["per_cycle"]] == expect[2:] and run["batch_period"] == 4
