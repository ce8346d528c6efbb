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


def test_payloads_read_in_the_map_step_on_the_analysis_clock(sized_trace, tmp_path, monkeypatch):
    """The sized ranges are read with the report's other tables (once, in the map step) and travel with the
    result: the figure needs no input file afterwards (a Dask worker's path, a moved report), its times are
    on the analysis' clock (the reducer shifts them as every table's), a --cache entry carries them, and a
    report analysed in chunks has them too."""
    import shutil

    from analyze.run import api

    paths, n = sized_trace
    copy = tmp_path / "copy.sqlite"
    shutil.copy(paths[0], copy)
    a = analyze.load(str(copy))
    read, info = NP.message_sizes(copy)
    copy.unlink()                                    # nothing reads the export after the analysis
    sized, got = views.get(a, "nccl_messages")
    assert len(sized) == n and got == info and info["reason"] is None and info["events"] == n
    assert set(sized["input"]) == {str(copy)}
    assert (sized["start_ns"] - read["start_ns"]).unique().tolist() == [a.inputs[0]["offset_ns"]]
    assert sized["message_bytes"].tolist() == read["message_bytes"].tolist()
    # a clock offset given to the report moves the ranges with its cycles
    from analyze.ranks import alignment

    real_align = alignment.align

    def shifted(results):
        out = real_align(results)
        return out.assign(offset_ns=out["offset_ns"] + 1_000_000)
    monkeypatch.setattr(alignment, "align", shifted)
    b = analyze.load(paths[0])
    sized_b, _ = views.get(b, "nccl_messages")
    assert b.inputs[0]["offset_ns"] == a.inputs[0]["offset_ns"] + 1_000_000
    assert (sized_b["start_ns"] - read["start_ns"]).unique().tolist() == [b.inputs[0]["offset_ns"]]
    assert views.get(b, "nccl_bytes").equals(views.get(a, "nccl_bytes"))
    monkeypatch.setattr(alignment, "align", real_align)
    # from a cache entry, and in chunks
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("SPECPROF_CACHE_DIR", str(cache_dir))
    src = tmp_path / "src.sqlite"
    shutil.copy(paths[0], src)
    from analyze.read import cache as cache_mod

    first = analyze.load(str(src), cache=True)
    entry, _ = cache_mod.find_entry(str(src))
    assert entry is not None and (entry / "nccl_messages.parquet").is_file()
    monkeypatch.setattr(NP, "read_message_sizes", lambda conn: (_ for _ in ()).throw(AssertionError("re-read")))
    again = analyze.load(str(src), cache=True)         # from the entry: the export's payloads not read again
    for other in (first, again):
        assert views.get(other, "nccl_bytes").equals(views.get(a, "nccl_bytes"))
    monkeypatch.undo()
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 50)
    chunked = analyze.load(paths[0], memory_budget=1)
    assert chunked.gpu_ops.empty
    assert views.get(chunked, "nccl_bytes").equals(views.get(a, "nccl_bytes"))
