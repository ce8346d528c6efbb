"""Mirror of sglang.srt.model_executor.cuda_graph_runner: the target model's graph (target verify,
or plain decode without speculation).

Without ``sizes``: one graph at ``example``'s rows, smaller batches padded to it.  With ``sizes``
(row counts, e.g. M (steps + 1) for M = 1..reqs): one graph per row count, sharing a memory pool,
as SGLang captures one graph per batch size; each replay runs exactly the batch's rows."""

from __future__ import annotations

from ...graphs import Captured, CapturedBySize


class CudaGraphRunner:
    def __init__(self, model, example, use_graph: bool, sizes=None, capture=None):
        self.model = model
        if sizes is None:
            self._cap = Captured(lambda x: model(x), example, use_graph)
        else:
            self._cap = CapturedBySize(lambda x: model(x), example, sizes, use_graph, capture=capture)

    @property
    def uses_graph(self) -> bool:
        return self._cap.uses_graph

    def replay(self, forward_batch):
        return self._cap.run(forward_batch)
