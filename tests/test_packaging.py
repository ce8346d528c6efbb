"""What ``pip install .`` installs: the wheel holds only the ``analyze`` and ``nvtx_annotate`` packages
(no ``fixtures``, no ``spec_workload``, no test traces) plus the demo trace as package data, under
8 MB; and ``analyze-trace`` from that wheel, in a fresh virtual environment, runs the demo.

The wheel is built offline from a copy of the checkout (``pip wheel . --no-deps
--no-build-isolation``, so the build backend must be importable here; skipped otherwise). The fresh
environment gets the wheel alone; its dependencies (numpy, pandas, ...) come from this
environment's site-packages through a ``.pth`` line, which adds the directory to ``sys.path``
without running its ``.pth`` files, so this checkout's editable install stays invisible there.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_WHEEL_BYTES = 8 * 10**6


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot tell the tracked files")
    return [f for f in out.decode().split("\0") if f]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools not importable: cannot build the wheel offline")
    src = tmp_path_factory.mktemp("src")
    for rel in _tracked_files() + [str(p.relative_to(ROOT)) for p in (ROOT / "analyze").rglob("*.py")]:
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out)], cwd=src, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (whl,) = out.glob("specprof-*.whl")
    return whl


def test_wheel_holds_only_the_two_packages_and_the_demo_trace(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    # the two packages, the shim's .pth hook at the root of site-packages (pip install/uninstall
    # manage it: it loads the shim only when SPECPROF_NVTX is set) and the metadata
    assert top == {"analyze", "nvtx_annotate", "specprof_nvtx.pth", next(t for t in top if t.endswith(".dist-info"))}
    assert not any(n.startswith(("fixtures/", "spec_workload/", "tests/", "bench/")) for n in names)
    assert [n for n in names if n.startswith("analyze/data/")] == ["analyze/data/h200_4proc_eager.sqlite.xz"]
    assert not any(n.endswith((".sqlite", ".sqlite.xz")) for n in names if not n.startswith("analyze/data/"))
    for pkg in ("analyze/read/", "analyze/run/", "analyze/render/", "analyze/tools/diff/", "analyze/tools/whatif/"):
        assert f"{pkg}__init__.py" in names
    assert wheel.stat().st_size < MAX_WHEEL_BYTES


def test_analyze_trace_from_the_wheel_runs_the_demo(wheel, tmp_path):
    import analyze
    from analyze.cli import default_trace
    from analyze.render.outputs import to_json_dict

    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, capture_output=True)
    py = env_dir / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "specprof-test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}        # the demo unpacked from the wheel
    env.pop("PYTHONPATH", None)
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run([str(env_dir / "bin" / "analyze-trace"), "--json", "out.json"], cwd=work, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Exclusive GPU time per phase" in proc.stdout
    where = subprocess.run([str(py), "-c", "import analyze; print(analyze.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(purelib)                                        # the wheel's copy, not this checkout
    data = json.loads((work / "out.json").read_text())
    assert data["inputs"][0]["path"].startswith(str(tmp_path / "cache"))
    here = to_json_dict(analyze.load(default_trace()))
    def rows(records):             # the input path differs (another cache): the figures must not
        return [{k: v for k, v in r.items() if k != "input"} for r in records]

    for key in ("ranks", "phases", "kernels", "totals", "cycles", "notes"):
        assert rows(data[key]) == rows(here[key]), key
    assert len(data["phases"]) == 24 and data["notes"][0]["code"] == "shared_correlation_ids"


def test_the_wheel_needs_neither_connectorx_nor_adbc(wheel):
    """connectorx and ADBC are no readers of analyze-trace's (issue 42): not runtime dependencies,
    only the benchmark's ``[bench]`` extra."""
    meta = next(n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in zipfile.ZipFile(wheel).read(meta).decode().splitlines()
                if line.startswith("Requires-Dist:")]
    runtime = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("pyarrow") for r in runtime) and any(r.startswith("pandas") for r in runtime)
    assert not any(r.startswith(("connectorx", "adbc")) for r in runtime), runtime
    bench = sorted(r.split(";")[0].strip() for r in requires if "extra == \"bench\"" in r)
    assert bench == ["adbc-driver-sqlite>=1.0", "connectorx>=0.4"]


def test_the_analysis_runs_where_connectorx_and_adbc_cannot_be_imported(tmp_path):
    """analyze-trace on a real export with connectorx and the ADBC driver unimportable: the same
    JSON as here, and neither module loaded."""
    report = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"
    code = f"""
import importlib.abc, sys
BLOCKED = ("connectorx", "adbc_driver_sqlite", "adbc_driver_manager")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
from analyze import cli
rc = cli.main([{str(report)!r}, "-q", "--json", {str(tmp_path / "blocked.json")!r}])
assert rc == 0, rc
assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
print("ok")
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    from analyze import cli
    assert cli.main([str(report), "-q", "--json", str(tmp_path / "here.json")]) == 0
    assert json.loads((tmp_path / "blocked.json").read_text()) == json.loads((tmp_path / "here.json").read_text())
