"""Mirror of sglang.srt.speculative.eagle_draft_cuda_graph_runner: all draft steps in one graph."""

from __future__ import annotations

from ...graphs import Captured


class EAGLEDraftCudaGraphRunner:
    def __init__(self, multi_step_fn, example, use_graph: bool):
        self._cap = Captured(multi_step_fn, example, use_graph)

    @property
    def uses_graph(self) -> bool:
        return self._cap.uses_graph

    def replay(self, forward_batch):
        return self._cap.run(forward_batch)
