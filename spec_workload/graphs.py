"""CUDA graph capture helper shared by the mirror graph runners."""

from __future__ import annotations

import torch


class Captured:
    """fn(static_input) captured once; ``run(x)`` copies x in and replays (or calls fn eagerly)."""

    def __init__(self, fn, example: torch.Tensor, use_graph: bool, warmup: int = 2):
        self.fn = fn
        self.use_graph = use_graph and example.is_cuda
        self.static_in = example.clone()
        self.graph = None
        if self.use_graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(warmup):
                    fn(self.static_in)
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.static_out = fn(self.static_in)
            torch.cuda.synchronize()

    def run(self, x: torch.Tensor):
        if self.graph is None:
            return self.fn(x)
        self.static_in.copy_(x)
        self.graph.replay()
        return self.static_out
