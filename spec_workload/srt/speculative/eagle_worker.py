"""Mirror of sglang.srt.speculative.eagle_worker (v1): forward_batch_generation -> draft -> verify
-> forward_draft_extend_after_decode, with the same method names the shim patches.

A cycle runs on a ScheduleBatch (its batch size may change from cycle to cycle, at most ``reqs``):
the draft and draft-extend graphs are captured at ``reqs`` requests and smaller batches padded to it
(as SGLang pads to a captured batch size); eager passes run at the batch's exact size.  With a
token-dependent target (``target.embed``, the MoE target) the draft starts from the embedding of
each request's current token and verify runs on the embeddings of that token and the draft's
proposals, so which experts verify touches follows the tokens, and the verify graph is captured
once per batch size (M (steps + 1) rows for M = 1..reqs, one shared memory pool), so a replay does
the batch's work, not a padded maximum's.  The dense target keeps fixed hidden states (its cost
does not depend on their values) and one verify graph at ``reqs``, padded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import torch

from ..distributed.parallel_state import get_tp_group
from ..model_executor.cuda_graph_runner import CudaGraphRunner
from .eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
from .eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner
from .eagle_utils import EagleVerifyOutput


@dataclass
class GenerationBatchResult:
    accept_length_per_req_cpu: List[int]
    num_tokens: int


class EAGLEWorker:
    def __init__(self, target, draft, reqs: int, steps: int, hidden: int, device, dtype,
                 use_graphs: bool, verify_graph: bool, accept_sampler, verify_capture=None):
        self.target, self.draft_model = target, draft
        self.reqs, self.steps = reqs, steps
        self.device, self.dtype = device, dtype
        self.accept_sampler = accept_sampler
        self.tp_group = get_tp_group()
        self.token_inputs = hasattr(target, "embed")
        g = torch.Generator(device="cpu").manual_seed(7)
        self.hidden_draft = torch.randn(reqs, hidden, generator=g).to(device, dtype)
        self.hidden_verify = torch.randn(reqs * (steps + 1), hidden, generator=g).to(device, dtype)
        self._verify_hidden = None  # target hidden states of the last verify (draft-extend input)
        self.last_expert_ids = None  # MoE target: expert ids [layers, tokens, top_k] of the last verify (device)
        self.draft_graph_runner = EAGLEDraftCudaGraphRunner(self._multi_step_draft, self.hidden_draft, use_graphs)
        self.draft_extend_graph_runner = EAGLEDraftExtendCudaGraphRunner(
            self._draft_extend, self.hidden_verify, use_graphs)
        sizes = [m * (steps + 1) for m in range(1, reqs + 1)] if self.token_inputs else None
        self.cuda_graph_runner = CudaGraphRunner(target, self.hidden_verify, use_graphs and verify_graph,
                                                 sizes=sizes, capture=verify_capture)

    # -- model pieces (captured in graphs when enabled)
    def _multi_step_draft(self, x):
        tokens = []
        for _ in range(self.steps):
            x, logits = self.draft_model(x)
            tokens.append(torch.argmax(logits, dim=-1))
        return torch.stack(tokens, dim=1)

    def _draft_extend(self, x):
        h, _ = self.draft_model(x)
        return h

    def _batch_size(self, batch) -> int:
        return self.reqs if batch is None else batch.batch_size()

    def _input_ids(self, batch) -> torch.Tensor:
        return torch.tensor(batch.input_ids, dtype=torch.long).to(self.device, non_blocking=True)

    # -- the methods the shim wraps
    def forward_batch_generation(self, batch) -> GenerationBatchResult:
        spec_info = self.draft(batch)
        logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        acc = verify_output.accept_length_per_req_cpu
        return GenerationBatchResult(acc, sum(acc) + len(acc))

    def draft(self, batch):
        m = self._batch_size(batch)
        if self.token_inputs and batch is not None:
            x = self.target.embed(self._input_ids(batch))
        else:
            x = self.hidden_draft[:m]
        if not self.draft_graph_runner.uses_graph:  # eager: no graph runner, like SGLang
            return self._multi_step_draft(x)
        return self.draft_graph_runner.replay(x)

    def verify(self, batch, spec_info):
        m = self._batch_size(batch)
        if self.token_inputs and batch is not None:
            # each request's current token followed by its draft tokens, request-major
            ids = torch.cat([self._input_ids(batch).unsqueeze(1), spec_info[:m]], dim=1)
            x = self.target.embed(ids)
        else:
            x = self.hidden_verify[: m * (self.steps + 1)]
        if self.cuda_graph_runner.uses_graph:
            target_out = self.cuda_graph_runner.replay(x)
        else:
            target_out = self.target(x)
        hidden, logits = target_out[0], target_out[1]
        self.last_expert_ids = target_out[2] if len(target_out) > 2 else None
        self._verify_hidden = hidden if self.token_inputs else None
        predict = torch.argmax(logits, dim=-1)
        predict_cpu = predict.tolist()  # host read-back, as SGLang v1 does (device sync)
        accept = self.accept_sampler(m)
        out = EagleVerifyOutput(spec_info, logits, predict_cpu, accept)
        return logits, out, batch, self.cuda_graph_runner.uses_graph

    def forward_draft_extend_after_decode(self, batch):
        m = self._batch_size(batch)
        x = self._verify_hidden if self._verify_hidden is not None else self.hidden_verify[: m * (self.steps + 1)]
        if not self.draft_extend_graph_runner.uses_graph:
            return self._draft_extend(x)
        return self.draft_extend_graph_runner.replay(x)
