"""Mirrors sglang.srt.distributed (names the nvtx_annotate shim patches)."""
