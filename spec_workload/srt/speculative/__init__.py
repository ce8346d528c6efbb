"""Mirrors sglang.srt.speculative (names the nvtx_annotate shim patches)."""
