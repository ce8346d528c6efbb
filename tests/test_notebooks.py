"""The notebooks run top to bottom (nbclient, a kernel of the current interpreter) and draw figures."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
REAL_1RANK = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"
CELL_TIMEOUT = 60


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory, monkeypatch_module):
    """A kernelspec named after this interpreter, so the notebooks run where specprof is installed."""
    digest = hashlib.sha1(sys.executable.encode()).hexdigest()[:8]
    name = f"specprof-py{sys.version_info.major}{sys.version_info.minor}-{digest}"
    root = tmp_path_factory.mktemp("jupyter")
    spec_dir = root / "kernels" / name
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python ({sys.executable})", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root))
    monkeypatch_module.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return name


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _client(name: str, kernel: str, reports: str | None = None):
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert first.source.startswith("REPORTS = None"), "the first code cell sets REPORTS"
    if reports is not None:
        first.source = first.source.replace("REPORTS = None", f"REPORTS = {reports!r}", 1)
    return nbclient.NotebookClient(nb, kernel_name=kernel, timeout=CELL_TIMEOUT,
                                   resources={"metadata": {"path": str(NOTEBOOKS)}})


RUNS = {  # run id -> (notebook, REPORTS or None)
    "overview": ("overview", None),
    "overview_1rank": ("overview", str(REAL_1RANK)),
    "verify": ("verify_deep_dive", None),
    "ranks": ("ranks_and_allreduce", None),
    "ranks_1rank": ("ranks_and_allreduce", str(REAL_1RANK)),
}


@pytest.fixture(scope="module")
def executed(kernel_name):
    """Every run of RUNS executed once, concurrently (one kernel each): run id -> notebook or error."""
    import asyncio

    async def one(client):
        try:
            await client.async_execute()
        except Exception as exc:  # reported by the test that looks at this run
            return exc
        return client.nb

    async def all_runs():
        clients = {k: _client(nb, kernel_name, rep) for k, (nb, rep) in RUNS.items()}
        done = await asyncio.gather(*(one(c) for c in clients.values()))
        return dict(zip(clients, done))

    return asyncio.run(all_runs())


def run(executed, key: str):
    nb = executed[key]
    if isinstance(nb, Exception):
        raise nb
    return nb


def outputs(nb, mime: str) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if mime in o.get("data", {})]


def text_of(nb) -> str:
    parts = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            parts.append(o.get("text", ""))
            parts.append(o.get("data", {}).get("text/plain", ""))
            parts.append(o.get("data", {}).get("text/html", ""))
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def no_errors(nb) -> None:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors


def test_notebooks_exist():
    names = {p.stem for p in NOTEBOOKS.glob("*.ipynb")}
    assert {"overview", "verify_deep_dive", "ranks_and_allreduce"} <= names
    for p in NOTEBOOKS.glob("*.ipynb"):
        nb = nbformat.read(p, as_version=4)
        nbformat.validate(nb)
        # stored without outputs: the repository holds the recipe, not a stale result
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), p


def _decode_figures(path) -> int:
    """1 when the analysis has the steady-state breakdown the overview draws first (decode_bars)."""
    import analyze
    from analyze.views import decode

    a = analyze.load(path)
    return int(decode.has_period_split(a.cycles, a.phase_names))


def test_overview_bundled(executed):
    nb = run(executed, "overview")
    no_errors(nb)
    pngs = outputs(nb, "image/png")
    # (decode bars,) phase bars, timeline, top kernels, cycle distributions, cycle breakdown
    from analyze.cli import default_trace
    n_decode = _decode_figures(default_trace())
    assert len(pngs) == 5 + n_decode
    text = text_of(nb)
    assert "4 rank(s)" in text and "12 decode cycles" in text
    # the headline comes first: before the whole-trace phase table
    if n_decode:
        assert text.index("of the decode cycle") < text.index("busy")
    else:
        assert "decode_bars: skipped (the cycle table has no period split)" in text
    for phase in ("draft", "verify", "allreduce", "other", "busy"):
        assert phase in text
    assert "report.html" in text


def test_overview_other_report_one_rank(executed):
    nb = run(executed, "overview_1rank")
    no_errors(nb)
    assert len(outputs(nb, "image/png")) == 5 + _decode_figures(REAL_1RANK)
    text = text_of(nb)
    assert "1 rank(s)" in text and "20 decode cycles" in text
    assert "graph level" in text  # the analysis note about graph-level CUDA graph tracing is shown


def test_verify_deep_dive(executed):
    nb = run(executed, "verify")
    no_errors(nb)
    # top verify kernels, variability, cycle breakdown, timeline of the slowest cycle
    assert len(outputs(nb, "image/png")) == 4
    text = text_of(nb)
    assert "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT" in text  # the top verify kernel of the trace
    assert "kernels that grew the most" in text
    assert "median verify time per cycle" in text


def test_ranks_and_allreduce_synthetic(executed):
    nb = run(executed, "ranks")
    no_errors(nb)
    # phase bars, wait heatmap, timeline of the worst collective's cycle, cycle distributions
    assert len(outputs(nb, "image/png")) == 4
    text = text_of(nb)
    assert "8 rank(s)" in text and "8 decode cycles" in text
    # rank 5 was delayed by 400 us before an all-reduce of verify in cycle 3: it is the most skewed
    assert "last to arrive: rank 5 (after verify)" in text
    assert "in cycle 3," in text
    assert "straggler rank(s):" in text


def test_ranks_and_allreduce_without_collectives(executed):
    nb = run(executed, "ranks_1rank")
    no_errors(nb)
    text = text_of(nb)
    assert "allreduce_heatmap: skipped (no collectives (one rank))" in text
    assert len(outputs(nb, "image/png")) == 3
