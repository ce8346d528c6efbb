"""The CLI's allocator set-up (memory.one_heap): Arrow's buffers from the system malloc, one glibc
arena; ``SPECPROF_ALLOCATOR=default`` leaves both alone. Checked in a fresh interpreter (a process
sets them once, before its threads start)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pa = pytest.importorskip("pyarrow")

PROBE = ("from analyze import memory; memory.one_heap(); import pyarrow as pa; "
         "print(pa.default_memory_pool().backend_name)")


def _backend(env_value: str | None) -> str:
    env = dict(os.environ)
    env.pop("SPECPROF_ALLOCATOR", None)
    if env_value is not None:
        env["SPECPROF_ALLOCATOR"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_one_heap_puts_arrow_on_the_system_allocator():
    assert _backend(None) == "system"


def test_default_keeps_arrows_own_pool():
    default = subprocess.run([sys.executable, "-c", "import pyarrow as pa; print(pa.default_memory_pool().backend_name)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert _backend("default") == default


def test_the_cli_calls_it_before_anything_runs(tmp_path):
    """analyze-trace's main sets the allocators up first, whatever it is then asked."""
    from analyze import cli

    calls = []
    real = cli.memory.one_heap
    cli.memory.one_heap = lambda: calls.append("one_heap")
    try:
        rc = cli.main([str(tmp_path / "missing.sqlite"), "-q"])
    finally:
        cli.memory.one_heap = real
    assert rc != 0 and calls == ["one_heap"]


REUSE_PROBE = ("from analyze import memory; memory.one_heap(); memory.small_pages(); import numpy as np, resource; "
               "a = np.ones(8 << 20); del a; "                      # 64 MB: above glibc's largest mmap threshold
               "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; b = np.ones(8 << 20); "
               "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)")


def _faults_of_a_second_big_array(env_value: str | None) -> int:
    env = dict(os.environ)
    env.pop("SPECPROF_ALLOCATOR", None)
    env.pop("GLIBC_TUNABLES", None)
    if env_value is not None:
        env["SPECPROF_ALLOCATOR"] = env_value
    out = subprocess.run([sys.executable, "-c", REUSE_PROBE], env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_one_heap_reuses_a_freed_big_block_without_faulting_it_in_again():
    """A 64 MB array freed and another allocated: glibc's default unmaps the first and faults in
    every page of the second (16,384 of 4 KiB); the CLI's heap hands the same pages back."""
    from analyze import memory

    if memory._libc() is None:
        pytest.skip("glibc is not the C library here")
    pages = (8 << 20) * 8 // 4096
    assert _faults_of_a_second_big_array("default") > pages // 2
    assert _faults_of_a_second_big_array(None) < pages // 16


@pytest.mark.parametrize("big", [False, True])
def test_the_heap_is_handed_back_only_after_big_analyses(big, monkeypatch):
    """memory.release (a trim: the next stage faults its pages in again) runs in a whole analysis
    only where it has at least TRIM_AFTER_OPS GPU ops: three times there (before the per-op table,
    after the report's map step, after the reports are combined), never below it (the real tiled 1M
    file: the views' arrays then reuse the freed heap, 190k page faults -> 150k)."""
    from pathlib import Path

    import analyze
    from analyze import memory

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200_4proc_eager.sqlite"   # (conftest unpacks)
    n_ops = len(analyze.load(str(path), memory_budget=None).gpu_ops)
    calls = []
    monkeypatch.setattr(memory, "TRIM_AFTER_OPS", n_ops if big else n_ops + 1)
    monkeypatch.setattr(memory, "release", lambda: calls.append(1))
    analysis = analyze.load(str(path), memory_budget=None)
    assert int(analysis.totals["gpu_ops"].sum()) == n_ops
    assert len(calls) == (3 if big else 0)
