"""Tiny tensor-parallel MLP "models" for the workload (random weights; only the timing matters)."""

from __future__ import annotations

import torch

from .srt.distributed.parallel_state import tensor_model_parallel_all_reduce


class TPLayer(torch.nn.Module):
    """x + down(gelu(up(x))) with up column-parallel and down row-parallel, then the TP all-reduce."""

    def __init__(self, hidden: int, ffn: int, world: int, device, dtype, tp: bool = True):
        super().__init__()
        shard = ffn // world if tp else ffn
        g = torch.Generator(device="cpu").manual_seed(1234)
        self.up = torch.nn.Parameter((torch.randn(hidden, shard, generator=g) / hidden**0.5).to(device, dtype))
        self.down = torch.nn.Parameter((torch.randn(shard, hidden, generator=g) / shard**0.5).to(device, dtype))
        self.tp = tp

    def forward(self, x):
        y = torch.nn.functional.gelu(x @ self.up) @ self.down
        if self.tp:
            y = tensor_model_parallel_all_reduce(y)
        return x + y


class Model(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, ffn: int, vocab: int, world: int, device, dtype, tp: bool):
        super().__init__()
        self.layers = torch.nn.ModuleList(TPLayer(hidden, ffn, world, device, dtype, tp) for _ in range(layers))
        g = torch.Generator(device="cpu").manual_seed(99)
        self.head = torch.nn.Parameter((torch.randn(hidden, vocab, generator=g) / hidden**0.5).to(device, dtype))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x, x @ self.head
