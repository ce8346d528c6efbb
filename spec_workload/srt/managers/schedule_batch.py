"""Mirror of sglang.srt.managers.schedule_batch: the batch a decode cycle runs on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List


@dataclass(frozen=True)
class ScheduleBatch:
    """The requests running in one decode cycle: ``input_ids`` holds each request's current token
    (the last one it sampled), in request order; their number is the batch size."""

    input_ids: List[int]

    def batch_size(self) -> int:
        return len(self.input_ids)
