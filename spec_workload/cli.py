"""``python -m spec_workload``: an SGLang-shaped speculative-decoding workload.

One process per TP rank (started with multiprocessing *spawn*, like SGLang's TP workers), or
one rank per invocation (``--rank R --world N``, joining a TCP rendezvous) for one nsys report
per process.  Per cycle: ``draft`` (all draft steps in one CUDA graph replay), ``verify`` (the
target model over reqs x (steps+1) tokens with a TP all-reduce after every layer; a CUDA graph
replay when the all-reduce can be captured, i.e. nccl or world 1), host read-back of the accept
lengths (drawn from a fixed, seeded distribution), then ``forward_draft_extend_after_decode``.

Targets (``--target``):
  dense (default)  ``--verify-layers`` (4) MLP layers, hidden x ffn: verify costs about the same
                   for any token count (memory bound).
  moe              ``--verify-layers`` (2) MoE layers: each verified token goes to ``--top-k`` (4)
                   of ``--experts`` (64 on GPU, 32 on CPU) experts of intermediate size
                   ``--expert-ffn`` (default hidden: 4096 on GPU, 67 MB of bf16 weights per
                   expert) chosen by a router (matmul + top-k on the token's hidden state); every
                   (token, expert) pair gathers its expert's weights and applies them (bmm), so
                   verify grows linearly with reqs x (steps+1) x top-k; plus a dense shared expert
                   of intermediate ``--shared-ffn`` (default 48*hidden) read once per layer (the
                   token-independent part).  No host sync, the same kernels for any token count:
                   verify is a CUDA graph replay, one graph per batch size (M (steps+1) rows,
                   M = 1..reqs).  See spec_workload/moe.py.

Batch: ``--reqs`` batch slots; with ``--reqs-min`` below ``--reqs`` the number of running
requests changes from cycle to cycle (seeded finish/arrival process, ``--finish-p``,
``--arrive-p``; spec_workload/batches.py), the same sequence for every step count, so one
profile holds cycles of different verified-token counts; ``--batch-period P`` repeats the first
P timed batches (an unprofiled sweep then sees exactly the batch mix of a P-cycle profile).
Default: constant for the dense target, varying (``--reqs-min`` 1) for the MoE target;
``--reqs-min`` equal to ``--reqs`` fixes it.

Writes its own measured tokens/s and per-cycle timings (with the batch size, verified tokens and,
for the MoE target, the experts hit per layer) to ``--out-json`` (rank 0).  With
``--sweep-steps 1,2,...`` it measures tokens/s for each draft step count and the no-speculation
baseline in one process, without needing a profiler (the unprofiled truth for issue 7).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m spec_workload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=1, help="TP world size (default 1)")
    p.add_argument("--rank", type=int, default=None, help="run only this rank (joins --master-port)")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (needed with --rank)")
    p.add_argument("--backend", choices=["nccl", "gloo"], default=None,
                   help="default: nccl if every rank has its own GPU, else gloo")
    p.add_argument("--steps", type=int, default=3, help="draft steps per cycle")
    p.add_argument("--cycles", type=int, default=10, help="timed decode cycles")
    p.add_argument("--warmup", type=int, default=2, help="untimed cycles before (also annotated)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--cuda-graphs", dest="graphs", action="store_true", default=None)
    g.add_argument("--eager", dest="graphs", action="store_false")
    p.add_argument("--accept-dist", default="0.25,0.25,0.2,0.15,0.1,0.05",
                   help="P(k accepted draft tokens), k=0,1,...; k is capped at --steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-spec", action="store_true", help="baseline: plain decode, no speculation")
    p.add_argument("--target", choices=["dense", "moe"], default="dense", help="target model (default dense)")
    p.add_argument("--verify-layers", type=int, default=None, help="target model layers (default 4 dense, 2 moe)")
    p.add_argument("--hidden", type=int, default=None, help="default 4096 on GPU, 64 on CPU")
    p.add_argument("--ffn", type=int, default=None, help="default 4*hidden")
    p.add_argument("--vocab", type=int, default=None, help="default 8192 on GPU, 128 on CPU")
    p.add_argument("--experts", type=int, default=None, help="moe: experts per layer (default 64 on GPU, 32 on CPU)")
    p.add_argument("--top-k", type=int, default=4, help="moe: experts per token (default 4)")
    p.add_argument("--expert-ffn", type=int, default=None,
                   help="moe: expert intermediate size (default hidden: 4096 on GPU)")
    p.add_argument("--shared-ffn", type=int, default=None,
                   help="moe: shared expert intermediate size, 0 for none (default 48*hidden)")
    p.add_argument("--reqs", type=int, default=8, help="batch slots: the most requests in a cycle (default 8)")
    p.add_argument("--reqs-min", type=int, default=None,
                   help="fewest requests in a cycle; below --reqs the batch varies (default: --reqs for "
                        "the dense target, 1 for moe)")
    p.add_argument("--finish-p", type=float, default=0.3, help="varying batch: P(a request finishes) per cycle")
    p.add_argument("--arrive-p", type=float, default=0.3, help="varying batch: P(a free slot gets a request) per cycle")
    p.add_argument("--batch-period", type=int, default=0, metavar="P",
                   help="timed cycle j runs the batch of timed cycle j mod P (0: no repeat); a sweep with "
                        "P = a profile's --cycles and a multiple of P cycles sees the profile's batch mix exactly")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--sweep-steps", default=None, help="e.g. 1,2,3,4,5,6: tokens/s per step count + baseline")
    p.add_argument("--out-json", default=None)
    a = p.parse_args(argv)
    if a.rank is not None and a.master_port is None:
        p.error("--rank needs --master-port (the same for every rank)")
    if a.verify_layers is None:
        a.verify_layers = 2 if a.target == "moe" else 4
    if a.reqs_min is None:
        a.reqs_min = 1 if a.target == "moe" else a.reqs
    if not 1 <= a.reqs_min <= a.reqs:
        p.error(f"--reqs-min {a.reqs_min} must be in 1..--reqs {a.reqs}")
    if a.batch_period < 0:
        p.error("--batch-period must be >= 0")
    for name in ("finish_p", "arrive_p"):
        if not 0.0 <= getattr(a, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must be in [0, 1]")
    return a


def accept_sampler(dist_probs, steps: int, seed: int):
    import numpy as np

    probs = np.asarray(dist_probs, dtype=float)
    probs = probs / probs.sum()
    rng = np.random.default_rng(seed)

    def sample(n):
        k = rng.choice(len(probs), size=n, p=probs)
        return [int(min(x, steps)) for x in k]

    return sample


def expected_accept(dist_probs, steps: int) -> float:
    s = sum(dist_probs)
    return sum(min(k, steps) * p / s for k, p in enumerate(dist_probs))


def _setup(a, rank: int, world: int):
    import torch
    import torch.distributed as dist

    from .srt.distributed.parallel_state import init_model_parallel_group

    use_cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        ndev = torch.cuda.device_count()
        device = torch.device(f"cuda:{rank % ndev}")
        torch.cuda.set_device(device)
        backend = a.backend or ("nccl" if ndev >= world else "gloo")
        dtype = torch.bfloat16
    else:
        device, backend, dtype = torch.device("cpu"), "gloo", torch.float32
        if world > 1:
            torch.set_num_threads(1)  # several ranks share the CPU
    if a.backend == "nccl" and not use_cuda:
        raise SystemExit("--backend nccl needs CUDA")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{a.master_port}",
                            rank=rank, world_size=world)
    tp = init_model_parallel_group(rank, world, device, backend)
    return torch, device, dtype, backend, tp, use_cuda


def _sizes(a, use_cuda):
    hidden = a.hidden or (4096 if use_cuda else 64)
    return hidden, a.ffn or 4 * hidden, a.vocab or (8192 if use_cuda else 128)


def _target(a, hidden, ffn, vocab, world, device, dtype, use_cuda):
    from .model import Model

    if a.target == "moe":
        from .moe import MoEModel

        experts = a.experts or (64 if use_cuda else 32)
        shared = 48 * hidden if a.shared_ffn is None else a.shared_ffn
        return MoEModel(a.verify_layers, hidden, a.expert_ffn or hidden, experts, a.top_k, vocab,
                        world, device, dtype, shared_ffn=shared)
    return Model(a.verify_layers, hidden, ffn, vocab, world, device, dtype, tp=True)


def run_rank(a, rank: int, world: int) -> dict:
    torch, device, dtype, backend, tp, use_cuda = _setup(a, rank, world)
    import torch.distributed as dist

    from .model import Model
    from .srt.managers.tp_worker import TpModelWorker
    from .srt.speculative.eagle_worker import EAGLEWorker

    hidden, ffn, vocab = _sizes(a, use_cuda)
    graphs = use_cuda if a.graphs is None else (a.graphs and use_cuda)
    verify_graph = backend == "nccl" or world == 1  # a gloo all-reduce of CUDA tensors cannot be captured
    probs = [float(x) for x in a.accept_dist.split(",")]
    target = _target(a, hidden, ffn, vocab, world, device, dtype, use_cuda)
    step_list = [int(x) for x in a.sweep_steps.split(",")] if a.sweep_steps else [a.steps]
    runs = []

    def release():  # the previous worker's graphs and their memory pool go before the next is captured
        gc.collect()  # a worker is in a reference cycle (its graph runners hold its bound methods)
        if use_cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()

    with torch.inference_mode():
        if a.no_spec or a.sweep_steps:
            worker = TpModelWorker(target, a.reqs, hidden, device, dtype, graphs and verify_graph)
            runs.append(_loop(a, torch, use_cuda, worker, None, 0, vocab))
            del worker
            release()
        if not a.no_spec:
            draft = Model(1, hidden, ffn, vocab, world, device, dtype, tp=False)
            for steps in step_list:
                worker = EAGLEWorker(target, draft, a.reqs, steps, hidden, device, dtype, graphs,
                                     verify_graph, accept_sampler(probs, steps, a.seed))
                runs.append(_loop(a, torch, use_cuda, worker, steps, expected_accept(probs, steps), vocab))
                del worker
                release()
    if use_cuda:
        torch.cuda.synchronize()
    dist.barrier()
    import nvtx_annotate.shim as shim

    info = {
        "rank": rank,
        "world": world,
        "pid": os.getpid(),
        "device": str(device),
        "backend": backend,
        "target": a.target,
        "cuda_graphs": bool(graphs),
        "verify_graph": bool(graphs and verify_graph),
        "shim_installed": bool(shim._installed),
        "nvtx_backend": shim._nvtx.get_backend().name,
        "shim_stats": shim.stats(),
        "patched": shim.patched_roles("spec_workload"),
        "runs": runs,
    }
    dist.destroy_process_group()
    return info


def _loop(a, torch, use_cuda, worker, steps, exp_accept, vocab) -> dict:
    from .batches import make_batches
    from .moe import distinct_experts

    sync = torch.cuda.synchronize if use_cuda else (lambda: None)
    period = a.batch_period or a.cycles
    batches = make_batches(a.reqs, a.reqs_min, a.warmup + period, a.seed, a.finish_p, a.arrive_p, vocab)
    timed = [batches[a.warmup + j % period] for j in range(a.cycles)] if period else []
    routed = []  # MoE target: each timed cycle's verify expert ids, copied on the device (no host read)
    for batch in batches[: a.warmup]:
        worker.forward_batch_generation(batch)
    sync()
    cycles = []
    tokens = 0
    t_start = time.perf_counter_ns()
    prev = t_start
    for i, batch in enumerate(timed):
        res = worker.forward_batch_generation(batch)
        now = time.perf_counter_ns()
        m = batch.batch_size()
        if steps is None:
            n, acc = res, None
        else:
            n, acc = res.num_tokens, sum(res.accept_length_per_req_cpu)
        tokens += n
        row = {"cycle": i, "duration_ns": now - prev, "accepted_tokens": acc, "tokens": n,
               "reqs": m, "verified_tokens": m * (1 + (steps or 0))}
        if getattr(worker, "last_expert_ids", None) is not None:
            routed.append(worker.last_expert_ids.clone())
        cycles.append(row)
        prev = now
    sync()
    total = time.perf_counter_ns() - t_start
    for row, ids in zip(cycles, routed):  # read on the host after the timed cycles
        row["experts_hit"] = distinct_experts(ids)  # distinct experts per layer in the cycle's verify
    sizes = [c["reqs"] for c in cycles]
    return {
        "mode": "nospec" if steps is None else "spec",
        "steps": steps,
        "cycles": a.cycles,
        "warmup": a.warmup,
        "reqs": a.reqs,
        "reqs_min": a.reqs_min,
        "batch_period": a.batch_period,
        "mean_reqs": sum(sizes) / max(len(sizes), 1),
        "tokens": tokens,
        "wall_ns": total,
        "tokens_per_s": tokens / (total / 1e9),
        "mean_cycle_ns": total / max(a.cycles, 1),
        "expected_accept_per_req": exp_accept,
        "per_cycle": cycles,
    }


def _child(a, rank, world, q):
    try:
        q.put(run_rank(a, rank, world))
    except BaseException as e:  # report instead of hanging the launcher
        import traceback

        q.put({"rank": rank, "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        raise


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.rank is not None:
        results = [run_rank(a, a.rank, a.world)]
    else:
        a.master_port = a.master_port or _free_port()
        if a.world == 1:
            results = [run_rank(a, 0, 1)]
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")  # like SGLang: the TP workers are fresh interpreters
            q = ctx.Queue()
            procs = [ctx.Process(target=_child, args=(a, r, a.world, q)) for r in range(a.world)]
            for p in procs:
                p.start()
            results = [q.get() for _ in procs]
            for p in procs:
                p.join()
            results.sort(key=lambda r: r["rank"])
            bad = [r for r in results if "error" in r]
            if bad:
                for r in bad:
                    print(r.get("traceback", r["error"]), file=sys.stderr)
                return 1
    out = {
        "schema": 1,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "config": {k: v for k, v in vars(a).items() if k != "out_json"},
        "ranks": results,
    }
    r0 = results[0]["runs"]
    summary = {(("nospec" if r["steps"] is None else f"steps{r['steps']}")): round(r["tokens_per_s"], 1) for r in r0}
    print("spec_workload:", json.dumps(summary), file=sys.stderr)
    if a.out_json and (a.rank is None or a.rank == 0):
        with open(a.out_json, "w") as f:
            json.dump(out, f, indent=1)
    return 0
