"""Mirror of sglang.srt.speculative.eagle_worker (v1): forward_batch_generation -> draft -> verify
-> forward_draft_extend_after_decode, with the same method names the shim patches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

import numpy as np
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
                 use_graphs: bool, verify_graph: bool, accept_sampler):
        self.target, self.draft_model = target, draft
        self.reqs, self.steps = reqs, steps
        self.device, self.dtype = device, dtype
        self.accept_sampler = accept_sampler
        self.tp_group = get_tp_group()
        g = torch.Generator(device="cpu").manual_seed(7)
        self.hidden_draft = torch.randn(reqs, hidden, generator=g).to(device, dtype)
        self.hidden_verify = torch.randn(reqs * (steps + 1), hidden, generator=g).to(device, dtype)
        self.draft_graph_runner = EAGLEDraftCudaGraphRunner(self._multi_step_draft, self.hidden_draft, use_graphs)
        self.draft_extend_graph_runner = EAGLEDraftExtendCudaGraphRunner(
            self._draft_extend, self.hidden_verify, use_graphs)
        self.cuda_graph_runner = CudaGraphRunner(target, self.hidden_verify, use_graphs and verify_graph)

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

    # -- the methods the shim wraps
    def forward_batch_generation(self, batch) -> GenerationBatchResult:
        spec_info = self.draft(batch)
        logits_output, verify_output, model_worker_batch, can_run_cuda_graph = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        acc = verify_output.accept_length_per_req_cpu
        return GenerationBatchResult(acc, sum(acc) + len(acc))

    def draft(self, batch):
        if self.draft_graph_runner._cap.graph is None:  # eager: no graph runner, like SGLang
            return self._multi_step_draft(self.hidden_draft)
        return self.draft_graph_runner.replay(self.hidden_draft)

    def verify(self, batch, spec_info):
        if self.cuda_graph_runner._cap.graph is not None:
            hidden, logits = self.cuda_graph_runner.replay(self.hidden_verify)
        else:
            hidden, logits = self.target(self.hidden_verify)
        predict = torch.argmax(logits, dim=-1)
        predict_cpu = predict.tolist()  # host read-back, as SGLang v1 does (device sync)
        accept = self.accept_sampler(self.reqs)
        out = EagleVerifyOutput(spec_info, logits, predict_cpu, accept)
        return logits, out, batch, self.cuda_graph_runner._cap.graph is not None

    def forward_draft_extend_after_decode(self, batch):
        if self.draft_extend_graph_runner._cap.graph is None:
            return self._draft_extend(self.hidden_verify)
        return self.draft_extend_graph_runner.replay(self.hidden_verify)
