"""Mirror of sglang.srt.managers.tp_worker: plain decode without speculation (baseline)."""

from __future__ import annotations

import torch

from ..model_executor.cuda_graph_runner import CudaGraphRunner


class TpModelWorker:
    def __init__(self, target, reqs: int, hidden: int, device, dtype, use_graph: bool):
        self.target = target
        self.reqs = reqs
        g = torch.Generator(device="cpu").manual_seed(8)
        self.hidden = torch.randn(reqs, hidden, generator=g).to(device, dtype)
        self.cuda_graph_runner = CudaGraphRunner(target, self.hidden, use_graph)

    def forward_batch_generation(self, batch):
        if self.cuda_graph_runner._cap.graph is not None:
            _, logits = self.cuda_graph_runner.replay(self.hidden)
        else:
            _, logits = self.target(self.hidden)
        next_ids = torch.argmax(logits, dim=-1).tolist()  # host read-back per step
        return len(next_ids)
