"""Run a real SGLang release's Python code (an unpacked wheel) on CPU torch with the shim and print
what the shim recorded, as JSON (``tests/test_sglang_real.py`` runs it in a subprocess).

    python tests/sglang_real_driver.py SRC DEPS META OUT.json

SRC: the unpacked wheel (holds ``sglang/``); DEPS: a ``pip install --target`` directory with the
pure-Python (and CPU) packages SGLang imports; META: a directory with a ``torchvision`` dist-info.
GPU-only packages (sgl_kernel, flashinfer, flash_attn, cuda-python, torchvision) are replaced by
stub modules, triton by SGLang's own stub (``sglang/_triton_stub.py``, the one it uses on macOS),
torch.compile is disabled (TORCHDYNAMO_DISABLE=1).

Phase 1 imports the real modules with the shim's import hook installed and reports which targets
it wrapped. Phase 2 replaces the GPU collaborators of ``EAGLEWorkerV2`` (the draft model forward,
the verify forward, the graph runners' bodies, the draft-extend body) by stubs, re-installs the
shim (which then wraps those in place) and drives the *real* ``forward_batch_generation`` (decode
and prefill), the real ``verify`` and ``EagleDraftWorker.draft`` bodies, the real scheduler-side
``SchedulerBatchResultProcessor._resolve_spec_v2_tokens``, a real ``GroupCoordinator`` on a
one-rank gloo group and the real ``_ProfilerCudart.start``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import socket
import sys
import traceback
import types

SRC, DEPS, META, OUT = sys.argv[1:5]
os.environ["TORCHDYNAMO_DISABLE"] = "1"
os.environ.setdefault("SGLANG_LOGGING_CONFIG_PATH", "")
sys.path[:0] = [SRC, DEPS]
sys.path.append(META)

STUBBED = ("sgl_kernel", "flash_attn", "flash_attn_interface", "flashinfer", "cuda", "torchvision")
VERSIONS = {"torchvision": "0.28.0"}


class _StubMeta(type):
    """A class whose every attribute is a stub, usable as base class, decorator and value."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _Stub

    def __getitem__(cls, key):
        return _Stub

    def __or__(cls, other):
        return _Stub

    __ror__ = __or__

    def __iter__(cls):
        return iter(())

    def __bool__(cls):
        return False

    def __mro_entries__(cls, bases):
        return (object,)


class _Stub(metaclass=_StubMeta):
    pass


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Stub


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        m.__file__ = __file__
        top = spec.name.split(".")[0]
        if top in VERSIONS and spec.name == top:
            m.__version__ = VERSIONS[top]
        return m

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _StubFinder())
spec = importlib.util.spec_from_file_location("_sglang_triton_stub", os.path.join(SRC, "sglang", "_triton_stub.py"))
triton_stub = importlib.util.module_from_spec(spec)
spec.loader.exec_module(triton_stub)
triton_stub.install()

from nvtx_annotate import _nvtx, shim, wrappers  # noqa: E402
from nvtx_annotate.targets import TARGETS  # noqa: E402

rec = _nvtx.RecordingBackend()
_nvtx.set_backend(rec)
out = {"import_errors": {}, "wrapped": [], "present_not_wrapped": [], "signatures_kept": [], "errors": []}

# ------------------------------------------------------------------ phase 1: the import hook
shim.install("sglang")
MODULES = sorted({t.full_module("sglang") for t in TARGETS})
for name in MODULES:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("sglang"):
            out["import_errors"][name] = "absent in this version"
        else:
            out["import_errors"][name] = f"{type(e).__name__}: {e}"
    except Exception as e:
        out["import_errors"][name] = f"{type(e).__name__}: {e}"
for t in TARGETS:
    mod = sys.modules.get(t.full_module("sglang"))
    if mod is None:
        continue
    owner, attr = shim._resolve(mod, t.attr)
    if owner is None:
        continue
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if raw is None:
        continue
    label = f"{t.module}:{t.attr}"
    if wrappers.is_wrapped(raw):
        out["wrapped"].append(label)
        fn = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        orig = getattr(fn, wrappers.WRAPPED)
        if (inspect.signature(fn) == inspect.signature(orig)
                and inspect.iscoroutinefunction(fn) == inspect.iscoroutinefunction(orig)):
            out["signatures_kept"].append(label)
    elif label not in out["wrapped"]:
        out["present_not_wrapped"].append(label)
out["skipped"] = shim.skipped()

# ------------------------------------------------------------------ phase 2: drive the real bodies
try:
    import torch

    ew = sys.modules["sglang.srt.speculative.eagle_worker_v2"]
    brp = sys.modules["sglang.srt.managers.scheduler_components.batch_result_processor"]
    dgr = sys.modules["sglang.srt.speculative.eagle_draft_cuda_graph_runner"]
    degr = sys.modules["sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"]
    vgr = sys.modules["sglang.srt.model_executor.runner.decode_cuda_graph_runner"]
    GenerationBatchResult = ew.GenerationBatchResult
    shim.uninstall("sglang")
    calls = []

    # the GPU collaborators, replaced before the shim wraps the targets in place
    def draft_graph_execute(self, forward_batch):
        calls.append("draft graph")
        return None, None, None, None

    def verify_graph_execute(self, forward_batch, pp_proxy_tensors=None):
        calls.append("verify graph")
        return None

    def draft_extend_graph_execute(self, forward_batch):
        calls.append("draft_extend graph")
        return None

    dgr.EAGLEDraftCudaGraphRunner.execute = draft_graph_execute
    vgr.DecodeCudaGraphRunner.execute = verify_graph_execute
    degr.EAGLEDraftExtendCudaGraphRunner.execute = draft_extend_graph_execute
    draft_runner_obj = object.__new__(dgr.EAGLEDraftCudaGraphRunner)
    verify_runner_obj = object.__new__(vgr.DecodeCudaGraphRunner)
    extend_runner_obj = object.__new__(degr.EAGLEDraftExtendCudaGraphRunner)

    class _Mode:
        def __init__(self, extend):
            self._extend = extend

        def is_extend(self):
            return self._extend

        def is_idle(self):
            return False

        def is_decode(self):
            return not self._extend

    def prepare_for_draft(draft_input, *args, **kwargs):
        return types.SimpleNamespace(forward_mode=_Mode(False)), True

    class _VerifyInput:
        def is_verify_input(self):
            return True

    def build_eagle_verify_input(*args, **kwargs):
        calls.append("build verify input")
        return _VerifyInput()

    def run_eagle_verify(batch, **kwargs):
        calls.append("verify forward")
        verify_runner_obj.execute(None)
        n = len(batch.reqs)
        return GenerationBatchResult(next_token_ids=torch.arange(n * 4), accept_lens=torch.tensor([3, 1, 4][:n]),
                                     speculative_num_draft_tokens=4, new_seq_lens=torch.ones(n))

    def draft_extend_for_decode(self, batch, batch_result):
        calls.append("draft_extend")
        extend_runner_obj.execute(None)

    def draft_extend_for_prefill(self, batch, hidden, next_token_ids, mm_embeds=None):
        calls.append("draft_extend prefill")
        return "next draft input"

    ew.prepare_for_draft = prepare_for_draft
    ew.build_eagle_verify_input = build_eagle_verify_input
    ew.run_eagle_verify = run_eagle_verify
    ew.speculative_moe_backend_context = contextlib.nullcontext
    ew.speculative_moe_a2a_backend_context = contextlib.nullcontext
    ew.spec_stage_span = lambda name: contextlib.nullcontext()
    ew.EagleDraftWorker._draft_extend_for_decode = draft_extend_for_decode
    ew.EagleDraftWorker._draft_extend_for_prefill = draft_extend_for_prefill
    wrappers.reset_for_tests(cycles_from=41)  # as if 40 cycles ran before a capture window opened
    shim.install("sglang")  # patches the imported modules in place

    # a real one-rank GroupCoordinator (gloo, CPU): the rank mark, a TP all-reduce range
    ps = sys.modules["sglang.srt.distributed.parallel_state"]
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", world_size=1, rank=0)
        names = inspect.signature(ps.GroupCoordinator.__init__).parameters
        kw = {k: False for k in names if k.startswith("use_")}
        group = ps.GroupCoordinator(group_ranks=[[0]], local_rank=0, torch_distributed_backend="gloo",
                                    group_name="tp", **kw)
        out["allreduce_result"] = group.all_reduce(torch.ones(2)).tolist()
        out["group"] = [group.unique_name, group.rank_in_group, group.world_size, str(group.device)]
    except Exception as e:
        out["errors"].append(f"GroupCoordinator: {type(e).__name__}: {e}")
        wrappers.emit_rank_mark(0, 1, "cpu")

    draft = object.__new__(ew.EagleDraftWorker)
    draft.__dict__.update(
        draft_tp_context=lambda group: contextlib.nullcontext(), draft_runner=types.SimpleNamespace(
            tp_group=None, canary_manager=None), req_to_token_pool=None, cuda_graph_runner=draft_runner_obj,
        topk=1, speculative_num_steps=3, speculative_num_draft_tokens=4, seed_dsa_topk_from_draft_extend=False,
        target_worker=None, tree_mask_mode=None, device="cpu")
    target = types.SimpleNamespace(forward_batch_generation=lambda batch, capture_hidden_mode=None: GenerationBatchResult(
        logits_output=types.SimpleNamespace(hidden_states=None, mm_input_embeds=None),
        next_token_ids=torch.zeros(len(batch.reqs), dtype=torch.long)))
    worker = object.__new__(ew.EAGLEWorkerV2)
    worker.__dict__.update(
        _draft_worker=draft, _target_worker=target, adaptive_controller=None, speculative_num_steps=3,
        speculative_num_draft_tokens=4, topk=1, device="cpu", plan_stream=None, plan_stream_ctx=None,
        req_to_token_pool=None, token_to_kv_pool_allocator=None,
        speculative_algorithm=types.SimpleNamespace(is_standalone=lambda: False))

    def make_batch(extend, n=3):
        return types.SimpleNamespace(
            forward_mode=_Mode(extend), is_extend_in_batch=False, seq_lens=torch.ones(n), spec_info=object(),
            reqs=[types.SimpleNamespace(is_retracted=False, finished=lambda: False, grammar=None, kv_committed_len=0,
                                        spec_verify_ct=0, spec_num_correct_drafts=0, spec_num_block_accept_tokens=0,
                                        update_spec_correct_drafts_histogram=lambda n: None) for _ in range(n)],
            has_grammar=False, return_logprob=False)

    prefill_out = worker.forward_batch_generation(make_batch(True))
    out["prefill_next_draft_input"] = prefill_out.next_draft_input
    events_before_decode = len(rec.events)
    decode_batch = make_batch(False)
    result = worker.forward_batch_generation(decode_batch, on_publish=lambda lens: calls.append("publish"))
    out["cycle_attr"] = getattr(result, "_specprof_nvtx_cycle", None)

    # the scheduler side, one batch later: the real resolver on the returned result
    proc = object.__new__(brp.SchedulerBatchResultProcessor)
    object.__setattr__(proc, "model_worker", worker)
    out["resolved_tokens"] = proc._resolve_spec_v2_tokens(result, decode_batch)
    out["num_correct_drafts_per_req_cpu"] = result.num_correct_drafts_per_req_cpu
    untagged = GenerationBatchResult(next_token_ids=torch.arange(8), accept_lens=torch.tensor([2, 5]),
                                     speculative_num_draft_tokens=4)
    proc._resolve_spec_v2_tokens(untagged, make_batch(False, 2))

    # profiling starts: the rank mark again (the real _ProfilerCudart.start, not the first rank in node)
    pu = sys.modules["sglang.srt.utils.profile_utils"]
    prof = object.__new__(pu._ProfilerCudart)
    prof.first_rank_in_node = False
    prof.start()
    worker.forward_batch_generation(make_batch(False))  # the rank mark once more at the next cycle

    n_events = len(rec.events)  # what the other checks read ends here
    stats_before = wrappers.stats()
    # overlap scheduling: one more cycle runs for a request the previous result finished; SGLang
    # discards it (no spec_verify_ct), so the accept mark leaves it out
    done_batch = make_batch(False)
    done_batch.reqs[1].finished = lambda: True
    done_result = worker.forward_batch_generation(done_batch)
    out["done_cycle"] = getattr(done_result, "_specprof_nvtx_cycle", None)
    proc._resolve_spec_v2_tokens(done_result, done_batch)
    out["done_marks"] = [t for k, t, _, v in rec.events[n_events:] if k == "mark"]

    out["calls"] = calls
    out["events"] = [[k, t, v] for k, t, _, v in rec.events[:n_events]]
    out["events_before_decode"] = events_before_decode
    out["balanced"] = rec.balanced()
    out["stats"] = stats_before
except Exception:
    out["errors"].append(traceback.format_exc())

with open(OUT, "w") as f:
    json.dump(out, f, default=repr)
