"""The plain decode step's attention (analyze/tools/whatif/attention.py, analyze/attribute/attention.py):
which kernels are attention, per-cycle sums on synthetic ops with known answers, and when the swap is
not made."""
import numpy as np
import pandas as pd
import pytest

from analyze.attribute.attention import is_attention
from analyze.tools.whatif import attention as A


def test_attention_kernel_names_of_sglangs_backends():
    names = ["_fwd_kernel", "_fwd_kernel_stage1", "_fwd_kernel_stage2", "_fwd_grouped_kernel_stage1",
             "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>", "BatchDecodeWithPagedKVCacheKernel",
             "void flash::FlashAttnFwdSm90<...>", "flash_fwd_splitkv_kernel", "fmha_v2_flash_attention_fp16",
             # not attention
             "flashinfer::norm::FusedAddRMSNormKernel", "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT", "fused_rope_kernel",
             "store_kvcache", "build_tree_efficient", "act_and_mul_kernel", None]
    got = is_attention(names)
    assert got.tolist() == [True] * 9 + [False] * 7


def _cycles(n=3, period=1000, rank=0):
    return pd.DataFrame({"rank": rank, "cycle": np.arange(n), "gpu_period_start_ns": np.arange(n) * period,
                         "gpu_period_end_ns": np.arange(n) * period + period})


def _op(cycle, phase, name, dur, offset=10, rank=0, kind="kernel"):
    s = cycle * 1000 + offset
    return {"kind": kind, "rank": rank, "phase": phase, "name": name, "start_ns": s, "end_ns": s + dur}


def test_per_cycle_sums_attention_by_phase_and_cycle():
    ops = pd.DataFrame([
        _op(0, "verify", "_fwd_kernel", 40), _op(0, "verify", "_fwd_kernel", 40, offset=60),
        _op(0, "verify", "nvjet_gemm", 500, offset=100),                       # not attention
        _op(0, "draft", "_fwd_kernel_stage1", 9), _op(0, "draft", "_fwd_kernel_stage2", 3, offset=30),
        _op(0, "draft_extend", "_fwd_kernel", 7, offset=200),
        _op(1, "verify", "_fwd_kernel", 50), _op(1, "verify", "_fwd_kernel", 50, rank=1),   # rank 1: not read
        _op(1, "verify", "_fwd_kernel", 5, kind="memcpy"),                                 # not a kernel
        _op(5, "verify", "_fwd_kernel", 99)])                                              # after every cycle
    t = A.per_cycle(ops, pd.concat([_cycles(), _cycles(rank=1)])).set_index("cycle")
    assert t.loc[0].tolist() == [80.0, 2.0, 12.0, 1.0]
    assert t.loc[1].tolist() == [50.0, 1.0, 0.0, 0.0]
    assert t.loc[2].tolist() == [0.0, 0.0, 0.0, 0.0]


def test_per_cycle_without_ops_is_nan_and_cycles_of_other_ranks_only_are_nan():
    t = A.per_cycle(None, _cycles())
    assert len(t) == 3 and t[list(A.COLUMNS)].isna().all().all()
    other = _cycles(n=5, rank=1)                       # cycles 3, 4 exist on rank 1 only
    t = A.per_cycle(pd.DataFrame([_op(0, "verify", "_fwd_kernel", 40)]), pd.concat([_cycles(), other]))
    t = t.set_index("cycle")
    assert t.loc[0, "verify_attention_ns"] == 40.0 and t.loc[[3, 4]].isna().all().all()


def test_plain_attention_layers_and_decode_cost():
    costs = {"verify_attention_ns": 64 * 40e3, "verify_attention_launches": 128.0, "draft_attention_ns": 2 * 12e3,
             "extend_attention_launches": 2.0, "draft_forwards": 2, "draft_topk": 1}
    swap, why = A.plain_attention(costs)       # FA3-like: 2 launches a layer -> 64 layers, 12 us a layer
    assert why == "" and swap["layers"] == 64 and swap["decode_attention_per_layer_ns"] == 12e3
    assert swap["plain_attention_ns"] == pytest.approx(64 * 12e3)
    # without a draft extend's launches: one a layer
    assert A.plain_attention(dict(costs, extend_attention_launches=np.nan))[0]["layers"] == 128


@pytest.mark.parametrize("change, reason", [
    ({"draft_forwards": 0}, "no draft forward"), ({"draft_topk": 4}, "top-k 4"),
    ({"verify_attention_ns": np.nan}, "no per-op kernels"), ({"draft_attention_ns": 0.0}, "no attention kernel")])
def test_plain_attention_says_why_it_is_not_swapped(change, reason):
    costs = {"verify_attention_ns": 1e3, "verify_attention_launches": 8.0, "draft_attention_ns": 1e3,
             "extend_attention_launches": 1.0, "draft_forwards": 2, "draft_topk": 1}
    swap, why = A.plain_attention(dict(costs, **change))
    assert swap is None and reason in why
