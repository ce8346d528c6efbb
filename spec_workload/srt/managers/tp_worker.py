"""Mirror of sglang.srt.managers.tp_worker: plain decode without speculation (baseline).

One token per running request per step; a token-dependent (MoE) target runs on the embeddings of
the requests' current tokens (one CUDA graph per batch size 1..reqs), the dense one on fixed hidden
states (a CUDA graph captured at ``reqs`` requests, smaller batches padded to it)."""

from __future__ import annotations

import torch

from ..model_executor.cuda_graph_runner import CudaGraphRunner


class TpModelWorker:
    def __init__(self, target, reqs: int, hidden: int, device, dtype, use_graph: bool, capture=None):
        self.target = target
        self.reqs = reqs
        self.device = device
        self.token_inputs = hasattr(target, "embed")
        g = torch.Generator(device="cpu").manual_seed(8)
        self.hidden = torch.randn(reqs, hidden, generator=g).to(device, dtype)
        self.last_expert_ids = None  # MoE target: expert ids [layers, tokens, top_k] of the last step (device)
        sizes = list(range(1, reqs + 1)) if self.token_inputs else None
        self.cuda_graph_runner = CudaGraphRunner(target, self.hidden, use_graph, sizes=sizes, capture=capture)

    def forward_batch_generation(self, batch):
        m = self.reqs if batch is None else batch.batch_size()
        if self.token_inputs and batch is not None:
            x = self.target.embed(torch.tensor(batch.input_ids, dtype=torch.long).to(self.device, non_blocking=True))
        else:
            x = self.hidden[:m]
        out = self.cuda_graph_runner.replay(x) if self.cuda_graph_runner.uses_graph else self.target(x)
        logits = out[1]
        self.last_expert_ids = out[2] if len(out) > 2 else None
        next_ids = torch.argmax(logits, dim=-1).tolist()  # host read-back per step
        return len(next_ids)
