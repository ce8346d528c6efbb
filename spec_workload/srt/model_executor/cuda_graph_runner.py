"""Mirror of sglang.srt.model_executor.cuda_graph_runner: the target model's graph (target verify,
or plain decode without speculation)."""

from __future__ import annotations

from ...graphs import Captured


class CudaGraphRunner:
    def __init__(self, model, example, use_graph: bool):
        self.model = model
        self._cap = Captured(lambda x: model(x), example, use_graph)

    def replay(self, forward_batch):
        return self._cap.run(forward_batch)
