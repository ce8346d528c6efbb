"""An SGLang-shaped speculative-decoding GPU workload (PyTorch) whose module tree mirrors
``sglang.srt`` so the nvtx_annotate shim patches it with ``SPECPROF_NVTX_PACKAGE=spec_workload``."""
