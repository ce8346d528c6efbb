"""An SGLang-shaped speculative-decoding GPU workload (PyTorch) whose module tree mirrors
``sglang.srt`` so the nvtx_annotate shim patches it with ``SPECPROF_NVTX_PACKAGE=spec_workload``.

Two targets: ``dense`` (MLP layers; verify costs about the same for any token count) and ``moe``
(:mod:`spec_workload.moe`: top-k routing over many experts, every (token, expert) pair reads its
expert's weights, so verify grows with the tokens verified, as on a large MoE target; no host sync,
verify replays one CUDA graph per batch size). The batch can change from cycle to
cycle (:mod:`spec_workload.batches`, on by default for ``moe``), so one profile holds cycles of
different verified-token counts. ``python -m spec_workload --help`` lists the options;
``record_sweep.sh`` (dense) and ``record_moe_sweep.sh`` (MoE) record the whatif sweeps on the H200."""
