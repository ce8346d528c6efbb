"""The shim against generated SGLang-like modules whose targets take every shape a release could
give them: staticmethod, classmethod, plain function, bound method, callable object, async
function, property; renamed, keyword-only and extra parameters; missing attributes; targets that
raise; a shim whose own code fails. The same scenario runs on an unpatched copy and on a patched
copy of the package: every call returns what the unpatched call returns and raises what it raises,
and the recorded ranges are balanced and named."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
import textwrap
from types import SimpleNamespace

import pytest

from nvtx_annotate import _nvtx, shim, wrappers
from nvtx_annotate import protocol as P

# module path (under srt/) -> source; the class/attribute names are the shim's targets
KINDS = {
    "speculative/eagle_worker_v2.py": """
        import asyncio

        class EagleDraftWorker:
            @staticmethod
            def draft(batch, scale=2):                       # became a staticmethod
                if batch == "boom":
                    raise ValueError("draft failed: " + batch)
                return [x * scale for x in batch.items]

            @classmethod
            def _draft_extend_for_decode(cls, batch, out, *extra):  # became a classmethod, extra *args
                return (cls.__name__, len(extra))

        class EAGLEWorkerV2:
            def __init__(self):
                self._draft_worker = EagleDraftWorker()

            def forward_batch_generation(self, batch, on_publish=None, *, grammar_barrier=None, **more):
                d = self._draft_worker.draft(batch)
                out = self.verify(batch, grammar_barrier=grammar_barrier)
                if on_publish is not None:
                    on_publish(out)
                EagleDraftWorker._draft_extend_for_decode(batch, out, 1, 2)
                out.draft = d
                out.more = sorted(more)
                return out

            def verify(self, batch, grammar_barrier=None):
                if batch.items == [13]:
                    raise KeyError("unlucky")
                return Result(accept_lens=[len(batch.items) + 1] * len(batch.items))

            def on_verify_complete_cpu(self, *, accept_lens, batch_size=0):   # keyword-only, renamed
                return ("adaptive", tuple(accept_lens), batch_size)

        class Result:
            def __init__(self, accept_lens):
                self.accept_lens = accept_lens

        class SlottedResult:
            __slots__ = ("accept_lens", "num_correct_drafts_per_req_cpu")
            def __init__(self, accept_lens):
                self.accept_lens = accept_lens
    """,
    "speculative/eagle_draft_cuda_graph_runner.py": """
        class _Launcher:
            def __call__(self, forward_batch):
                return ("replayed", forward_batch)

        class EAGLEDraftCudaGraphRunner:
            execute = _Launcher()                             # a callable object, not a function
    """,
    "speculative/eagle_draft_extend_cuda_graph_runner.py": """
        class EAGLEDraftExtendCudaGraphRunner:
            @property
            def execute(self):                               # a property: left alone
                return "property value"
    """,
    "model_executor/__init__.py": "",
    "model_executor/runner/__init__.py": "",
    "model_executor/runner/decode_cuda_graph_runner.py": """
        import asyncio
        from .... import trace

        class DecodeCudaGraphRunner:
            async def execute(self, forward_batch, pp_proxy_tensors=None):   # async
                trace.append("body start")
                await asyncio.sleep(0)
                trace.append("body end")
                if forward_batch == "fail":
                    raise RuntimeError("replay failed")
                return ("async", forward_batch)
    """,
    "distributed/parallel_state.py": """
        class GroupCoordinator:
            def __init__(self, group_name, rank, world):
                self.unique_name = group_name + ":0"
                self.rank_in_group, self.world_size, self.device = rank, world, "cuda:3"
            def all_reduce(self, input_):
                return input_ + 1
    """,
    "layers/flashinfer_comm_fusion.py": """
        class _Fusion:
            def __init__(self, k):
                self.k = k
            def run(self, x, residual=None):
                return x * self.k
        flashinfer_allreduce_residual_rmsnorm = _Fusion(3).run   # a bound method at module level
    """,
    "managers/__init__.py": "",
    "managers/scheduler_components/__init__.py": "",
    "managers/scheduler_components/batch_result_processor.py": """
        class SchedulerBatchResultProcessor:
            def __init__(self, model_worker):
                self.model_worker = model_worker
            def _resolve_spec_v2_tokens(self, generation_result, batch, extra=None):  # renamed parameter
                lens = generation_result.accept_lens
                generation_result.num_correct_drafts_per_req_cpu = [x - 1 for x in lens]
                self.model_worker.on_verify_complete_cpu(accept_lens=generation_result.num_correct_drafts_per_req_cpu,
                                                         batch_size=len(lens))
                return [list(range(x)) for x in lens]
    """,
    "utils/profile_utils.py": """
        class _ProfilerCudart:
            def start(self):
                return "started"
    """,
}
UNBINDABLE = {  # what the shim reads cannot be found: no mark, one warning, calls untouched
    "speculative/eagle_worker_v2.py": """
        class EAGLEWorkerV2:
            def on_verify_complete_cpu(self, *, counts, batch_size=0):
                return ("adaptive", tuple(counts), batch_size)
            forward_batch_generation = staticmethod(lambda: "no self, no batch")
    """,
    "managers/__init__.py": "",
    "managers/scheduler_components/__init__.py": "",
    "managers/scheduler_components/batch_result_processor.py": """
        class SchedulerBatchResultProcessor:
            def _resolve_spec_v2_tokens(self, *, batch):
                return batch
    """,
    "distributed/parallel_state.py": """
        class GroupCoordinator:          # no __init__ of its own, an all_reduce without self
            all_reduce = staticmethod(lambda x: x * 10)
    """,
}


def _write(tmp_path, files, name):
    root = tmp_path / name
    for rel, src in files.items():
        p = root / "srt" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    dirs = {root}
    for p in root.rglob("*.py"):
        dirs.update(q for q in p.parents if q == root or root in q.parents)
    for d in sorted(dirs):
        init = d / "__init__.py"
        if not init.exists():
            init.write_text("trace = []\n" if d == root else "")
    return name


@pytest.fixture
def pkgs(tmp_path, monkeypatch):
    """(unpatched name, patched name, recorder) for a files dict."""
    made = []
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    wrappers.reset_for_tests()
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(files):
        stem = "kinds_" + tmp_path.name.replace("-", "_")[-10:] + str(len(made))
        plain, patched = _write(tmp_path, files, stem + "_plain"), _write(tmp_path, files, stem + "_shim")
        shim.install(patched)
        made.append(patched)
        return plain, patched, rec

    yield make
    for name in made:
        shim.uninstall(name)
    for m in [m for m in sys.modules if m.startswith("kinds_")]:
        del sys.modules[m]
    _nvtx.set_backend(prev)
    wrappers.reset_for_tests()


def _observe(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # same type and message, unpatched and patched
        return ("raise", type(e).__name__, str(e))


class Mode:
    def __init__(self, extend):
        self.extend = extend

    def is_extend(self):
        return self.extend


def _batch(items, extend=False):
    return SimpleNamespace(items=items, forward_mode=Mode(extend), is_extend_in_batch=False)


def scenario(pkg):
    """Every call a server would make, with positional/keyword/extra arguments and failures."""
    m = lambda rel: importlib.import_module(f"{pkg}.srt.{rel}")  # noqa: E731
    ew, ps = m("speculative.eagle_worker_v2"), m("distributed.parallel_state")
    fus, brp = m("layers.flashinfer_comm_fusion"), m("managers.scheduler_components.batch_result_processor")
    dg, deg = m("speculative.eagle_draft_cuda_graph_runner"), m("speculative.eagle_draft_extend_cuda_graph_runner")
    vg, pu = m("model_executor.runner.decode_cuda_graph_runner"), m("utils.profile_utils")
    obs = []
    tp, ep = ps.GroupCoordinator("tp", 1, 2), ps.GroupCoordinator("ep", 0, 2)
    obs += [_observe(lambda: tp.all_reduce(1)), _observe(lambda: ep.all_reduce(input_=5))]
    obs += [_observe(lambda: fus.flashinfer_allreduce_residual_rmsnorm(2)),
            _observe(lambda: fus.flashinfer_allreduce_residual_rmsnorm(2, residual=1))]
    w = ew.EAGLEWorkerV2()
    published = []
    out = w.forward_batch_generation(_batch([1, 2, 3]), published.append, grammar_barrier=None, zz=1, aa=2)
    obs.append(("ok", (out.accept_lens, out.draft, out.more, len(published))))
    obs.append(_observe(lambda: w.forward_batch_generation(_batch([13]))))  # verify raises KeyError
    obs.append(_observe(lambda: w.forward_batch_generation(batch=_batch([4], extend=True)).draft))  # a prefill
    obs += [_observe(lambda: ew.EagleDraftWorker.draft(_batch([5]), 3)),
            _observe(lambda: w._draft_worker.draft(_batch([5]), scale=4)),
            _observe(lambda: ew.EagleDraftWorker.draft("boom")),
            _observe(lambda: ew.EagleDraftWorker().draft(batch=_batch([1]))),
            _observe(lambda: ew.EagleDraftWorker._draft_extend_for_decode(None, None)),
            _observe(lambda: w._draft_worker._draft_extend_for_decode(None, None, 7))]
    obs += [_observe(lambda: dg.EAGLEDraftCudaGraphRunner().execute("fb")),
            _observe(lambda: dg.EAGLEDraftCudaGraphRunner.execute(forward_batch="fb2")),
            _observe(lambda: deg.EAGLEDraftExtendCudaGraphRunner().execute)]
    runner = vg.DecodeCudaGraphRunner()
    obs.append(("ok", inspect.iscoroutinefunction(vg.DecodeCudaGraphRunner.execute)))
    obs += [_observe(lambda: asyncio.run(runner.execute("fb"))),
            _observe(lambda: asyncio.run(runner.execute(forward_batch="fb", pp_proxy_tensors=1))),
            _observe(lambda: asyncio.run(runner.execute("fail")))]
    proc = brp.SchedulerBatchResultProcessor(w)
    obs.append(_observe(lambda: proc._resolve_spec_v2_tokens(out, _batch([1, 2, 3]))))
    obs.append(_observe(lambda: proc._resolve_spec_v2_tokens(generation_result=ew.Result([2, 5]), batch=None,
                                                             extra=1)))
    obs.append(_observe(lambda: proc._resolve_spec_v2_tokens(ew.SlottedResult([1]), None)))
    obs.append(_observe(lambda: proc._resolve_spec_v2_tokens(None, None)))  # raises AttributeError
    obs.append(_observe(lambda: w.on_verify_complete_cpu(accept_lens=[4, 0], batch_size=2)))
    obs.append(_observe(lambda: w.on_verify_complete_cpu([4, 0])))  # TypeError: keyword-only
    obs.append(_observe(lambda: pu._ProfilerCudart().start()))
    obs.append(("ok", list(importlib.import_module(pkg).trace)))
    return obs


def test_every_kind_behaves_as_unpatched_and_records_named_balanced_ranges(pkgs):
    plain, patched, rec = pkgs(KINDS)
    want = scenario(plain)
    assert rec.events == []  # the unpatched copy records nothing
    got = scenario(patched)
    assert got == want
    assert rec.balanced()
    assert wrappers.stats()["faults"] == 0
    names = [n for n, _ in rec.ranges()]
    assert names == [
        "allreduce",                      # tp.all_reduce (ep: not the TP group)
        "allreduce", "allreduce",         # the bound-method fusion function
        "decode_cycle", "draft", "verify", "draft_extend",
        "decode_cycle", "draft", "verify",  # verify raised: both ranges closed all the same
        "prefill", "draft", "verify", "draft_extend",
        "draft", "draft", "draft", "draft", "draft_extend", "draft_extend",
        "graph_replay_draft", "graph_replay_draft",  # the callable object (never bound to an instance)
        "graph_replay_verify", "graph_replay_verify", "graph_replay_verify",  # async: start/end
    ]
    assert rec.payloads("decode_cycle") == [1, 2]
    # async: the range spans the awaited body (start ... body ... end)
    kinds = [(k, t) for k, t, _, _ in rec.events if k in ("start", "end")]
    assert kinds == [("start", "graph_replay_verify"), ("end", None)] * 3
    marks = rec.marks()
    # the clock of the decode cycles before profiling started (nvtx_annotate/clock.py): cycle 1, from its start to
    # cycle 2's, 9 accepted + 3 requests = 12 tokens (its period is this machine's)
    clock = [P.parse_clock_mark(t) for t, _ in marks if t.startswith("clock ")]
    assert [(c.requests, c.part, len(c.periods_us), c.tokens) for c in clock] == [(3, 0, 1, (12,))]
    marks = [m for m in marks if not m[0].startswith("clock ")]
    assert marks == [
        ("rank=1 world=2 device=3", None),
        ("accept_len=9 reqs=3 cycle=1 lens=3,3,3", 9),  # renamed `generation_result`, positional
        ("accept_len=5 reqs=2 lens=1,4", 5),             # by keyword, a result no cycle returned
        ("accept_len=0 reqs=1 lens=0", 0),               # slots: no tag, still the mark
        ("accept_len=4 reqs=2 lens=4,0", 4),             # keyword-only `accept_lens`, outside a resolver
        ("rank=1 world=2 device=3", None),               # profiling started
    ]
    assert wrappers.stats()["cycles"] == 1 and wrappers.stats()["prefills"] == 1  # the one that raised: not counted
    # kinds kept
    ew = importlib.import_module(f"{patched}.srt.speculative.eagle_worker_v2")
    assert isinstance(ew.EagleDraftWorker.__dict__["draft"], staticmethod)
    assert isinstance(ew.EagleDraftWorker.__dict__["_draft_extend_for_decode"], classmethod)
    assert inspect.signature(ew.EAGLEWorkerV2.forward_batch_generation) == inspect.signature(
        importlib.import_module(f"{plain}.srt.speculative.eagle_worker_v2").EAGLEWorkerV2.forward_batch_generation)
    assert shim.skipped() == {f"{patched}.srt.speculative.eagle_draft_extend_cuda_graph_runner:"
                              "EAGLEDraftExtendCudaGraphRunner.execute": "property"}


def test_async_range_spans_the_awaited_body(pkgs):
    _, patched, rec = pkgs(KINDS)
    vg = importlib.import_module(f"{patched}.srt.model_executor.runner.decode_cuda_graph_runner")
    trace = importlib.import_module(patched).trace
    seen = []

    class Spy(_nvtx.RecordingBackend):
        def start(self, name):
            seen.append(("start", list(trace)))
            return super().start(name)

        def end(self, rid):
            seen.append(("end", list(trace)))
            super().end(rid)

    _nvtx.set_backend(Spy())
    coro = vg.DecodeCudaGraphRunner().execute("fb")
    assert seen == []  # creating the coroutine runs nothing
    assert asyncio.run(coro) == ("async", "fb")
    assert seen == [("start", []), ("end", ["body start", "body end"])]


def test_unbindable_reads_give_no_mark_one_warning_and_untouched_calls(pkgs, capsys):
    plain, patched, rec = pkgs(UNBINDABLE)

    def run(pkg):
        ew = importlib.import_module(f"{pkg}.srt.speculative.eagle_worker_v2")
        brp = importlib.import_module(f"{pkg}.srt.managers.scheduler_components.batch_result_processor")
        ps = importlib.import_module(f"{pkg}.srt.distributed.parallel_state")
        w = ew.EAGLEWorkerV2()
        return [_observe(lambda: w.on_verify_complete_cpu(counts=[1, 2])),
                _observe(lambda: w.on_verify_complete_cpu(counts=[1, 2])),
                _observe(lambda: brp.SchedulerBatchResultProcessor()._resolve_spec_v2_tokens(batch=3)),
                _observe(lambda: ew.EAGLEWorkerV2.forward_batch_generation()),
                _observe(lambda: ps.GroupCoordinator.all_reduce(2)),
                _observe(lambda: ps.GroupCoordinator().all_reduce(3))]

    want = run(plain)
    err_import = capsys.readouterr().err
    got = run(patched)
    assert got == want
    assert [m for m in rec.marks() if m[0].startswith("accept")] == []
    err = err_import + capsys.readouterr().err
    for what, target in (("the accept lengths", "eagle_worker_v2.EAGLEWorkerV2.on_verify_complete_cpu"),
                         ("the batch result", "batch_result_processor.SchedulerBatchResultProcessor._resolve_spec_v2_tokens"),
                         ("the batch (forward mode)", "eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation"),
                         ("the instance", "parallel_state.GroupCoordinator.all_reduce")):
        assert err.count(f"cannot find {what} in the signature of {target}") == 1, (what, err)
    # the staticmethod cycle still records its range (as a decode cycle: it cannot tell prefill apart),
    # the all-reduce without a group is recorded for every call
    assert [n for n, _ in rec.ranges()] == ["decode_cycle", "allreduce", "allreduce"]
    assert rec.balanced()


def test_a_fault_in_the_shim_is_counted_reported_once_and_the_call_runs_unchanged(pkgs, capsys):
    plain, patched, rec = pkgs(KINDS)

    class Broken(_nvtx.RecordingBackend):
        def push(self, name, payload=None):
            if name == "draft":
                raise OSError("injection gone")
            super().push(name, payload)

    class BadMode:
        def is_extend(self):
            raise RuntimeError("not a forward mode")

    def run(pkg):
        ew = importlib.import_module(f"{pkg}.srt.speculative.eagle_worker_v2")
        w = ew.EAGLEWorkerV2()
        a = _observe(lambda: w.forward_batch_generation(_batch([1, 2])).draft)
        b = _observe(lambda: w.forward_batch_generation(_batch([3])).draft)
        bad = SimpleNamespace(items=[2], forward_mode=BadMode(), is_extend_in_batch=False)
        c = _observe(lambda: w.forward_batch_generation(bad).draft)
        return [a, b, c]

    want = run(plain)
    broken = Broken()
    _nvtx.set_backend(broken)
    got = run(patched)
    assert got == want == [("ok", [2, 4]), ("ok", [6]), ("ok", [4])]
    assert broken.balanced()
    assert [n for n, _ in broken.ranges()] == ["decode_cycle", "verify", "draft_extend"] * 3
    st = wrappers.stats()
    assert st["faults_by_target"] == {"eagle_worker_v2.EagleDraftWorker.draft": 3,
                                      "eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation (forward mode)": 1}
    err = capsys.readouterr().err
    assert err.count("internal error in the wrapper of eagle_worker_v2.EagleDraftWorker.draft (OSError: "
                     "injection gone)") == 1
    assert err.count("internal error in the wrapper of eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation "
                     "(forward mode) (RuntimeError: not a forward mode)") == 1


def test_missing_attributes_and_modules_break_nothing(pkgs):
    files = {"speculative/eagle_worker_v2.py": "class EAGLEWorkerV2:\n    pass\nclass EagleDraftWorker:\n    pass\n",
             "distributed/parallel_state.py": "X = 1\n"}
    plain, patched, rec = pkgs(files)
    ew = importlib.import_module(f"{patched}.srt.speculative.eagle_worker_v2")
    assert ew.EAGLEWorkerV2.__dict__.keys() == importlib.import_module(
        f"{plain}.srt.speculative.eagle_worker_v2").EAGLEWorkerV2.__dict__.keys()
    assert importlib.import_module(f"{patched}.srt.distributed.parallel_state").X == 1
    assert shim.patched_roles(patched) == {}
    assert rec.events == []
