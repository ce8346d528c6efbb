"""Mirrors sglang.srt.model_executor (names the nvtx_annotate shim patches)."""
