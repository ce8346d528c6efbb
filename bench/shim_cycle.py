"""What the shim costs a decode cycle on this CPU, without a GPU: SGLang 0.5.17's calls of one EAGLE v2 decode
cycle (as counted on real SGLang with ``SPECPROF_TIMING_OWN_DETAIL=1``: the worker's forward_batch_generation
holding draft, verify and draft_extend, each replaying its CUDA graph through its runner's ``execute``; the
scheduler's accept resolver of the previous cycle, which calls ``on_verify_complete_cpu``; ``on_idle`` not
at all) made on a fake SGLang package with empty bodies, in three modes, each in its own interpreter:

* ``bare``: the shim not installed;
* ``shim``: the shim installed, no profiler and no timing (NVTX off: what a server with the .pth but
  neither nsys nor the timing mode pays);
* ``live``: ``SPECPROF_TIMING=1`` (stub CUDA events from a fake ``torch.cuda``, one cycle in 41 timed, the
  CUDA-graph hook in place, the sink thread and its Parquet log running).

Prints per mode the median microseconds a cycle over ``--repeats`` rounds of ``--cycles`` cycles, and for
``live`` what the shim's own accounting says it took (mean ``shim_ns`` of the untimed rows and ``sink_ns``):
the accounting is held to the wall-clock difference live - bare. ``--profile`` prints cProfile's top
functions of one live round.

    python -m bench.shim_cycle [--cycles 80000] [--repeats 5] [--json OUT] [--profile]

The fake bodies do nothing, so the figures are the shim's Python only; a real server's host runs this
code slower (the H100 host about 3-4x slower than the development machine, docs/live.md).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import types

PKG = "fakesgl_bench"
IDLE_CALLS = 0
"""``Scheduler.on_idle`` calls a decode cycle: none. SGLang 0.5.17's overlap loop calls it only with no batch to
run and none in flight (``event_loop_overlap``); the 86,074 calls counted in 7,736 cycles on real SGLang were the
idle loop's between the benchmark's rounds (``--idle-calls`` puts some in each cycle)."""
BATCH = 16

FILES = {
    "srt/__init__.py": "",
    "srt/speculative/__init__.py": "",
    "srt/managers/__init__.py": "",
    "srt/managers/scheduler_components/__init__.py": "",
    "srt/model_executor/__init__.py": "",
    "srt/model_executor/runner/__init__.py": "",
    "srt/distributed/__init__.py": "",
    "srt/distributed/parallel_state.py": """
        class GroupCoordinator:
            def __init__(self, name, rank, world):
                self.unique_name, self.rank_in_group, self.world_size, self.device = name + ":0", rank, world, "cpu"
            def all_reduce(self, x):
                return x
    """,
    "srt/managers/scheduler.py": """
        class Scheduler:
            def __init__(self, server_args):
                self.server_args = server_args
                self.max_running_requests = 16
            def on_idle(self):
                pass
    """,
    "srt/managers/scheduler_components/batch_result_processor.py": """
        class SchedulerBatchResultProcessor:
            def __init__(self, worker):
                self.worker = worker
            def _resolve_spec_v2_tokens(self, result, batch):
                result.num_correct_drafts_per_req_cpu = result.lens
                self.worker.on_verify_complete_cpu(result.lens)
    """,
    "srt/speculative/eagle_draft_cuda_graph_runner.py": """
        class EAGLEDraftCudaGraphRunner:
            def __init__(self, graph):
                self.graph = graph
            def execute(self, batch):
                self.graph.replay()
    """,
    "srt/speculative/eagle_draft_extend_cuda_graph_runner.py": """
        class EAGLEDraftExtendCudaGraphRunner:
            def __init__(self, graph):
                self.graph = graph
            def execute(self, batch):
                self.graph.replay()
    """,
    "srt/model_executor/runner/decode_cuda_graph_runner.py": """
        class DecodeCudaGraphRunner:
            def __init__(self, graph):
                self.graph = graph
            def execute(self, batch):
                self.graph.replay()
    """,
    "srt/speculative/eagle_worker_v2.py": """
        class Result:
            pass
        class EagleDraftWorker:
            def __init__(self, draft_runner, extend_runner):
                self.draft_runner, self.extend_runner = draft_runner, extend_runner
            def draft(self, batch):
                self.draft_runner.execute(batch)
            def _draft_extend_for_decode(self, batch, out):
                self.extend_runner.execute(batch)
        class EAGLEWorkerV2:
            def __init__(self, draft_runner, extend_runner, verify_runner):
                self._draft_worker = EagleDraftWorker(draft_runner, extend_runner)
                self.verify_runner = verify_runner
                self.speculative_num_steps = 3
            def forward_batch_generation(self, batch):
                self._draft_worker.draft(batch)
                out = self.verify(batch)
                self._draft_worker._draft_extend_for_decode(batch, out)
                r = Result()
                r.lens = batch.lens
                return r
            def verify(self, batch):
                self.verify_runner.execute(batch)
            def on_verify_complete_cpu(self, lens):
                pass
    """,
}


def _write_package(root: str) -> None:
    for rel, src in FILES.items():
        path = os.path.join(root, PKG, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(src))
    with open(os.path.join(root, PKG, "__init__.py"), "w") as f:
        f.write("")


class _Event:
    """A stub CUDA event: complete at once, 1 us between any two."""

    def record(self, stream=None):
        pass

    def query(self):
        return True

    def elapsed_time(self, other):
        return 0.001


class _Graph:
    def replay(self):
        pass


def _fake_torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, Event=lambda enable_timing=True: _Event(),
        is_current_stream_capturing=lambda: False, CUDAGraph=_Graph, _initialized=True)
    torch.compiler = types.SimpleNamespace(is_compiling=lambda: False)
    return torch


def _round(mode: str, cycles: int, profile: bool, idle_calls: int = IDLE_CALLS, batch_size: int = BATCH) -> dict:
    """One round in this interpreter (the child): the package imported (shim installed per ``mode``), the
    cycles run, the wall time and (live) the timer's own accounting returned."""
    sys.modules["torch"] = _fake_torch()
    if mode != "bare":
        from nvtx_annotate import shim
        shim.install(PKG)
    import importlib
    from types import SimpleNamespace
    ps = importlib.import_module(f"{PKG}.srt.distributed.parallel_state")
    sch = importlib.import_module(f"{PKG}.srt.managers.scheduler")
    brp = importlib.import_module(f"{PKG}.srt.managers.scheduler_components.batch_result_processor")
    ew = importlib.import_module(f"{PKG}.srt.speculative.eagle_worker_v2")
    dr = importlib.import_module(f"{PKG}.srt.speculative.eagle_draft_cuda_graph_runner")
    de = importlib.import_module(f"{PKG}.srt.speculative.eagle_draft_extend_cuda_graph_runner")
    vr = importlib.import_module(f"{PKG}.srt.model_executor.runner.decode_cuda_graph_runner")
    ps.GroupCoordinator("tp", 0, 1)
    scheduler = sch.Scheduler(SimpleNamespace(
        speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
        speculative_num_draft_tokens=4, tp_size=1, disable_cuda_graph=False, speculative_adaptive=False))
    graph = sys.modules["torch"].cuda.CUDAGraph()
    worker = ew.EAGLEWorkerV2(dr.EAGLEDraftCudaGraphRunner(graph), de.EAGLEDraftExtendCudaGraphRunner(graph),
                              vr.DecodeCudaGraphRunner(graph))
    proc = brp.SchedulerBatchResultProcessor(worker)
    lens = [1] * batch_size

    class Req:                      # SGLang's schedule_batch.Req, as far as the shim reads it
        finished_reason, is_retracted = None, False

        def finished(self):
            return self.finished_reason is not None
    batch = SimpleNamespace(reqs=[Req() for _ in lens], lens=lens, forward_mode=SimpleNamespace(is_extend=lambda: False))
    on_idle = scheduler.on_idle

    def run(n):
        prev = None
        for _ in range(n):
            res = worker.forward_batch_generation(batch)
            if prev is not None:     # the overlap scheduler resolves the previous cycle's result
                proc._resolve_spec_v2_tokens(prev, batch)
            prev = res
            for _ in range(idle_calls):
                on_idle()

    run(500)                         # warm-up: the sink started, pyarrow imported, the pool filled
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter_ns()
    run(cycles)
    wall = time.perf_counter_ns() - t0
    if prof is not None:
        prof.disable()
    out = {"mode": mode, "cycles": cycles, "us_per_cycle": wall / cycles / 1e3}
    if mode == "live":
        from nvtx_annotate import live
        import glob

        import pyarrow.parquet as pq
        state = live.state()
        out["events_every"] = state.timer.events_every
        state.timer.close()
        state.sink.close()
        files = sorted(glob.glob(os.path.join(os.environ["SPECPROF_TIMING_DIR"], "*.parquet")))
        t = pq.read_table(files, columns=["cycle", "timed", "shim_ns", "sink_ns"]).to_pylist()
        rows = [r for r in t if r["cycle"] > 600]      # the measured round (after the warm-up and the sink's start)
        untimed = [r["shim_ns"] for r in rows if not r["timed"] and r["shim_ns"] is not None]
        timed = [r["shim_ns"] for r in rows if r["timed"] and r["shim_ns"] is not None]
        out["rows_seen"] = len(rows)
        out["shim_us_untimed"] = statistics.fmean(untimed) / 1e3 if untimed else None
        out["shim_us_timed"] = statistics.fmean(timed) / 1e3 if timed else None
        # the sink's drains run every second and carry their CPU time on the next drain's first row: over the measured
        # round's rows alone (under a second of cycles) that is one drain or none; over every row of the run instead
        out["sink_us_per_cycle"] = sum(r["sink_ns"] or 0 for r in t) / max(len(t), 1) / 1e3
        detail = glob.glob(os.path.join(os.environ["SPECPROF_TIMING_DIR"], "own_detail-*.json"))
        if detail:
            with open(detail[0]) as f:
                out["detail_us_per_cycle"] = {k: v[0] / (cycles + 500) / 1e3 for k, v in json.load(f).items()}
    if prof is not None:
        import io
        import pstats
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        out["profile"] = s.getvalue()
    return out


def _child(mode: str, cycles: int, profile: bool, idle_calls: int = IDLE_CALLS, detail: bool = False,
           batch_size: int = BATCH) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        _write_package(tmp)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, os.getcwd(), os.environ.get("PYTHONPATH", "")]))
        env.pop("SPECPROF_TIMING", None)
        env.pop("SPECPROF_NVTX", None)
        if mode == "live":
            env.update(SPECPROF_TIMING="1", SPECPROF_TIMING_DIR=os.path.join(tmp, "logs"))
            if detail:
                env["SPECPROF_TIMING_OWN_DETAIL"] = "1"
        code = f"import json, bench.shim_cycle as b; print(json.dumps(b._round({mode!r}, {cycles}, {profile}, {idle_calls}, {batch_size})))"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=80000,
                    help="cycles a round (default 80000: several seconds, so that the sink's drains, once a second, "
                         "fall inside the measured round)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--profile", action="store_true", help="cProfile one live round")
    ap.add_argument("--detail", action="store_true", help="one live round's own time by place (SPECPROF_TIMING_OWN_DETAIL)")
    ap.add_argument("--idle-calls", type=int, default=IDLE_CALLS, help="Scheduler.on_idle calls a cycle")
    ap.add_argument("--batch", type=int, default=BATCH, help="requests a decode cycle")
    ap.add_argument("--modes", default="bare,shim,live", help="which of bare, shim, live to run (comma-separated)")
    a = ap.parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    results = {}
    for mode in modes:
        rounds = [_child(mode, a.cycles, False, a.idle_calls, batch_size=a.batch) for _ in range(a.repeats)]
        us = [r["us_per_cycle"] for r in rounds]
        results[mode] = {"us_per_cycle_median": statistics.median(us), "us_per_cycle": us, "rounds": rounds}
        print(f"{mode:5s} {statistics.median(us):7.2f} us/cycle  (rounds {min(us):.2f}-{max(us):.2f})")
    base = results["bare"]["us_per_cycle_median"] if "bare" in results else None
    for mode in ("shim", "live"):
        if base is not None and mode in results:
            print(f"{mode} - bare: {results[mode]['us_per_cycle_median'] - base:.2f} us/cycle")
    live_rounds = results["live"]["rounds"] if "live" in results else []
    own = [r.get("shim_us_untimed") for r in live_rounds if r.get("shim_us_untimed") is not None]
    if own:
        print(f"live: the shim's own accounting {statistics.median(own):.2f} us an untimed cycle, "
              f"timed {statistics.median([r['shim_us_timed'] for r in live_rounds if r.get('shim_us_timed')]):.2f}, "
              f"sink {statistics.median([r['sink_us_per_cycle'] or 0 for r in live_rounds]):.2f}")
    if a.detail:
        d = _child("live", a.cycles, False, a.idle_calls, detail=True, batch_size=a.batch)["detail_us_per_cycle"]
        for place, us in sorted(d.items(), key=lambda kv: -kv[1]):
            print(f"  {us:7.3f} us/cycle  {place}")
    if a.profile:
        print(_child("live", a.cycles, True, a.idle_calls, batch_size=a.batch)["profile"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
