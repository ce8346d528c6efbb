"""Imported by the .pth hook at interpreter start when SPECPROF_NVTX=1 (every process,
spawned TP workers included). Must never raise."""

try:
    from .shim import enabled as _enabled, install as _install

    if _enabled():
        _install()
except Exception as _e:  # pragma: no cover - defensive: never break interpreter start
    import sys as _sys

    print(f"nvtx_annotate: disabled ({type(_e).__name__}: {_e})", file=_sys.stderr)
