"""The settings advise suggests, in one place: SGLang server flags (names checked against the real
``sglang/srt/server_args.py`` of SGLang 0.5.17, tests/test_advise.py::test_sglang_flags_exist) and
NCCL environment variables (documented by NCCL: NCCL_PROTO, NCCL_ALGO)."""
from __future__ import annotations

from analyze.findings import SET, Setting

SGLANG_CHECKED = "0.5.17"

# SGLang 0.5.17 server flags (the CLI form of ServerArgs fields, or explicit add_argument names)
SPEC_ALGORITHM = "--speculative-algorithm"                # EAGLE, EAGLE3, NEXTN, ...: no flag, no speculation
SPEC_STEPS = "--speculative-num-steps"
SPEC_TOPK = "--speculative-eagle-topk"
SPEC_DRAFT_TOKENS = "--speculative-num-draft-tokens"
SPEC_ADAPTIVE = "--speculative-adaptive"                   # switch the step count by batch size at run time
SPEC_ADAPTIVE_CONFIG = "--speculative-adaptive-config"     # its JSON (batch size -> candidate_steps)
DISABLE_CUSTOM_AR = "--disable-custom-all-reduce"          # custom all-reduce off: NCCL for every all-reduce
TORCH_SYMM_MEM = "--enable-torch-symm-mem"                 # torch symmetric-memory all-reduce (SM90: TP 4, 6, 8)
NCCL_SYMM_MEM = "--enable-symm-mem"                        # NCCL symmetric memory
MSCCLPP = "--enable-mscclpp"                               # mscclpp for small all-reduces
FUSION_BACKEND = "--flashinfer-allreduce-fusion-backend"   # fused all-reduce + residual + RMSNorm
NO_FUSION = "--enforce-disable-flashinfer-allreduce-fusion"
DISABLE_OVERLAP = "--disable-overlap-schedule"             # the overlap scheduler is on unless this is given
DISABLE_GRAPH = "--disable-cuda-graph"                     # deprecated alias in 0.5.17
DISABLE_DECODE_GRAPH = "--disable-decode-cuda-graph"
GRAPH_BACKEND_DECODE = "--cuda-graph-backend-decode"       # full | breakable | tc_piecewise | disabled
GRAPH_MAX_BS = "--cuda-graph-max-bs-decode"                # batches above it run without graphs
GRAPH_MAX_BS_OLD = "--cuda-graph-max-bs"                   # deprecated alias

SGLANG_FLAGS = (SPEC_ALGORITHM, SPEC_STEPS, SPEC_TOPK, SPEC_DRAFT_TOKENS, SPEC_ADAPTIVE, SPEC_ADAPTIVE_CONFIG,
                DISABLE_CUSTOM_AR, TORCH_SYMM_MEM, NCCL_SYMM_MEM, MSCCLPP,
                FUSION_BACKEND, NO_FUSION, DISABLE_OVERLAP, DISABLE_GRAPH, DISABLE_DECODE_GRAPH, GRAPH_BACKEND_DECODE,
                GRAPH_MAX_BS, GRAPH_MAX_BS_OLD)

# NCCL: a protocol and an algorithm for small (decode-sized) messages
LL_MAX_BYTES = 64 * 1024          # LL's sweet spot; LL128 beyond it up to a few MB, SIMPLE for bulk


def nccl_proto_for(message_bytes: float | None) -> str:
    """The NCCL protocol to try for a message size (None: unknown, decode-sized: LL)."""
    if message_bytes is None or message_bytes <= LL_MAX_BYTES:
        return "LL"
    return "LL128"


def steps_settings(steps: int) -> tuple:
    """A chain of ``steps`` draft steps (topk 1 verifies steps + 1 tokens per request)."""
    return (Setting(SET, SPEC_STEPS, str(steps)), Setting(SET, SPEC_TOPK, "1"),
            Setting(SET, SPEC_DRAFT_TOKENS, str(steps + 1), "a chain: steps + 1 tokens per request"))
