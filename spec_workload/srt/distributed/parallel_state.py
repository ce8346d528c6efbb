"""Mirror of sglang.srt.distributed.parallel_state: a GroupCoordinator whose ``all_reduce`` is the
tensor-parallel all-reduce every row-parallel layer calls."""

from __future__ import annotations

import torch
import torch.distributed as dist

_groups = {}


def _get_unique_name(name: str) -> str:
    n = sum(1 for k in _groups if k.split(":")[0] == name)
    return f"{name}:{n}"


class GroupCoordinator:
    """rank_in_group / world_size / device like SGLang's; all_reduce over torch.distributed.

    With gloo and a CUDA tensor the reduction is a host round trip (D2H copy, CPU all-reduce,
    H2D copy), like the existing H200 traces; with nccl it is ``ncclDevKernel_AllReduce_*`` and can
    be captured in a CUDA graph."""

    def __init__(self, group_name: str, rank: int, world_size: int, device: torch.device, backend: str):
        self.unique_name = _get_unique_name(group_name)
        _groups[self.unique_name] = self
        self.rank = rank
        self.rank_in_group = rank
        self.world_size = world_size
        self.device = device
        self.backend = backend

    def all_reduce(self, input_: torch.Tensor) -> torch.Tensor:
        if not dist.is_initialized():
            return input_
        if self.backend == "gloo" and input_.is_cuda:
            host = input_.to("cpu")
            dist.all_reduce(host)
            input_.copy_(host, non_blocking=False)
            return input_
        dist.all_reduce(input_)
        return input_


_TP = None


def init_model_parallel_group(rank: int, world_size: int, device, backend: str) -> GroupCoordinator:
    global _TP
    _TP = GroupCoordinator("tp", rank, world_size, device, backend)
    return _TP


def get_tp_group() -> GroupCoordinator:
    return _TP


def tensor_model_parallel_all_reduce(x: torch.Tensor) -> torch.Tensor:
    return get_tp_group().all_reduce(x)
