"""NVTX ranges for SGLang's speculative decoding (EAGLE / EAGLE-3), in every server process.

Switch on with ``SPECPROF_NVTX=1``; see docs/nvtx_annotate.md. Public API (imported lazily, so
that ``import nvtx_annotate.protocol`` loads nothing else):

- ``install(package=None)``: hook SGLang's modules (idempotent; the .pth hook and the
  ``sglang.srt.plugins`` entry point call it).
- ``push(name, payload=None)``, ``pop()``, ``mark(text, payload=None)``,
  ``emit_rank_mark(rank, world, device)``.
- ``python -m nvtx_annotate --check [--source DIR]``, ``python -m nvtx_annotate install-pth``.
"""

from .protocol import DOMAIN, RANGE_NAMES  # noqa: F401

_LAZY = {
    "get_backend": "_nvtx", "mark": "_nvtx", "pop": "_nvtx", "push": "_nvtx", "set_backend": "_nvtx",
    "emit_rank_mark": "shim", "enabled": "shim", "install": "shim", "patched_roles": "shim",
    "uninstall": "shim", "check_worker": "shim", "stats": "shim",
}


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'nvtx_annotate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
