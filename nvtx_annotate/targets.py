"""What the shim annotates, per SGLang version (read from the released wheels 0.4.9 ... 0.5.23).

Every target is (role, range, module relative to the package root, attribute path, kind). A
role is annotated when at least one of its targets exists in the installed SGLang; the others
are simply absent in that version. Subclasses that override a target are targets themselves
(wrapping the base class does not reach an override). ``--check`` resolves the same table
against an unpacked source tree by parsing, without importing SGLang (see ``check.py``).

| role | range / mark | where (versions) |
|---|---|---|
| decode_cycle | ``decode_cycle`` (payload: cycle number), ``prefill`` for extend batches | v1 ``EAGLEWorker.forward_batch_speculative_generation`` (0.4.x), ``.forward_batch_generation`` (0.5.0-0.5.12), ``MultiLayerEagleWorker`` (0.5.10-0.5.12); v2 ``EAGLEWorkerV2.forward_batch_generation`` (0.5.6+) and the v2 workers that override it (``MultiLayerEagleWorkerV2``, ``FrozenKVMTPWorkerV2``, ``DFlashWorkerV2``, ``DSparkWorkerV2``, ``UnoWorkerV2``, ``NGRAMWorker``) |
| draft | ``draft`` | ``EAGLEWorker.draft``, ``EagleDraftWorker.draft`` (0.5.6+), ``MultiLayerEagle(Draft)Worker.draft``, ``FrozenKVMTPDraftWorker.draft`` |
| draft_extend | ``draft_extend`` | ``EAGLEWorker.forward_draft_extend_after_decode``, ``EagleDraftWorker._draft_extend_for_decode`` and the overrides |
| verify | ``verify`` | ``EAGLEWorker.verify``, ``EAGLEWorkerV2.verify``, ``MultiLayerEagleWorker(V2).verify`` |
| allreduce | ``allreduce`` | ``GroupCoordinator.all_reduce`` (TP group only), ``flashinfer_allreduce_residual_rmsnorm`` |
| graph_replay_* | ``graph_replay_draft`` / ``_draft_extend`` / ``_verify`` | ``EAGLEDraftCudaGraphRunner.replay`` / ``.execute`` (0.5.2x), ``EAGLEDraftExtendCudaGraphRunner.replay`` / ``.execute``, ``CudaGraphRunner.replay`` (<= 0.5.1x), ``DecodeCudaGraphRunner.execute`` (0.5.17+) |
| accept | mark ``accept_len=N reqs=M [cycle=K] lens=...`` | v1: return value of ``EAGLEWorker.verify`` (inside the cycle); v2: ``SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids`` (<= 0.5.1x), ``SchedulerBatchResultProcessor._resolve_spec_v2_tokens`` (0.5.17+) with ``cycle=K``; ``EAGLEWorkerV2.on_verify_complete_cpu`` when no resolver wraps it |
| rank | mark ``rank=R world=W device=D`` | ``GroupCoordinator.__init__`` of the TP group |
| config | mark ``spec_config algo=... steps=N ...`` (SGLang's ``server_args``) | ``Scheduler.__init__`` (every version) |
| profile_start | the rank mark again | ``Scheduler.start_profile`` (0.4.x), ``SchedulerProfilerMixin.start_profile`` (0.5.x), ``SchedulerProfilerManager._start_profile`` (0.5.17+), ``_ProfilerCudart.start`` (0.5.10+) |
"""

from __future__ import annotations

from collections import namedtuple

from . import protocol as P
from .binding import Read

# kinds: what the wrapper does
RANGE = "range"  # push/pop around the call
CYCLE = "cycle"  # decode_cycle (payload K) or prefill range; tags the result with K
VERIFY_V1 = "verify_v1"  # range; accept lengths from the return value (v1: inside the cycle)
ALLREDUCE_TP = "allreduce_tp"  # range only for the TP group, never while capturing
ALLREDUCE_FN = "allreduce_fn"  # range, never while capturing (also per-stream check)
ACCEPT_RESOLVE = "accept_resolve"  # no range; accept mark (cycle=K) from the result after the call
ACCEPT_CPU_ARG = "accept_cpu_arg"  # no range; accept mark from an argument (no cycle)
RANK_INIT = "rank_init"  # no range; rank mark after GroupCoordinator.__init__ of the TP group
PROFILE_START = "profile_start"  # no range; the rank mark again once profiling has started
CONFIG_INIT = "config_init"  # no range; spec_config mark after Scheduler.__init__ (its server_args)
IDLE = "idle"  # no range; after Scheduler.on_idle (every result processed): the timing mode resolves its cycles

INSTANCE = Read("the instance", (), None)
BATCH = Read("the batch (forward mode)", ("batch", "model_worker_batch", "schedule_batch", "forward_batch"), 0)
RESULT = Read("the batch result", ("result", "batch_result", "generation_result", "output", "res"), 0)
REQS_BATCH = Read("the batch (its requests)", ("batch", "schedule_batch"), 1)
LENGTHS = Read("the accept lengths", ("num_correct_drafts_per_req", "num_correct_drafts_per_req_cpu",
                                      "accept_length_per_req", "accept_length_per_req_cpu",
                                      "accept_lens", "accept_lengths"), 0)

KIND_READS: dict[str, tuple[Read, ...]] = {
    CYCLE: (INSTANCE, BATCH),
    ALLREDUCE_TP: (INSTANCE,),
    ACCEPT_RESOLVE: (RESULT, REQS_BATCH),
    ACCEPT_CPU_ARG: (LENGTHS,),
    RANK_INIT: (INSTANCE,),
    CONFIG_INIT: (INSTANCE,),
}
"""What each kind reads from its call (bound from the signature at patch time)."""

RESULT_ACCEPT_ATTRS = ("num_correct_drafts_per_req_cpu", "accept_length_per_req_cpu")
"""Per-request accepted draft tokens (bonus excluded) on a resolved batch result, first found wins:
0.5.17+ ``num_correct_drafts_per_req_cpu``, <= 0.5.1x ``accept_length_per_req_cpu``."""
VERIFY_ACCEPT_ATTRS = ("accept_length_per_req_cpu",)
"""The same on the value a v1 ``verify`` returns (an object or a tuple holding one)."""


class Target(namedtuple("Target", "role range_name module attr kind", defaults=(RANGE,))):
    """role, range name (None: marks only), module relative to the package root (e.g.
    ``srt.speculative.eagle_worker``), attribute (``Class.method`` or ``function``), kind."""

    __slots__ = ()

    def full_module(self, package: str) -> str:
        return f"{package}.{self.module}"

    @property
    def label(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.attr}"

    @property
    def reads(self) -> tuple[Read, ...]:
        return KIND_READS.get(self.kind, ())


_SPEC = "srt.speculative"
_V1, _V2 = f"{_SPEC}.eagle_worker", f"{_SPEC}.eagle_worker_v2"
_ML1, _ML2 = f"{_SPEC}.multi_layer_eagle_worker", f"{_SPEC}.multi_layer_eagle_worker_v2"
_FROZEN = f"{_SPEC}.frozen_kv_mtp_worker_v2"
_DC, _DR, _DE, _VE, _AR = P.DECODE_CYCLE, P.DRAFT, P.DRAFT_EXTEND, P.VERIFY, P.ALLREDUCE

TARGETS: list[Target] = [
    # decode cycle (and prefill): every speculative worker's forward_batch_generation
    Target("decode_cycle", _DC, _V1, "EAGLEWorker.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, _V1, "EAGLEWorker.forward_batch_speculative_generation", CYCLE),
    Target("decode_cycle", _DC, _ML1, "MultiLayerEagleWorker.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, _V2, "EAGLEWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, _ML2, "MultiLayerEagleWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, _FROZEN, "FrozenKVMTPWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, f"{_SPEC}.dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, f"{_SPEC}.dspark_components.dspark_worker_v2",
           "DSparkWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, f"{_SPEC}.uno_worker_v2", "UnoWorkerV2.forward_batch_generation", CYCLE),
    Target("decode_cycle", _DC, f"{_SPEC}.ngram_worker", "NGRAMWorker.forward_batch_generation", CYCLE),
    # draft
    Target("draft", _DR, _V1, "EAGLEWorker.draft"),
    Target("draft", _DR, _ML1, "MultiLayerEagleWorker.draft"),
    Target("draft", _DR, _V2, "EagleDraftWorker.draft"),
    Target("draft", _DR, _ML2, "MultiLayerEagleDraftWorker.draft"),
    Target("draft", _DR, _FROZEN, "FrozenKVMTPDraftWorker.draft"),
    # draft extend
    Target("draft_extend", _DE, _V1, "EAGLEWorker.forward_draft_extend_after_decode"),
    Target("draft_extend", _DE, _ML1, "MultiLayerEagleWorker.forward_draft_extend_after_decode"),
    Target("draft_extend", _DE, _V2, "EagleDraftWorker._draft_extend_for_decode"),
    Target("draft_extend", _DE, _ML2, "MultiLayerEagleDraftWorker._draft_extend_for_decode"),
    Target("draft_extend", _DE, _FROZEN, "FrozenKVMTPDraftWorker._draft_extend_for_decode"),
    # verify
    Target("verify", _VE, _V1, "EAGLEWorker.verify", VERIFY_V1),
    Target("verify", _VE, _ML1, "MultiLayerEagleWorker.verify", VERIFY_V1),
    Target("verify", _VE, _V2, "EAGLEWorkerV2.verify"),
    Target("verify", _VE, _ML2, "MultiLayerEagleWorkerV2.verify"),
    # allreduce
    Target("allreduce", _AR, "srt.distributed.parallel_state", "GroupCoordinator.all_reduce", ALLREDUCE_TP),
    Target("allreduce", _AR, "srt.layers.flashinfer_comm_fusion", "flashinfer_allreduce_residual_rmsnorm", ALLREDUCE_FN),
    # CUDA graph replays
    Target("graph_replay_draft", P.GRAPH_REPLAY_DRAFT, f"{_SPEC}.eagle_draft_cuda_graph_runner",
           "EAGLEDraftCudaGraphRunner.replay"),
    Target("graph_replay_draft", P.GRAPH_REPLAY_DRAFT, f"{_SPEC}.eagle_draft_cuda_graph_runner",
           "EAGLEDraftCudaGraphRunner.execute"),
    Target("graph_replay_draft_extend", P.GRAPH_REPLAY_DRAFT_EXTEND, f"{_SPEC}.eagle_draft_extend_cuda_graph_runner",
           "EAGLEDraftExtendCudaGraphRunner.replay"),
    Target("graph_replay_draft_extend", P.GRAPH_REPLAY_DRAFT_EXTEND, f"{_SPEC}.eagle_draft_extend_cuda_graph_runner",
           "EAGLEDraftExtendCudaGraphRunner.execute"),
    Target("graph_replay_verify", P.GRAPH_REPLAY_VERIFY, "srt.model_executor.cuda_graph_runner",
           "CudaGraphRunner.replay"),
    Target("graph_replay_verify", P.GRAPH_REPLAY_VERIFY, "srt.model_executor.runner.decode_cuda_graph_runner",
           "DecodeCudaGraphRunner.execute"),
    # accepted tokens per cycle
    Target("accept", None, _V1, "EAGLEWorker.verify", VERIFY_V1),
    Target("accept", None, _ML1, "MultiLayerEagleWorker.verify", VERIFY_V1),
    Target("accept", None, "srt.managers.scheduler_output_processor_mixin",
           "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", ACCEPT_RESOLVE),
    Target("accept", None, "srt.managers.scheduler_components.batch_result_processor",
           "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", ACCEPT_RESOLVE),
    Target("accept", None, _V2, "EAGLEWorkerV2.on_verify_complete_cpu", ACCEPT_CPU_ARG),
    # the scheduler went idle (every batch result processed): the timing mode resolves its last cycles
    # (SGLang ends its scheduler with SIGKILL: what is not written by then is lost; docs/live.md)
    Target("idle", None, "srt.managers.scheduler", "Scheduler.on_idle", IDLE),
    # SGLang's speculative configuration (steps, topk, TP, graphs...), once per scheduler process
    Target("config", None, "srt.managers.scheduler", "Scheduler.__init__", CONFIG_INIT),
    # rank, and again when profiling starts (a cudaProfilerApi capture window misses the first)
    Target("rank", None, "srt.distributed.parallel_state", "GroupCoordinator.__init__", RANK_INIT),
    Target("profile_start", None, "srt.managers.scheduler", "Scheduler.start_profile", PROFILE_START),
    Target("profile_start", None, "srt.managers.scheduler_profiler_mixin", "SchedulerProfilerMixin.start_profile",
           PROFILE_START),
    Target("profile_start", None, "srt.managers.scheduler_components.profiler_manager",
           "SchedulerProfilerManager._start_profile", PROFILE_START),
    Target("profile_start", None, "srt.utils.profile_utils", "_ProfilerCudart.start", PROFILE_START),
]

ROLES = [
    "decode_cycle", "draft", "draft_extend", "verify", "allreduce",
    "graph_replay_draft", "graph_replay_draft_extend", "graph_replay_verify", "accept", "rank", "config", "profile_start",
]
REQUIRED_ROLES = ("draft", "verify", "allreduce")
WORKER_ROLES = ("draft", "verify", "draft_extend")
"""Roles whose methods live on the speculative worker (or its draft worker): checked per worker
class at its first decode cycle."""


def patch_targets() -> list[Target]:
    """Targets to patch, without duplicates (a v1 verify appears for two roles)."""
    seen, out = set(), []
    for t in TARGETS:
        key = (t.module, t.attr)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def by_module(package: str) -> dict[str, list[Target]]:
    out: dict[str, list[Target]] = {}
    for t in patch_targets():
        out.setdefault(t.full_module(package), []).append(t)
    return out


def method_names(role: str) -> tuple[str, ...]:
    """The method names the targets of ``role`` patch (e.g. verify -> ("verify",))."""
    return tuple(dict.fromkeys(t.attr.rsplit(".", 1)[-1] for t in TARGETS if t.role == role))
