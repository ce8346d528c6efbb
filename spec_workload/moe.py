"""An MoE-like tensor-parallel target (``--target moe``): verify cost grows with the tokens verified.

Each layer routes every token to ``top_k`` of ``experts`` experts (router: a real matmul + softmax +
top-k on the hidden state, so which experts are hit depends on the tokens) and runs only the experts
hit at least once, grouped per expert: the tokens routed to an expert are gathered, go through that
expert's up GEMM, ReLU and down GEMM, are scaled by their routing weight and scatter-added back.
An expert's weights are read once per layer whatever the number of its tokens, so a layer's cost
grows with the number of *distinct* experts touched, i.e. with the tokens in the pass
(reqs x (steps + 1) in verify); with E experts and uniform-looking routing that is about
``E (1 - (1 - k/E)^n)`` for n tokens: sublinear, like a real MoE target.

Tensor parallel like SGLang's TP MoE: every expert's intermediate dimension is sharded over the
ranks (up column-parallel, down row-parallel), the router is replicated, and the TP all-reduce
follows every layer, as in the dense target.

The per-expert loop needs the expert counts on the host (one device-to-host read per layer), so
the MoE target always runs eagerly: it cannot be captured in a CUDA graph (the draft model, dense,
still can).  Random weights; only the timing and the routing matter.
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
                up: torch.Tensor, down: torch.Tensor) -> Tuple[torch.Tensor, List[int]]:
    """sum_j weights[t, j] * relu(x[t] @ up[e]) @ down[e] with e = ids[t, j], for every token t,
    computed expert by expert over the experts hit at least once.  Returns the output [tokens, H]
    and the experts hit (ascending).

    Per layer: sort of the (token, slot) assignments by expert, expert counts read on the host,
    one gather; per hit expert: up GEMM, ReLU, down GEMM (3 kernels); then the routing-weight
    scaling and one scatter-add."""
    n_tokens, top_k = ids.shape
    flat = ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=up.shape[0]).tolist()  # host sync: which experts run
    token_of = order // top_k
    xs = x.index_select(0, token_of)
    out = torch.empty((xs.shape[0], down.shape[2]), device=x.device, dtype=x.dtype)
    hit: List[int] = []
    start = 0
    for e, c in enumerate(counts):
        if c == 0:
            continue
        seg = slice(start, start + c)
        h = torch.mm(xs[seg], up[e]).relu_()
        torch.mm(h, down[e], out=out[seg])
        hit.append(e)
        start += c
    out.mul_(weights.reshape(-1).index_select(0, order).unsqueeze(1))
    y = torch.zeros((n_tokens, down.shape[2]), device=x.device, dtype=x.dtype)
    y.index_add_(0, token_of, out)
    return y, hit


class MoELayer(torch.nn.Module):
    """x + all_reduce(MoE(x)); ``experts_hit`` holds the experts the last forward ran."""

    def __init__(self, hidden: int, expert_ffn: int, experts: int, top_k: int, world: int,
                 device, dtype, seed: int):
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k={top_k} must be in 1..experts={experts}")
        shard = expert_ffn // world
        if shard < 1:
            raise ValueError(f"expert_ffn={expert_ffn} smaller than the world size {world}")
        g = torch.Generator(device=device).manual_seed(seed)  # same seed on every rank: same router
        self.router = torch.nn.Parameter(_randn((hidden, experts), hidden ** -0.5, g, device, dtype))
        self.up = torch.nn.Parameter(_randn((experts, hidden, shard), hidden ** -0.5, g, device, dtype))
        self.down = torch.nn.Parameter(_randn((experts, shard, hidden), shard ** -0.5, g, device, dtype))
        self.top_k = top_k
        self.experts_hit: List[int] = []

    def forward(self, x):
        weights, ids = route(x, self.router, self.top_k)
        y, self.experts_hit = run_experts(x, weights, ids, self.up, self.down)
        return x + tensor_model_parallel_all_reduce(y)


class MoEModel(torch.nn.Module):
    """Embedding + MoE layers + LM head; ``forward(x) -> (hidden, logits)`` like the dense Model.

    ``embed(ids)`` turns token ids into the hidden states verify routes on (the workers feed it
    the tokens being verified, so the experts hit change from cycle to cycle)."""

    def __init__(self, layers: int, hidden: int, expert_ffn: int, experts: int, top_k: int, vocab: int,
                 world: int, device, dtype):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            MoELayer(hidden, expert_ffn, experts, top_k, world, device, dtype, seed=4321 + i)
            for i in range(layers))
        g = torch.Generator(device=device).manual_seed(98)
        self.embedding = torch.nn.Parameter(_randn((vocab, hidden), 1.0, g, device, dtype))
        self.head = torch.nn.Parameter(_randn((hidden, vocab), hidden ** -0.5, g, device, dtype))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding.index_select(0, ids.reshape(-1))

    @property
    def experts_hit(self) -> List[int]:
        """Distinct experts run per layer in the last forward."""
        return [len(layer.experts_hit) for layer in self.layers]

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x, x @ self.head
