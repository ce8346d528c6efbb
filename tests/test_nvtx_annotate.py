"""nvtx_annotate: the target table against real SGLang releases, the patching, the emitters,
the .pth hook and profile-trace's command line (no GPU, no nsys needed here)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import nvtx_annotate
from nvtx_annotate import _nvtx, shim
from nvtx_annotate.__main__ import check
from nvtx_annotate.pth import PTH_LINE
from nvtx_annotate.targets import TARGETS, resolve_static

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SPECPROF_SGLANG_CACHE", Path.home() / ".cache" / "specprof" / "sglang"))
VERSIONS = ["0.4.9.post6", "0.5.3", "0.5.10", "0.5.23"]


# ----------------------------------------------------------------------------- real SGLang sources

def _wheel(version: str) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
    if not found:
        r = subprocess.run(
            [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps",
             "--only-binary=:all:", "-d", str(CACHE), "-q"],
            capture_output=True, text=True, timeout=600,
        )
        found = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        if not found:
            pytest.skip(f"cannot download sglang=={version} (no PyPI access?): {r.stderr.strip()[-300:]}")
    return found[0]


def _unpacked(version: str) -> Path:
    """The wheel's sglang/ Python files and dist-info, unpacked once into the cache."""
    dest = CACHE / f"src-{version}"
    done = dest / ".complete"
    if not done.exists():
        with zipfile.ZipFile(_wheel(version)) as z:
            for n in z.namelist():
                if n.endswith(".py") and n.startswith("sglang/") or n.endswith(".dist-info/METADATA"):
                    z.extract(n, dest)
        done.write_text("ok")
    return dest


# targets each release must resolve (read from the released wheels)
EXPECTED = {
    "0.4.9.post6": [
        "EAGLEWorker.forward_batch_speculative_generation", "EAGLEWorker.draft", "EAGLEWorker.verify",
        "EAGLEWorker.forward_draft_extend_after_decode", "GroupCoordinator.all_reduce",
        "flashinfer_allreduce_residual_rmsnorm", "EAGLEDraftCudaGraphRunner.replay",
        "EAGLEDraftExtendCudaGraphRunner.replay", "CudaGraphRunner.replay", "GroupCoordinator.__init__",
    ],
    "0.5.3": [
        "EAGLEWorker.forward_batch_generation", "EAGLEWorker.draft", "EAGLEWorker.verify",
        "GroupCoordinator.all_reduce", "CudaGraphRunner.replay", "EAGLEDraftCudaGraphRunner.replay",
    ],
    "0.5.10": [
        "EAGLEWorker.forward_batch_generation", "EAGLEWorkerV2.forward_batch_generation",
        "EagleDraftWorker.draft", "EagleDraftWorker._draft_extend_for_decode", "EAGLEWorkerV2.verify",
        "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", "GroupCoordinator.all_reduce",
    ],
    "0.5.23": [
        "EAGLEWorkerV2.forward_batch_generation", "EagleDraftWorker.draft",
        "EagleDraftWorker._draft_extend_for_decode", "EAGLEWorkerV2.verify",
        "EAGLEWorkerV2.on_verify_complete_cpu", "GroupCoordinator.all_reduce",
        "flashinfer_allreduce_residual_rmsnorm", "EAGLEDraftCudaGraphRunner.execute",
        "EAGLEDraftExtendCudaGraphRunner.execute", "DecodeCudaGraphRunner.execute",
    ],
}
ABSENT = {
    "0.4.9.post6": ["EAGLEWorker.forward_batch_generation", "EAGLEWorkerV2.verify"],
    "0.5.3": ["EAGLEWorker.forward_batch_speculative_generation", "EAGLEWorkerV2.verify"],
    "0.5.10": ["DecodeCudaGraphRunner.execute", "EAGLEWorkerV2.on_verify_complete_cpu"],
    "0.5.23": ["EAGLEWorker.verify", "CudaGraphRunner.replay"],  # v1 worker removed in 0.5.13
}


@pytest.mark.parametrize("version", VERSIONS)
def test_check_resolves_real_sglang_release(version):
    root = _unpacked(version)
    buf = io.StringIO()
    rc = check(str(root), as_json=True, out=buf)
    res = json.loads(buf.getvalue())
    assert rc == 0, res["missing_required"]
    assert res["version"] == version
    assert res["roles"]["draft"] and res["roles"]["verify"] and res["roles"]["allreduce"]
    assert res["roles"]["decode_cycle"] and res["roles"]["accept"] and res["roles"]["rank"]
    found = {r["target"].split(":", 1)[1] for r in res["targets"] if r["found"]}
    for t in EXPECTED[version]:
        assert t in found, f"{t} not found in sglang {version}"
    for t in ABSENT[version]:
        assert t not in found, f"{t} unexpectedly found in sglang {version}"


def test_check_cli_exit_codes(tmp_path):
    # the newest release through the real command line: exit 0 and a readable listing
    root = _unpacked(VERSIONS[-1])
    r = subprocess.run([sys.executable, "-m", "nvtx_annotate", "--check", "--source", str(root)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sglang 0.5.23" in r.stdout and "ok: draft, verify and allreduce" in r.stdout
    # a tree where verify and allreduce cannot be annotated: non-zero, named
    spec = tmp_path / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    (spec / "eagle_worker.py").write_text("class EAGLEWorker:\n    def draft(self): pass\n")
    r = subprocess.run([sys.executable, "-m", "nvtx_annotate", "--check", "--source", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 1
    assert "cannot annotate: verify, allreduce" in r.stdout
    # no sglang at all: 2
    r = subprocess.run([sys.executable, "-m", "nvtx_annotate", "--check", "--source", str(tmp_path / "nope")],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "no 'sglang' package" in r.stderr


# ----------------------------------------------------------------------------- patching

FAKE = {
    "srt/__init__.py": "",
    "srt/speculative/__init__.py": "",
    "srt/distributed/__init__.py": "",
    "srt/layers/__init__.py": "",
    "srt/model_executor/__init__.py": "",
    "srt/distributed/parallel_state.py": """
        class GroupCoordinator:
            def __init__(self, name, rank, world, device):
                self.unique_name = name + ":0"
                self.rank_in_group, self.world_size, self.device = rank, world, device
            def all_reduce(self, x):
                return x + 1
    """,
    "srt/layers/flashinfer_comm_fusion.py": """
        def flashinfer_allreduce_residual_rmsnorm(x):
            return x * 2
    """,
    "srt/layers/user.py": """
        from ..layers.flashinfer_comm_fusion import flashinfer_allreduce_residual_rmsnorm as fused
    """,
    "srt/model_executor/cuda_graph_runner.py": """
        class CudaGraphRunner:
            def replay(self, fb):
                return fb
    """,
    "srt/speculative/eagle_worker.py": """
        from types import SimpleNamespace
        from ..distributed.parallel_state import GroupCoordinator
        from ..model_executor.cuda_graph_runner import CudaGraphRunner

        class EAGLEWorker:
            def __init__(self):
                self.tp = GroupCoordinator("tp", 2, 8, "cuda:2")
                self.ep = GroupCoordinator("ep", 0, 8, "cuda:2")
                self.runner = CudaGraphRunner()
            def forward_batch_generation(self, batch):
                s = self.draft(batch)
                out = self.verify(batch, s)
                self.forward_draft_extend_after_decode(batch)
                return out
            def draft(self, batch):
                return 1
            def verify(self, batch, spec):
                self.runner.replay(batch)
                self.tp.all_reduce(1)
                self.ep.all_reduce(1)   # not the TP group: no range
                res = SimpleNamespace(accept_length_per_req_cpu=batch)
                return "logits", res, None, True
            def forward_draft_extend_after_decode(self, batch):
                return None
    """,
}


@pytest.fixture
def fake_pkg(tmp_path, monkeypatch):
    name = "fakesgl_" + tmp_path.name.replace("-", "_")[-20:]
    for rel, src in FAKE.items():
        p = tmp_path / name / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(src))
    (tmp_path / name / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    monkeypatch.setattr(shim, "_stats", {"cycles": 0, "marks": 0, "rank_marks": 0})
    yield name, rec
    shim.uninstall(name)
    for m in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[m]
    _nvtx.set_backend(prev)


def test_lazy_hook_wraps_methods_with_ranges_and_marks(fake_pkg):
    name, rec = fake_pkg
    assert shim.install(name) is True
    assert shim.install(name) is False  # idempotent
    import importlib

    ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker")
    w = ew.EAGLEWorker()  # GroupCoordinator("tp") -> rank mark; "ep" -> none
    out = w.forward_batch_generation([2, 0, 3])
    assert out[0] == "logits"
    assert rec.ranges() == [
        ("decode_cycle", 0), ("draft", 1), ("verify", 1), ("graph_replay_verify", 2),
        ("allreduce", 2), ("draft_extend", 1),
    ]
    assert rec.marks() == [("rank=2 world=8 device=2", None), ("accept_len=5 reqs=3 lens=2,0,3", 5)]
    # accept mark is emitted inside decode_cycle, after draft_extend
    kinds = [(k, t) for k, t, _ in rec.events]
    assert kinds.index(("mark", "accept_len=5 reqs=3 lens=2,0,3")) == len(kinds) - 2
    assert kinds[-1] == ("pop", None)
    roles = shim.patched_roles(name)
    for r in ("decode_cycle", "draft", "draft_extend", "verify", "allreduce", "graph_replay_verify",
              "accept", "rank"):
        assert r in roles, r


def test_function_imported_by_name_is_wrapped(fake_pkg):
    name, rec = fake_pkg
    shim.install(name)
    import importlib

    user = importlib.import_module(f"{name}.srt.layers.user")
    assert user.fused(3) == 6
    assert rec.ranges() == [("allreduce", 0)]


def test_already_imported_module_is_patched_at_install(fake_pkg):
    name, rec = fake_pkg
    import importlib

    ps = importlib.import_module(f"{name}.srt.distributed.parallel_state")
    g = ps.GroupCoordinator("tp", 0, 2, "cuda:0")
    shim.install(name)
    assert g.all_reduce(1) == 2
    assert rec.ranges() == [("allreduce", 0)]
    shim.uninstall(name)
    assert g.all_reduce(1) == 2
    assert rec.ranges() == [("allreduce", 0)]  # unwrapped again: no new range


def test_no_nvtx_while_capturing(fake_pkg, monkeypatch):
    name, rec = fake_pkg
    shim.install(name)
    import importlib

    ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker")
    w = ew.EAGLEWorker()
    monkeypatch.setattr(shim, "skip_nvtx", lambda: True)
    monkeypatch.setattr(shim, "skip_nvtx_exact", lambda: True)
    # the wrappers read shim.skip_nvtx at call time through the module global
    w.forward_batch_generation([1])
    assert rec.ranges() == []
    assert [m for m in rec.marks() if m[0].startswith("accept")] == []


def test_missing_targets_warn_once_and_never_break(tmp_path, monkeypatch, capsys):
    name = "fakesgl_missing_" + tmp_path.name.replace("-", "_")[-12:]
    spec = tmp_path / name / "srt" / "speculative"
    spec.mkdir(parents=True)
    for d in (tmp_path / name, tmp_path / name / "srt", spec):
        (d / "__init__.py").write_text("")
    (spec / "eagle_worker.py").write_text(textwrap.dedent("""
        class EAGLEWorker:
            def forward_batch_generation(self, b):
                return self.draft(b)
            def draft(self, b):
                return b
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    monkeypatch.setattr(shim, "_missing_reported", False)
    monkeypatch.setattr(shim, "_stats", {"cycles": 0, "marks": 0, "rank_marks": 0})
    try:
        shim.install(name)
        import importlib

        ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker")
        assert ew.EAGLEWorker().forward_batch_generation(7) == 7
        assert ew.EAGLEWorker().forward_batch_generation(8) == 8
        err = capsys.readouterr().err
        assert err.count("could not annotate verify, allreduce") == 1
        assert rec.ranges() == [("decode_cycle", 0), ("draft", 1), ("decode_cycle", 0), ("draft", 1)]
    finally:
        shim.uninstall(name)
        _nvtx.set_backend(prev)


def test_v2_accept_marks_from_cpu_values(tmp_path, monkeypatch):
    name = "fakesgl_v2_" + tmp_path.name.replace("-", "_")[-12:]
    base = tmp_path / name / "srt"
    for sub in ("speculative", "managers"):
        (base / sub).mkdir(parents=True)
        (base / sub / "__init__.py").write_text("")
    (tmp_path / name / "__init__.py").write_text("")
    (base / "__init__.py").write_text("")
    (base / "speculative" / "eagle_worker_v2.py").write_text(textwrap.dedent("""
        class EAGLEWorkerV2:
            def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=0):
                return batch_size
    """))
    (base / "managers" / "scheduler_output_processor_mixin.py").write_text(textwrap.dedent("""
        class SchedulerOutputProcessorMixin:
            def _resolve_spec_overlap_token_ids(self, result, batch):
                accept_lens = result.accept_lens
                result.accept_length_per_req_cpu = [x - 1 for x in accept_lens]
                return []
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    try:
        shim.install(name)
        import importlib
        from types import SimpleNamespace

        v2 = importlib.import_module(f"{name}.srt.speculative.eagle_worker_v2")
        mx = importlib.import_module(f"{name}.srt.managers.scheduler_output_processor_mixin")
        assert v2.EAGLEWorkerV2().on_verify_complete_cpu([3, 1], batch_size=2) == 2
        mx.SchedulerOutputProcessorMixin()._resolve_spec_overlap_token_ids(
            SimpleNamespace(accept_lens=[4, 1, 2]), None)
        assert rec.marks() == [("accept_len=4 reqs=2 lens=3,1", 4), ("accept_len=4 reqs=3 lens=3,0,1", 4)]
        assert rec.ranges() == []
    finally:
        shim.uninstall(name)
        _nvtx.set_backend(prev)


# ----------------------------------------------------------------------------- emitters

def test_ctypes_backend_is_inactive_without_a_profiler(monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    b = _nvtx.CtypesBackend()
    assert b.active is False
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/nonexistent/libinj.so")
    assert _nvtx.CtypesBackend().active is False


def test_auto_backend_without_profiler_is_a_noop(monkeypatch):
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setenv("SPECPROF_NVTX_BACKEND", "auto")
    b = _nvtx.make_backend()
    assert b.name == "none" and b.active is False  # no profiler: not even torch.cuda.nvtx
    b.push("x")
    b.pop()
    b.mark("y", 1)
    with pytest.raises(ValueError):
        _nvtx.make_backend("bogus")


def test_attr_struct_layout_matches_nvtx_v3():
    import ctypes

    assert ctypes.sizeof(_nvtx._Attr) == 48  # NVTX_EVENT_ATTRIB_STRUCT_SIZE on 64-bit
    assert _nvtx._Attr.payload.offset == 24 and _nvtx._Attr.message.offset == 40


def test_bench_reports_numbers():
    from nvtx_annotate.__main__ import bench

    res = bench(n=2000, backend="record", out=io.StringIO())
    assert res["backend"] == "record" and res["n"] == 2000
    assert res["push_pop_ns"] > 0 and res["wrapped_call_ns"] > res["plain_call_ns"]


# ----------------------------------------------------------------------------- .pth hook

def test_pth_hook_installs_shim_only_when_switched_on(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "specprof_nvtx.pth").write_text(PTH_LINE)
    code = (
        "import site, sys; site.addsitedir(sys.argv[1]);"
        "import nvtx_annotate.shim as s; print(sorted(s._installed))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), SPECPROF_NVTX_PACKAGE="spec_workload")
    env.pop("SPECPROF_NVTX", None)
    r = subprocess.run([sys.executable, "-c", code, str(site_dir)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    env["SPECPROF_NVTX"] = "1"
    r = subprocess.run([sys.executable, "-c", code, str(site_dir)], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['spec_workload']"


def test_install_pth_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "nvtx_annotate", "install-pth", "--site", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    assert (tmp_path / "specprof_nvtx.pth").read_text() == PTH_LINE
    from nvtx_annotate.pth import is_installed

    assert is_installed(str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "nvtx_annotate", "uninstall-pth", "--site", str(tmp_path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and not (tmp_path / "specprof_nvtx.pth").exists()


def test_plugin_entry_point_declared_and_gated(monkeypatch):
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["sglang.srt.plugins"]["specprof_nvtx"] == "nvtx_annotate.plugin:load"
    from nvtx_annotate import plugin

    calls = []
    monkeypatch.setattr(plugin, "install", lambda: calls.append(1))
    monkeypatch.delenv("SPECPROF_NVTX", raising=False)
    plugin.load()
    assert calls == []
    monkeypatch.setenv("SPECPROF_NVTX", "1")
    plugin.load()
    assert calls == [1]


def test_every_target_names_a_known_range():
    names = set(nvtx_annotate.RANGE_NAMES)
    for t in TARGETS:
        assert t.range_name is None or t.range_name in names
    assert {t.role for t in TARGETS} >= {"draft", "verify", "allreduce", "accept", "rank"}


def test_graph_capture_counter_skips_nvtx(monkeypatch):
    """The counter hooked onto torch.cuda.CUDAGraph.capture_begin/end makes skip_nvtx true
    exactly while a capture is open (a stand-in torch: CPU builds cannot capture)."""
    import types

    calls = []

    class CUDAGraph:
        def capture_begin(self, pool=None):
            calls.append("begin")

        def capture_end(self):
            calls.append("end")

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(graphs=types.SimpleNamespace(CUDAGraph=CUDAGraph),
                                                            is_available=lambda: False),
                                 compiler=types.SimpleNamespace(is_compiling=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(shim, "_capture_depth", 0)
    check = shim._make_capture_check(exact=True)
    assert check() is False
    g = CUDAGraph()
    g.capture_begin()
    assert check() is True and shim._capture_depth == 1
    g.capture_end()
    assert check() is False and calls == ["begin", "end"]
    fake.compiler.is_compiling = lambda: True  # a fresh check reads the new is_compiling
    check2 = shim._make_capture_check(exact=False)
    assert check2() is True  # torch.compile tracing


def test_accept_mark_carries_per_request_lengths_up_to_64_requests(monkeypatch):
    """``accept_len=N reqs=M lens=...``: the sum and count stay first (older readers), the lengths in
    request order follow for M <= 64 only; the analyzer's mark regex reads all three back."""
    from analyze.timeline.cycles import ACCEPT_MARK

    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    monkeypatch.setattr(shim, "_stats", {"cycles": 0, "marks": 0, "rank_marks": 0})
    try:
        shim._accept_mark([3, 0, 12, 1])
        shim._accept_mark(list(range(64)))
        shim._accept_mark([1] * 65)
        shim._accept_mark([])
    finally:
        _nvtx.set_backend(prev)
    marks = rec.marks()
    assert marks[0] == ("accept_len=16 reqs=4 lens=3,0,12,1", 16)
    assert marks[1] == ("accept_len=2016 reqs=64 lens=" + ",".join(str(i) for i in range(64)), 2016)
    assert marks[2] == ("accept_len=65 reqs=65", 65)          # too many requests: no lens
    assert marks[3] == ("accept_len=0 reqs=0", 0)
    assert shim.stats()["marks"] == 4
    m = ACCEPT_MARK.search(marks[0][0])
    assert (m["n"], m["reqs"], m["lens"]) == ("16", "4", "3,0,12,1")
    m = ACCEPT_MARK.search(marks[2][0])
    assert (m["n"], m["reqs"], m["lens"]) == ("65", "65", None)
