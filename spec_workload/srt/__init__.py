"""Mirrors sglang.srt (names the nvtx_annotate shim patches)."""
