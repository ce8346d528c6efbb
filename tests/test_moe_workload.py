"""spec_workload's MoE-like target and varying batch (issue 20), on CPU torch: the MoE layer is a
real routed MoE (equals a float64 per-token reference, and experts not hit are never read), it has
no host sync and the same kernels for any token count (so it can be a CUDA graph), its cost grows
with the tokens (bytes gathered, wall time), verify replays one graph per batch size (stand-in
graphs), the batch process is seeded, and the shim's accept marks carry the per-cycle request
counts (in-memory recorder, and a real nsys 2022.4 capture read back by the analyzer's reader)."""

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

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from spec_workload.batches import batch_sizes, make_batches  # noqa: E402
from spec_workload.graphs import Captured, CapturedBySize  # noqa: E402
from spec_workload.model import Model  # noqa: E402
from spec_workload.moe import MoELayer, MoEModel, distinct_experts, route, run_experts  # noqa: E402
from spec_workload.srt.distributed import parallel_state  # noqa: E402
from spec_workload.srt.managers.schedule_batch import ScheduleBatch  # noqa: E402
from spec_workload.srt.managers.tp_worker import TpModelWorker  # noqa: E402
from spec_workload.srt.speculative.eagle_worker import EAGLEWorker  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _tp_group():
    """A one-rank TP group without torch.distributed: all_reduce returns its input."""
    parallel_state.init_model_parallel_group(0, 1, CPU, "gloo")
    yield


def _reference(x, router, up, down, top_k, shared_up=None, shared_down=None):
    """Dense per-token MoE in float64 numpy: softmax router, top-k, renormalized weights,
    sum_j w_j relu(x up[e_j]) down[e_j] (+ relu(x shared_up) shared_down); also the experts each
    token chose, in top-k order."""
    x, router, up, down = (t.detach().double().numpy() for t in (x, router, up, down))
    logits = x @ router
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    y = np.zeros((x.shape[0], down.shape[2]))
    chosen = []
    for t in range(x.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:top_k]
        w = probs[t, top] / probs[t, top].sum()
        for e, wj in zip(top, w):
            y[t] += wj * np.maximum(x[t] @ up[e], 0.0) @ down[e]
        chosen.append([int(e) for e in top])
    if shared_up is not None:
        su, sd = shared_up.detach().double().numpy(), shared_down.detach().double().numpy()
        y += np.maximum(x @ su, 0.0) @ sd
    return y, chosen


@pytest.mark.parametrize("shared_ffn", [0, 48])
def test_moe_layer_equals_the_float64_reference_of_its_routed_experts(shared_ffn):
    layer = MoELayer(hidden=24, expert_ffn=40, experts=16, top_k=3, world=1, device=CPU,
                     dtype=torch.float64, seed=11, shared_ffn=shared_ffn)
    x = torch.randn(10, 24, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    with torch.inference_mode():
        out, ids = layer(x)
    y_ref, chosen = _reference(x, layer.router, layer.up, layer.down, 3, layer.shared_up, layer.shared_down)
    np.testing.assert_allclose(out.numpy(), x.numpy() + y_ref, rtol=1e-10, atol=1e-12)
    assert ids.tolist() == chosen
    assert 3 <= len({e for c in chosen for e in c}) < 16  # 10 tokens x 3 of 16: some experts are left out
    assert (layer.shared_up is None) == (shared_ffn == 0)


def test_experts_not_hit_are_never_read():
    layer = MoELayer(hidden=16, expert_ffn=32, experts=32, top_k=2, world=1, device=CPU,
                     dtype=torch.float32, seed=5)
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        before, ids = layer(x)
        before = before.clone()
        idle = [e for e in range(32) if e not in set(ids.reshape(-1).tolist())]
        assert len(idle) >= 24  # 4 tokens x 2 experts: at most 8 hit
        layer.up[idle] = float("nan")
        layer.down[idle] = float("nan")
        after, _ = layer(x)
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
    y = run_experts(x, w, ids, up, down)
    # token 0: w00*1*x0 + w01*2*x0; token 1: w10*3*x1 + w11*1*x1 (relu of positive values)
    exp0 = (w[0, 0] * 1 + w[0, 1] * 2) * x[0]
    exp1 = (w[1, 0] * 3 + w[1, 1] * 1) * x[1]
    torch.testing.assert_close(y, torch.stack([exp0, exp1]))
    assert distinct_experts(ids.unsqueeze(0)) == [3]  # expert 3 never chosen


def _model(experts=128, hidden=128, ffn=512, shared_ffn=0):
    return MoEModel(layers=2, hidden=hidden, expert_ffn=ffn, experts=experts, top_k=4, vocab=512,
                    world=1, device=CPU, dtype=torch.float32, shared_ffn=shared_ffn)


def test_distinct_experts_touched_grow_with_the_tokens_verified():
    model = _model()
    g = torch.Generator().manual_seed(0)
    hits = {}
    with torch.inference_mode():
        for n in (4, 8, 16, 28, 56):
            per = []
            for _ in range(5):
                _, _, ids = model(model.embed(torch.randint(0, 512, (n,), generator=g)))
                assert ids.shape == (2, n, 4)
                per.append(sum(distinct_experts(ids)))
            hits[n] = float(np.mean(per))
    ns = sorted(hits)
    assert all(hits[a] < hits[b] for a, b in zip(ns, ns[1:])), hits
    # 2 layers x E (1 - (1 - k/E)^n), E = 128, k = 4: 30.5 at n = 4, 150.8 at n = 28, 212.7 at n = 56
    for n, expect in ((4, 30.5), (28, 150.8), (56, 212.7)):
        assert hits[n] == pytest.approx(expect, rel=0.08), (n, hits[n])


class _OpLog(TorchDispatchMode):
    """Every aten op the forward dispatches, with its output's shape and bytes."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = args[0] if args else None
        in_dim = first.dim() if isinstance(first, torch.Tensor) else None
        if isinstance(out, torch.Tensor):
            self.ops.append((str(func.overloadpacket.__name__), in_dim, tuple(out.shape),
                             out.numel() * out.element_size()))
        else:
            self.ops.append((str(func.overloadpacket.__name__), in_dim, None, 0))
        return out


# ops whose output shape or value depends on the data: each needs a device-to-host read on CUDA
_HOST_SYNC_OPS = {"_local_scalar_dense", "item", "nonzero", "masked_select", "unique", "_unique", "_unique2",
                  "unique_dim", "unique_consecutive", "bincount", "tolist", "argwhere", "equal"}


def _ops(model, n):
    log = _OpLog()
    x = model.embed(torch.arange(n) * 17 % 512)
    with torch.inference_mode(), log:
        model(x)
    return log.ops


def test_forward_has_no_host_sync_and_the_same_kernels_for_any_token_count():
    """What CUDA-graph capture needs: the op sequence over 4 and over 28 tokens is the same (only
    the token dimension of the shapes differs), and no op reads data back to the host."""
    model = _model(experts=32, hidden=32, ffn=48, shared_ffn=64)
    ops4, ops28 = _ops(model, 4), _ops(model, 28)
    assert [o[:2] for o in ops4] == [o[:2] for o in ops28] and len(ops4) >= 20
    assert not {name for name, *_ in ops4} & _HOST_SYNC_OPS, [name for name, *_ in ops4]


def test_bytes_gathered_grow_with_tokens_times_top_k():
    """The expert-weight gathers (index_select over the 3-D [experts, ., .] weights) read exactly
    tokens x top_k x (H F + F H) x 4 bytes per layer: 7 x as much over 28 tokens as over 4."""
    model = _model(experts=128, hidden=128, ffn=512, shared_ffn=256)

    def gathered(n):
        return sum(b for name, in_dim, _, b in _ops(model, n) if name == "index_select" and in_dim == 3)

    per_pair = 2 * 128 * 512 * 4  # up [H, F] + down [F, H], float32
    assert gathered(4) == 2 * 4 * 4 * per_pair  # 2 layers x 4 tokens x top-4
    assert gathered(28) == 2 * 28 * 4 * per_pair
    assert gathered(28) == 7 * gathered(4)


def test_verify_time_grows_with_the_tokens_on_cpu():
    """Coarse: the best of 7 timings of a 2-layer pass over 28 tokens is well above that over 4
    (7x the (token, expert) pairs gathered; asserted only 2x so a loaded machine cannot fail it)."""
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
    assert t28 > 2 * t4, (t4, t28)


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


class _StandInGraph:
    """A Captured whose "graph" re-runs fn on the static buffers at replay (what a CUDA graph
    replay does: the captured work on the static input, results written into the static outputs);
    records its rows and every replay."""

    log = []  # (rows captured) at capture, ("replay", rows) at replay, in order

    def __init__(self, fn, example, pool):
        self.cap = Captured(fn, example, use_graph=False)
        self.cap.static_out = fn(self.cap.static_in)
        self.rows = example.shape[0]
        cap, rows, log = self.cap, self.rows, self.log

        class Replay:
            def replay(self):
                for dst, src in zip(cap.static_out, fn(cap.static_in)):
                    dst.copy_(src)
                log.append(("replay", rows))

        self.cap.graph = Replay()
        log.append(rows)

    @property
    def uses_graph(self):
        return True

    def run(self, x):
        return self.cap.run(x)


def test_captured_by_size_replays_the_graph_of_exactly_the_batch_rows():
    """One graph per row count, captured largest first; run(x) replays the graph of x's rows (no
    padding: its static input has exactly those rows), returns that graph's static outputs, and a
    row count never captured is an error."""
    w = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))

    def fn(x):
        return x @ w, (x * 2).sum(dim=1)

    _StandInGraph.log = []
    cap = CapturedBySize(fn, torch.zeros(8, 6), [2, 4, 6, 8], use_graph=True, capture=_StandInGraph)
    assert _StandInGraph.log == [8, 6, 4, 2] and cap.uses_graph
    assert {n: g.cap.static_in.shape[0] for n, g in cap.by_rows.items()} == {8: 8, 6: 6, 4: 4, 2: 2}
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    for m in (8, 2, 6, 4, 2):
        out = cap.run(x[:m])
        assert _StandInGraph.log[-1] == ("replay", m)
        assert out[0] is cap.by_rows[m].cap.static_out[0]  # the graph's own static output
        torch.testing.assert_close(out[0], x[:m] @ w)
        torch.testing.assert_close(out[1], (x[:m] * 2).sum(dim=1))
    for bad in (3, 1):
        with pytest.raises(ValueError, match="no graph captured"):
            cap.run(x[:bad])
    eager = CapturedBySize(fn, torch.zeros(8, 6), [2, 4], use_graph=False, capture=_StandInGraph)
    assert not eager.uses_graph and eager.run(x[:3])[0].shape == (3, 3)  # no graphs: fn at any size
    with pytest.raises(ValueError):
        CapturedBySize(fn, torch.zeros(8, 6), [9], use_graph=True, capture=_StandInGraph)


def test_moe_verify_replays_one_graph_per_batch_size():
    """EAGLEWorker on the MoE target with stand-in graphs: one verify graph per batch size
    (M (steps + 1) rows, M = 1..reqs), each cycle replays the graph of its own batch (the work
    tracks the batch), and the results equal an eager worker's (same tokens, same accept draws)."""
    model = MoEModel(layers=2, hidden=16, expert_ffn=24, experts=8, top_k=2, vocab=64, world=1,
                     device=CPU, dtype=torch.float32, shared_ffn=32)
    draft = Model(1, 16, 64, 64, 1, CPU, torch.float32, tp=False)
    steps, reqs = 2, 5
    batches = make_batches(reqs, 1, 12, seed=4, finish_p=0.3, arrive_p=0.3, vocab=64)
    assert len({b.batch_size() for b in batches}) >= 3

    def sampler(m):
        return [1] * m

    _StandInGraph.log = []
    with torch.inference_mode():
        graphed = EAGLEWorker(model, draft, reqs, steps, 16, CPU, torch.float32, True, True, sampler,
                              verify_capture=_StandInGraph)  # draft and draft-extend stay eager on CPU
        eager = EAGLEWorker(model, draft, reqs, steps, 16, CPU, torch.float32, False, False, sampler)
        assert graphed.cuda_graph_runner.uses_graph and not eager.cuda_graph_runner.uses_graph
        assert _StandInGraph.log == [15, 12, 9, 6, 3]
        for b in batches:
            del _StandInGraph.log[:]
            spec = graphed.draft(b)
            logits_g, out_g, _, used = graphed.verify(b, spec)
            logits_e, out_e, _, _ = eager.verify(b, spec)
            assert used and _StandInGraph.log == [("replay", b.batch_size() * (steps + 1))]
            torch.testing.assert_close(logits_g, logits_e)
            assert out_g.verified_id == out_e.verified_id
            assert torch.equal(graphed.last_expert_ids, eager.last_expert_ids)
            assert graphed.last_expert_ids.shape == (2, b.batch_size() * (steps + 1), 2)
    # no-spec decode: one graph per batch size 1..reqs
    _StandInGraph.log = []
    with torch.inference_mode():
        plain = TpModelWorker(model, reqs, 16, CPU, torch.float32, True, capture=_StandInGraph)
        assert _StandInGraph.log == [5, 4, 3, 2, 1]
        assert plain.forward_batch_generation(ScheduleBatch([3, 9, 27])) == 3
        assert _StandInGraph.log[-1] == ("replay", 3) and plain.last_expert_ids.shape == (2, 3, 2)


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


@pytest.mark.nsys
@pytest.mark.skipif(shutil.which("nsys") is None, reason="needs nsys")
def test_moe_workload_under_nsys_marks_read_back_by_the_analyzer(tmp_path):
    """profile-trace + nsys (2022.4 on this CPU machine: -t nvtx): the export's decode cycles and
    accept marks, read with the analyzer's report reader, give the seeded request counts."""
    from analyze.read import report

    from helpers.pth_site import hook_pythonpath

    from fixtures import nsys_record

    env = dict(os.environ, PYTHONPATH=hook_pythonpath(tmp_path, str(REPO)))  # the .pth hook, as pip installs it

    def run(attempt):
        nonlocal tmp_path, out
        tmp_path = base / f"try{attempt}"
        tmp_path.mkdir()
        out = tmp_path / "w.json"
        cmd = [sys.executable, "-m", "nvtx_annotate.profile_trace", "--package", "spec_workload", "-t", "nvtx",
               "--nsys-arg=--sample=none", "--nsys-arg=--cpuctxsw=none", "-o", str(tmp_path / "moe"), "--",
               sys.executable, "-m", "spec_workload", *SMALL, "--steps", "2", "--cycles", "8", "--warmup", "1",
               "--eager", "--out-json", str(out)]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    base, out = tmp_path, None
    r = nsys_record.with_retry(run)     # nsys 2022.4's rare 'Connection reset by peer' (no report): once more
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


def _sweep_doc(cycle_us):
    runs = [{"steps": None if k == 0 else k, "mean_cycle_ns": us * 1e3, "tokens_per_s": 1e6 / us, "cycles": 10}
            for k, us in enumerate(cycle_us)]
    return {"ranks": [{"runs": runs}]}


def test_sweep_diff_prints_the_per_step_difference_of_two_sweeps(tmp_path, capsys):
    from spec_workload import sweep_diff

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_sweep_doc([2000.0, 4000.0, 5000.0])))
    b.write_text(json.dumps(_sweep_doc([2100.0, 3800.0, 5000.0])))
    rows = sweep_diff.compare(json.loads(a.read_text()), json.loads(b.read_text()))
    assert [r["run"] for r in rows] == ["nospec", "steps1", "steps2"]
    assert [round(r["cycle_diff"], 6) for r in rows] == [0.05, -0.05, 0.0]
    assert sweep_diff.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert ["steps1", "4000.0", "3800.0", "-5.0%", "250.0", "263.2"] in [line.split() for line in out.splitlines()]
    assert out.splitlines()[-1] == "max |diff| 5.0% (nospec)"
    b.write_text(json.dumps(_sweep_doc([2100.0, 3800.0])))
    assert sweep_diff.main([str(a), str(b)]) == 2
    assert "different runs" in capsys.readouterr().err
    assert sweep_diff.main([str(a), str(tmp_path / "missing.json")]) == 2
