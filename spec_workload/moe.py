"""An MoE-like tensor-parallel target (``--target moe``): verify cost grows with the tokens verified.

Each layer routes every token to ``top_k`` of ``experts`` experts (router: a real matmul + softmax +
top-k on the hidden state, so which experts are hit depends on the tokens), then, for every
(token, slot) pair, gathers that expert's up and down weights (``up[ids]``, ``down[ids]``: one
index_select each over all pairs) and applies them with batched matmuls (bmm, ReLU between), and
sums the pairs of a token weighted by their routing weights.  Every pair reads its expert's
weights, so the layer's memory traffic and GPU time grow linearly with tokens x top_k (a fused-MoE
kernel reads each *distinct* expert once; that needs a custom kernel, not done here).

A dense *shared expert* (``shared_ffn``, as in DeepSeek-V3 / Kimi-K2; 0 turns it off) runs on every
token: its weights are read once per layer whatever the token count, the token-independent part of
a layer's cost (what attention over the KV cache and dense layers are in a real MoE verify).

No host synchronisation and a fixed sequence of kernels for any token count (no data-dependent
shapes, no loop over experts): the forward can be captured in a CUDA graph, one graph per token
count (spec_workload/graphs.py ``CapturedBySize``).

Tensor parallel like SGLang's TP MoE: every expert's and the shared expert's intermediate
dimension is sharded over the ranks (up column-parallel, down row-parallel), the router is
replicated, and the TP all-reduce follows every layer, as in the dense target.  Random weights;
only the timing and the routing matter.
"""

from __future__ import annotations

from typing import List, Tuple

import torch

from .srt.distributed.parallel_state import tensor_model_parallel_all_reduce


def _randn(shape, scale: float, g: torch.Generator, device, dtype) -> torch.Tensor:
    """N(0, scale^2) drawn on the device in the final dtype (no float32 copy of the expert weights)."""
    return torch.randn(*shape, generator=g, device=device, dtype=dtype).mul_(scale)


def route(x: torch.Tensor, router: torch.Tensor, top_k: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Routing weights and expert ids per token, both [tokens, top_k]: softmax of ``x @ router``
    over the experts, the top_k largest, renormalized to sum to 1 per token."""
    logits = x @ router
    probs = torch.softmax(logits.to(torch.promote_types(logits.dtype, torch.float32)), dim=-1)  # bf16 -> fp32
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(x.dtype), ids


def run_experts(x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor,
                up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    """sum_j weights[t, j] * relu(x[t] @ up[e]) @ down[e] with e = ids[t, j], for every token t:
    [tokens, H].

    Kernels, the same for any token count: up gather ([pairs, H, F]), bmm, ReLU, down gather
    ([pairs, F, H]), bmm, weight multiply, sum over the slots.  Each gather reads the expert
    weights of every (token, slot) pair, so the bytes read grow with tokens x top_k."""
    n_tokens, top_k = ids.shape
    flat = ids.reshape(-1)
    xs = x.unsqueeze(1).expand(-1, top_k, -1).reshape(-1, 1, x.shape[1])  # [pairs, 1, H], pair t*top_k+j
    h = torch.bmm(xs, up.index_select(0, flat)).relu_()          # [pairs, 1, F]
    out = torch.bmm(h, down.index_select(0, flat))               # [pairs, 1, H]
    out = out.view(n_tokens, top_k, -1) * weights.unsqueeze(-1)
    return out.sum(dim=1)


def distinct_experts(expert_ids: torch.Tensor) -> List[int]:
    """Distinct experts chosen per layer, from ``expert_ids`` [layers, tokens, top_k] (a host read:
    call it after the timed work, never inside a forward)."""
    return [int(torch.unique(layer).numel()) for layer in expert_ids.detach().cpu()]


class MoELayer(torch.nn.Module):
    """``forward(x) -> (x + all_reduce(MoE(x) + shared(x)), expert ids [tokens, top_k])``."""

    def __init__(self, hidden: int, expert_ffn: int, experts: int, top_k: int, world: int,
                 device, dtype, seed: int, shared_ffn: int = 0):
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k={top_k} must be in 1..experts={experts}")
        shard = expert_ffn // world
        if shard < 1:
            raise ValueError(f"expert_ffn={expert_ffn} smaller than the world size {world}")
        if shared_ffn < 0 or 0 < shared_ffn < world:
            raise ValueError(f"shared_ffn={shared_ffn} must be 0 or at least the world size {world}")
        g = torch.Generator(device=device).manual_seed(seed)  # same seed on every rank: same router
        self.router = torch.nn.Parameter(_randn((hidden, experts), hidden ** -0.5, g, device, dtype))
        self.up = torch.nn.Parameter(_randn((experts, hidden, shard), hidden ** -0.5, g, device, dtype))
        self.down = torch.nn.Parameter(_randn((experts, shard, hidden), shard ** -0.5, g, device, dtype))
        self.shared_up = self.shared_down = None
        if shared_ffn:
            s = shared_ffn // world
            self.shared_up = torch.nn.Parameter(_randn((hidden, s), hidden ** -0.5, g, device, dtype))
            self.shared_down = torch.nn.Parameter(_randn((s, hidden), s ** -0.5, g, device, dtype))
        self.top_k = top_k

    def forward(self, x):
        weights, ids = route(x, self.router, self.top_k)
        y = run_experts(x, weights, ids, self.up, self.down)
        if self.shared_up is not None:
            y = y + torch.mm(torch.mm(x, self.shared_up).relu_(), self.shared_down)
        return x + tensor_model_parallel_all_reduce(y), ids


class MoEModel(torch.nn.Module):
    """Embedding + MoE layers + LM head; ``forward(x) -> (hidden, logits, expert_ids)`` with
    ``expert_ids`` [layers, tokens, top_k] (the dense Model returns the first two only).

    ``embed(ids)`` turns token ids into the hidden states verify routes on (the workers feed it
    the tokens being verified, so the experts hit change from cycle to cycle)."""

    def __init__(self, layers: int, hidden: int, expert_ffn: int, experts: int, top_k: int, vocab: int,
                 world: int, device, dtype, shared_ffn: int = 0):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            MoELayer(hidden, expert_ffn, experts, top_k, world, device, dtype, seed=4321 + i,
                     shared_ffn=shared_ffn)
            for i in range(layers))
        g = torch.Generator(device=device).manual_seed(98)
        self.embedding = torch.nn.Parameter(_randn((vocab, hidden), 1.0, g, device, dtype))
        self.head = torch.nn.Parameter(_randn((hidden, vocab), hidden ** -0.5, g, device, dtype))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding.index_select(0, ids.reshape(-1))

    def forward(self, x):
        ids = []
        for layer in self.layers:
            x, layer_ids = layer(x)
            ids.append(layer_ids)
        return x, x @ self.head, torch.stack(ids)
