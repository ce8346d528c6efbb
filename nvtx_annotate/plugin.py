"""SGLang plugin entry point (group ``sglang.srt.plugins``, SGLang >= 0.5.11 loads it in every
worker process).  Does nothing unless SPECPROF_NVTX=1."""

from .shim import enabled, install


def load() -> None:
    if enabled():
        install()
