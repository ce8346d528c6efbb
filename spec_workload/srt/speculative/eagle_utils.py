"""Mirror of sglang.srt.speculative.eagle_utils / eagle_info: the verify output."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List


@dataclass
class EagleVerifyOutput:
    draft_input: Any
    logits_output: Any
    verified_id: Any
    # accepted draft tokens per request, on the CPU (bonus token not counted), like SGLang v1
    accept_length_per_req_cpu: List[int]
