"""What kind of all-reduce a kernel is, read from its name.

* NCCL: ``ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)`` (NCCL >= 2.19) and
  ``ncclKernel_AllReduce_RING_LL_Sum_bf16(...)`` (older) name the algorithm (RING, TREE, NVLS,
  NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN, PAT) and the protocol (LL, LL128, SIMPLE);
  ``ncclDevKernel_Generic*`` names neither.
* SGLang's (and vLLM's) custom all-reduce: ``cross_device_reduce_1stage`` (one shot: every rank reads
  every peer's buffer) and ``cross_device_reduce_2stage`` (reduce-scatter + all-gather).
* Fused all-reduce + residual + RMSNorm: flashinfer / TensorRT-LLM ``allreduce_fusion`` kernels
  (``oneshot``/``twoshot`` Lamport variants), SGLang's ``--flashinfer-allreduce-fusion-backend``.
* torch symmetric memory (``one_shot_all_reduce`` / ``two_shot_all_reduce``), mscclpp.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

NCCL, CUSTOM, FUSED, SYMM_MEM, MSCCLPP, OTHER = "nccl", "custom", "fused_norm", "torch_symm_mem", "mscclpp", "other"

ALGORITHMS = ("NVLS_TREE", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "RING", "TREE", "PAT")
PROTOCOLS = ("LL128", "LL", "SIMPLE")

_NCCL = re.compile(r"nccl(?:Dev)?Kernel_(?P<op>[A-Za-z]+)_(?P<rest>[A-Za-z0-9_]*)")
_ALGO_PROTO = re.compile(r"(?:^|_)(?P<algo>" + "|".join(ALGORITHMS) + r")_(?P<proto>" + "|".join(PROTOCOLS)
                         + r")(?=_|$)")


@dataclass(frozen=True)
class Kind:
    kind: str                    # NCCL, CUSTOM, FUSED, SYMM_MEM, MSCCLPP, OTHER
    variant: str | None = None   # custom: "1stage"/"2stage"; fused: "oneshot"/"twoshot"
    algorithm: str | None = None
    protocol: str | None = None
    op: str | None = None        # NCCL: AllReduce, ReduceScatter, AllGather, ...

    @property
    def label(self) -> str:
        if self.kind == NCCL:
            detail = "_".join(x for x in (self.algorithm, self.protocol) if x) or "generic kernel"
            return f"NCCL {self.op or ''} {detail}".replace("  ", " ").strip()
        names = {CUSTOM: "custom all-reduce", FUSED: "fused all-reduce + RMSNorm", SYMM_MEM: "torch symm-mem",
                 MSCCLPP: "mscclpp", OTHER: "other"}
        return names[self.kind] + (f" ({self.variant})" if self.variant else "")


def kind_of(name: str) -> Kind:
    """The all-reduce kind of one kernel name (demangled or short)."""
    text = str(name)
    m = _NCCL.search(text)
    if m:
        rest = m.group("rest")
        ap = _ALGO_PROTO.search(rest)
        return Kind(NCCL, algorithm=ap.group("algo") if ap else None, protocol=ap.group("proto") if ap else None,
                    op=m.group("op") if m.group("op") != "Generic" else None)
    low = text.lower()
    if "cross_device_reduce_1stage" in low:
        return Kind(CUSTOM, "1stage")
    if "cross_device_reduce_2stage" in low:
        return Kind(CUSTOM, "2stage")
    if "allreduce_fusion" in low or "allreducefusion" in low or "oneshot_allreduce" in low \
            or "twoshot_allreduce" in low:
        variant = "oneshot" if "oneshot" in low else ("twoshot" if "twoshot" in low else None)
        return Kind(FUSED, variant)
    if "one_shot_all_reduce" in low or "two_shot_all_reduce" in low or "multimem_all_reduce" in low:
        return Kind(SYMM_MEM, "one_shot" if "one_shot" in low else ("two_shot" if "two_shot" in low else "multimem"))
    if "mscclpp" in low:
        return Kind(MSCCLPP)
    return Kind(OTHER)
