"""Peak memory under --memory-budget, measured (slow: run with ``-m slow``; not in the default run).

A 1M-kernel, 8-rank export from fixtures/synth.py's scale mode is analysed by the CLI in a fresh
process; its peak RSS (getrusage of the child) must stay under the budget, and the whole analysis
must need more than that, so the budget is what kept it down. Measured on the 2-core dev machine:
251 MiB under a 300 MB budget, 0.46 GiB whole (bench/results.md has the 10M figures).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ANALYZE = [sys.executable, "-m", "analyze.cli"]


def peak_rss_bytes(cmd: list[str]) -> int:
    """Peak RSS of ``cmd`` run in its own process (waited for in a fresh interpreter, so that
    RUSAGE_CHILDREN holds that one child only)."""
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
             "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    return int(out.stdout.split()[-1]) * 1024


@pytest.fixture(scope="module")
def million(tmp_path_factory):
    from fixtures.synth import TraceSpec, write_trace

    out = tmp_path_factory.mktemp("million")
    paths, _ = write_trace(TraceSpec(ranks=8, total_kernels=1_000_000, cuda_graph_mode="node"), out)
    return str(paths[0])


def test_peak_stays_under_the_budget(million):
    budget = 300 * 10 ** 6
    chunked = peak_rss_bytes([*ANALYZE, million, "--quiet", "--memory-budget", "300MB"])
    whole = peak_rss_bytes([*ANALYZE, million, "--quiet", "--memory-budget", "none"])
    assert chunked <= budget, f"peak {chunked / 1e6:.0f} MB over the 300 MB budget"
    assert whole > budget, f"the whole analysis peaked at {whole / 1e6:.0f} MB: the budget did not bind"
