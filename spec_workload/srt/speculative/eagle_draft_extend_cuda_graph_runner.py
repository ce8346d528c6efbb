"""Mirror of sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner."""

from __future__ import annotations

from ...graphs import Captured


class EAGLEDraftExtendCudaGraphRunner:
    def __init__(self, extend_fn, example, use_graph: bool):
        self._cap = Captured(extend_fn, example, use_graph)

    @property
    def uses_graph(self) -> bool:
        return self._cap.uses_graph

    def replay(self, forward_batch):
        return self._cap.run(forward_batch)
