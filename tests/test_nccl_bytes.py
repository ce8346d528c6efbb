"""A figure that lands through the view registry (issue 42): NCCL bytes per cycle per rank, from NCCL's
NVTX payloads, in the terminal report, the JSON result and the HTML page (views/collectives.py,
timeline/collectives.py)."""
import json
import subprocess
import sys

import numpy as np
import pytest

import analyze
from analyze import views
from analyze.read import nccl_payloads as NP
from test_advise import NCCL_KERNEL, _add_nccl_payloads


@pytest.fixture(scope="module")
def sized_trace(tmp_path_factory):
    from fixtures.synth import TraceSpec, write_trace

    d = tmp_path_factory.mktemp("nccl")
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=6, jitter=0.0, allreduce_kernel=NCCL_KERNEL.format("RING_LL128"),
                                     allreduce_ns=60_000), d)
    n = _add_nccl_payloads(paths[0], lambda i: 16384 * (1 + i % 3))
    return paths, n


def test_bytes_per_cycle_per_rank(sized_trace):
    """2 ranks x 6 cycles x 4 all-reduces; sizes 16, 32, 48 KiB in turn, in time order. The first cycle of
    each rank is warm-up: 5 steady cycles, 4 collectives each, and the bytes of all but the first 8
    ranges (the two first cycles)."""
    paths, n = sized_trace
    a = analyze.load(paths)
    t = views.get(a, "nccl_bytes")
    assert t["rank"].tolist() == [0, 1] and t["cycles"].tolist() == [5, 5]
    assert t["collectives_per_cycle"].tolist() == [4.0, 4.0]
    sizes = np.array([16384 * (1 + i % 3) for i in range(n)])
    assert float((t["bytes_per_cycle"] * t["cycles"]).sum()) == pytest.approx(float(sizes[8:].sum()))
    assert t["message_bytes_min"].tolist() == [16384, 16384] and t["message_bytes_max"].tolist() == [49152, 49152]
    frame, _ = NP.message_sizes(paths[0])
    assert len(frame) == n


def test_the_figure_in_report_json_and_html(sized_trace, tmp_path):
    paths, _ = sized_trace
    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "analyze.cli", str(paths[0]), "--json", str(out), "--html", str(html)],
                       capture_output=True, text=True, env={"COLUMNS": "120", "PATH": ""}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "NCCL bytes per cycle per rank" in r.stdout
    line = next(x for x in r.stdout.splitlines() if x.startswith("rank  cycles"))
    assert "bytes_per_cycle" in line
    data = json.loads(out.read_text())
    assert [row["collectives_per_cycle"] for row in data["nccl_bytes"]] == [4.0, 4.0]
    assert 'id="nccl-bytes"' in html.read_text()


def test_absent_without_payloads():
    """No payloads (every real export so far): an empty table, no section."""
    from pathlib import Path

    real = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200_shim_4rank_single.sqlite"
    if not real.exists():
        pytest.skip("fixture not unpacked")
    a = analyze.load(real)
    assert views.get(a, "nccl_bytes").empty
    from analyze.render import text
    assert "NCCL bytes" not in "\n".join(text.section_lines(a, 120))
