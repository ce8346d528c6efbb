"""CUDA graph capture helper shared by the mirror graph runners."""

from __future__ import annotations

import torch


def _first_rows(out, m: int):
    if isinstance(out, (tuple, list)):
        return type(out)(_first_rows(o, m) for o in out)
    return out[:m]


class Captured:
    """fn(static_input) captured once; ``run(x)`` copies x in and replays (or calls fn eagerly).

    A graph is captured at the largest batch (``example``'s rows); a smaller x is padded to it, like
    SGLang pads a batch to the captured size: x goes into the first rows of the static input (the
    others keep stale values), the graph runs over all rows and the first rows of every output are
    returned (row i of each output belongs to row i of the input)."""

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
        m = x.shape[0]
        if m == self.static_in.shape[0]:
            self.static_in.copy_(x)
            self.graph.replay()
            return self.static_out
        if m > self.static_in.shape[0]:
            raise ValueError(f"batch of {m} rows larger than the captured {self.static_in.shape[0]}")
        self.static_in[:m].copy_(x)
        self.graph.replay()
        return _first_rows(self.static_out, m)
