"""Mirrors sglang.srt.managers (names the nvtx_annotate shim patches)."""
