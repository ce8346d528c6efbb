"""NVTX ranges for SGLang's speculative decoding (EAGLE / EAGLE-3), in every server process.

Switch on with ``SPECPROF_NVTX=1``; see docs/nvtx_annotate.md.  Public API:

- ``install(package=None)``: hook SGLang's modules (idempotent; the .pth hook and the
  ``sglang.srt.plugins`` entry point call it).
- ``push(name)``, ``pop()``, ``mark(text, payload=None)``, ``emit_rank_mark(rank, world, device)``.
- ``python -m nvtx_annotate --check [--source DIR]``, ``python -m nvtx_annotate install-pth``.
"""

from ._nvtx import DOMAIN, get_backend, mark, pop, push, set_backend  # noqa: F401
from .shim import emit_rank_mark, enabled, install, patched_roles, report_missing_once, uninstall  # noqa: F401

RANGE_NAMES = (
    "decode_cycle",
    "draft",
    "draft_extend",
    "verify",
    "allreduce",
    "graph_replay_draft",
    "graph_replay_draft_extend",
    "graph_replay_verify",
)
