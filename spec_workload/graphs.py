"""CUDA graph capture helpers shared by the mirror graph runners: ``Captured`` (one graph at the
largest batch, smaller batches padded to it) and ``CapturedBySize`` (one graph per row count, as
SGLang captures one per batch size: the replayed work is the batch's, not a padded maximum)."""

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

    def __init__(self, fn, example: torch.Tensor, use_graph: bool, warmup: int = 2, pool=None):
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
            with torch.cuda.graph(self.graph, pool=pool):
                self.static_out = fn(self.static_in)
            torch.cuda.synchronize()

    @property
    def uses_graph(self) -> bool:
        return self.graph is not None

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


class CapturedBySize:
    """fn captured once per row count in ``sizes`` (largest first, all graphs sharing one memory
    pool, as SGLang's graph runners share theirs: only one replays at a time, and each keeps its
    own static input and outputs); ``run(x)`` replays the graph of exactly x's rows.

    ``example`` holds at least max(sizes) rows; the graph for n rows is captured on a copy of its
    first n rows.  Without graphs (CPU, eager, or an all-reduce that cannot be captured) ``run`` calls
    fn on x.  A row count with no graph is an error (never padded: the work must track the batch).
    Sharing the pool means one graph's outputs are valid until the next replay of ANY graph of the
    set (another graph's scratch may overlap them): read or copy them first, as the workers do.
    ``capture(fn, example_rows, pool)`` builds one graph (default: a ``Captured`` in the shared
    CUDA pool); tests pass a stand-in to check the per-size replay without a GPU."""

    def __init__(self, fn, example: torch.Tensor, sizes, use_graph: bool, warmup: int = 2, capture=None):
        self.fn = fn
        self.sizes = sorted(set(int(n) for n in sizes), reverse=True)
        if not self.sizes or self.sizes[-1] < 1 or self.sizes[0] > example.shape[0]:
            raise ValueError(f"sizes {sizes} must be in 1..{example.shape[0]} (the example's rows)")
        self.by_rows = {}
        if capture is None:
            if not (use_graph and example.is_cuda):
                return
            pool = torch.cuda.graph_pool_handle()

            def capture(f, ex, p):
                return Captured(f, ex, True, warmup=warmup, pool=p)
        else:
            pool = None
            if not use_graph:
                return
        for n in self.sizes:
            self.by_rows[n] = capture(fn, example[:n], pool)

    @property
    def uses_graph(self) -> bool:
        return bool(self.by_rows)

    def run(self, x: torch.Tensor):
        if not self.by_rows:
            return self.fn(x)
        cap = self.by_rows.get(x.shape[0])
        if cap is None:
            raise ValueError(f"no graph captured for {x.shape[0]} rows (captured: {sorted(self.by_rows)})")
        return cap.run(x)
