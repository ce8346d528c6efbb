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
from nvtx_annotate import wrappers
from nvtx_annotate.__main__ import check
from nvtx_annotate.pth import PTH_LINE
from nvtx_annotate.targets import TARGETS

from helpers.fake_package import fake_package, write_package

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SPECPROF_SGLANG_CACHE", Path.home() / ".cache" / "specprof" / "sglang"))
VERSIONS = ["0.4.9.post6", "0.5.3", "0.5.10", "0.5.17", "0.5.23"]


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
        "Scheduler.start_profile",
    ],
    "0.5.3": [
        "EAGLEWorker.forward_batch_generation", "EAGLEWorker.draft", "EAGLEWorker.verify",
        "GroupCoordinator.all_reduce", "CudaGraphRunner.replay", "EAGLEDraftCudaGraphRunner.replay",
        "SchedulerProfilerMixin.start_profile",
    ],
    "0.5.10": [
        "EAGLEWorker.forward_batch_generation", "EAGLEWorkerV2.forward_batch_generation",
        "EagleDraftWorker.draft", "EagleDraftWorker._draft_extend_for_decode", "EAGLEWorkerV2.verify",
        "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", "GroupCoordinator.all_reduce",
        "MultiLayerEagleWorker.forward_batch_generation", "MultiLayerEagleWorker.verify",
        "MultiLayerEagleWorkerV2.forward_batch_generation", "SchedulerProfilerMixin.start_profile",
        "_ProfilerCudart.start",
    ],
    "0.5.17": [
        "EAGLEWorkerV2.forward_batch_generation", "EagleDraftWorker.draft",
        "EagleDraftWorker._draft_extend_for_decode", "EAGLEWorkerV2.verify",
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", "EAGLEWorkerV2.on_verify_complete_cpu",
        "GroupCoordinator.all_reduce", "flashinfer_allreduce_residual_rmsnorm", "EAGLEDraftCudaGraphRunner.execute",
        "EAGLEDraftExtendCudaGraphRunner.execute", "DecodeCudaGraphRunner.execute", "GroupCoordinator.__init__",
        "MultiLayerEagleWorkerV2.forward_batch_generation", "MultiLayerEagleWorkerV2.verify",
        "MultiLayerEagleDraftWorker.draft", "MultiLayerEagleDraftWorker._draft_extend_for_decode",
        "FrozenKVMTPWorkerV2.forward_batch_generation", "FrozenKVMTPDraftWorker.draft",
        "FrozenKVMTPDraftWorker._draft_extend_for_decode", "DFlashWorkerV2.forward_batch_generation",
        "DSparkWorkerV2.forward_batch_generation", "NGRAMWorker.forward_batch_generation",
        "SchedulerProfilerManager._start_profile", "_ProfilerCudart.start",
    ],
    "0.5.23": [
        "EAGLEWorkerV2.forward_batch_generation", "EagleDraftWorker.draft",
        "EagleDraftWorker._draft_extend_for_decode", "EAGLEWorkerV2.verify",
        "EAGLEWorkerV2.on_verify_complete_cpu", "GroupCoordinator.all_reduce",
        "flashinfer_allreduce_residual_rmsnorm", "EAGLEDraftCudaGraphRunner.execute",
        "EAGLEDraftExtendCudaGraphRunner.execute", "DecodeCudaGraphRunner.execute",
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", "UnoWorkerV2.forward_batch_generation",
        "SchedulerProfilerManager._start_profile", "_ProfilerCudart.start",
    ],
}
ABSENT = {
    "0.4.9.post6": ["EAGLEWorker.forward_batch_generation", "EAGLEWorkerV2.verify"],
    "0.5.3": ["EAGLEWorker.forward_batch_speculative_generation", "EAGLEWorkerV2.verify"],
    "0.5.10": ["DecodeCudaGraphRunner.execute", "EAGLEWorkerV2.on_verify_complete_cpu",
               "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"],
    "0.5.17": ["EAGLEWorker.verify", "CudaGraphRunner.replay", "EAGLEDraftCudaGraphRunner.replay",
               "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", "UnoWorkerV2.forward_batch_generation"],
    "0.5.23": ["EAGLEWorker.verify", "CudaGraphRunner.replay"],  # v1 worker removed in 0.5.13
}


def _rows(res, attr):
    return [r for r in res["targets"] if r["target"].split(":", 1)[1] == attr and r["found"]]


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
    assert res["roles"]["profile_start"] and res["will_record"]


SHAPES = {  # (version, target): (shape, {read: where}) as read from the released sources
    ("0.4.9.post6", "EAGLEWorker.forward_batch_speculative_generation"):
        ("method", {"the instance": "argument 0", "the batch (forward mode)": "parameter 'batch' (argument 1)"}),
    ("0.5.10", "EAGLEWorkerV2.forward_batch_generation"):
        ("method", {"the instance": "argument 0",
                    "the batch (forward mode)": "parameter 'model_worker_batch' (argument 1)"}),
    ("0.5.10", "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids"):
        ("method", {"the batch result": "parameter 'result' (argument 1)",
                    "the batch (its requests)": "parameter 'batch' (argument 2)"}),
    ("0.5.17", "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"):
        ("method", {"the batch result": "parameter 'result' (argument 1)",
                    "the batch (its requests)": "parameter 'batch' (argument 2)"}),
    ("0.5.17", "EAGLEWorkerV2.on_verify_complete_cpu"):
        ("method", {"the accept lengths": "parameter 'num_correct_drafts_per_req' (argument 1)"}),
    ("0.5.17", "GroupCoordinator.__init__"): ("method", {"the instance": "argument 0"}),
    ("0.5.17", "_ProfilerCudart.start"): ("method", {}),
    ("0.5.23", "SchedulerBatchResultProcessor._resolve_spec_v2_tokens"):
        ("method", {"the batch result": "parameter 'result' (argument 1)",
                    "the batch (its requests)": "parameter 'batch' (argument 2)"}),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_check_reports_shapes_and_what_is_recorded(version):
    """--check reads each target's shape (method/static/class/async/property) and binds what the
    shim reads exactly as the running shim does; on every release the accept marks are tied to
    their cycle (v1: inside it; v2: cycle=K from the resolved batch result)."""
    buf = io.StringIO()
    check(str(_unpacked(version)), as_json=True, out=buf)
    res = json.loads(buf.getvalue())
    for (v, attr), (shape, reads) in SHAPES.items():
        if v != version:
            continue
        (row,) = _rows(res, attr)
        assert row["shape"] == shape and row["reads"] == reads, row
        assert row["annotatable"]
    for row in res["targets"]:
        if row["found"]:
            assert row["shape"] in ("method", "function", "assigned name"), row  # none static/async/property
    will = "\n".join(res["will_record"])
    assert "decode_cycle: range decode_cycle (payload: cycle number); range prefill for extend batches" in will
    assert "cycle=K" in will
    assert "rank: rank mark" in will and "profile_start: rank and spec_config marks again when profiling starts" in will
    assert "config: spec_config mark (SGLang's speculative configuration)" in will
    assert not any(line.startswith(("draft:", "verify:", "allreduce:", "accept:")) for line in res["will_not_record"])


def test_check_names_what_it_cannot_record(tmp_path):
    """A tree whose targets changed shape: a property verify is left alone, a resolver without a
    result parameter records no accept mark, a cycle without a batch cannot tell prefill apart."""
    spec = tmp_path / "sglang" / "srt" / "speculative"
    spec.mkdir(parents=True)
    (spec / "eagle_worker_v2.py").write_text(textwrap.dedent("""
        class EAGLEWorkerV2:
            @staticmethod
            def forward_batch_generation(*, on_publish=None):
                pass
            @property
            def verify(self):
                return None
        class EagleDraftWorker:
            async def draft(self, batch):
                pass
    """))
    mgr = tmp_path / "sglang" / "srt" / "managers" / "scheduler_components"
    mgr.mkdir(parents=True)
    (mgr / "batch_result_processor.py").write_text(textwrap.dedent("""
        class SchedulerBatchResultProcessor:
            def _resolve_spec_v2_tokens(self, *, batch):
                pass
    """))
    buf = io.StringIO()
    rc = check(str(tmp_path), as_json=True, out=buf)
    res = json.loads(buf.getvalue())
    assert rc == 1 and res["missing_required"] == ["verify", "allreduce"]
    (cyc,) = _rows(res, "EAGLEWorkerV2.forward_batch_generation")
    assert cyc["shape"] == "staticmethod" and cyc["reads"] == {"the instance": None, "the batch (forward mode)": None}
    (ver,) = _rows(res, "EAGLEWorkerV2.verify")
    assert ver["shape"] == "property" and not ver["annotatable"]
    (dr,) = _rows(res, "EagleDraftWorker.draft")
    assert dr["shape"] == "async method" and dr["annotatable"]
    wont = "\n".join(res["will_not_record"])
    assert "prefill: no batch parameter in eagle_worker_v2.EAGLEWorkerV2.forward_batch_generation" in wont
    assert "verify: eagle_worker_v2.EAGLEWorkerV2.verify is a property, left alone" in wont
    assert "accept: batch_result_processor.SchedulerBatchResultProcessor._resolve_spec_v2_tokens has no batch-result" \
           " parameter" in wont


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
    with fake_package(tmp_path, monkeypatch, "fakesgl_", FAKE) as made:
        yield made


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
    assert rec.payloads("decode_cycle") == [1]  # the process's first decode cycle
    assert rec.marks() == [("rank=2 world=8 device=2", None), ("accept_len=5 reqs=3 cycle=1 lens=2,0,3", 5)]
    # v1: the accept mark is emitted inside decode_cycle, after draft_extend
    kinds = [(k, t) for k, t, _, _ in rec.events]
    assert kinds.index(("mark", "accept_len=5 reqs=3 cycle=1 lens=2,0,3")) == len(kinds) - 2
    assert kinds[-1] == ("pop", None) and rec.balanced()
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

    from nvtx_annotate import guard

    ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker")
    w = ew.EAGLEWorker()
    monkeypatch.setattr(guard, "skip", lambda: True)
    monkeypatch.setattr(guard, "skip_exact", lambda: True)
    assert w.forward_batch_generation([1])[0] == "logits"
    assert rec.ranges() == []
    assert [m for m in rec.marks() if m[0].startswith("accept")] == []


WORKERS = {
    "srt/__init__.py": "",
    "srt/speculative/__init__.py": "",
    "srt/distributed/__init__.py": "",
    "srt/distributed/parallel_state.py": """
        class GroupCoordinator:
            def __init__(self, name, rank, world):
                self.unique_name, self.rank_in_group, self.world_size, self.device = name + ":0", rank, world, "cpu"
            def all_reduce(self, x):
                return x
    """,
    "srt/speculative/eagle_worker_v2.py": """
        class EagleDraftWorker:
            def draft(self, batch):
                return "v"
            def _draft_extend_for_decode(self, batch, out):
                return None
        class EAGLEWorkerV2:
            def __init__(self):
                self._draft_worker = EagleDraftWorker()
            def forward_batch_generation(self, batch):
                v = self._draft_worker.draft(batch)
                out = self.verify(batch)
                self._draft_worker._draft_extend_for_decode(batch, out)
                return out
            def verify(self, batch):
                return [batch]
            def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=0):
                return None
        class SubclassWorker(EAGLEWorkerV2):     # overrides verify: not a target
            def verify(self, batch):
                return [batch, batch]
        class NoVerifyWorker(EAGLEWorkerV2):     # verifies inline, like DFlashWorkerV2
            verify = None
            def forward_batch_generation(self, batch):
                return EAGLEWorkerV2.forward_batch_generation.__wrapped__(self, batch) if False else [batch]
    """,
}


def _pkg(tmp_path, monkeypatch, files, stem):
    return write_package(tmp_path, monkeypatch, f"{stem}_" + tmp_path.name.replace("-", "_")[-12:], files)


def test_roles_warning_only_at_a_workers_first_decode_cycle(tmp_path, monkeypatch, capsys):
    """The launcher imports SGLang's distributed and speculative modules but never runs a decode cycle:
    it says nothing (neither at import nor at exit). A worker process says, at its first decode cycle
    and once, which of ITS roles could not be annotated: an override of verify that is not wrapped; a
    worker without a verify method (verifying inline) has no verify role to miss; the all-reduce is
    needed only when the TP group has more than one rank."""
    import importlib

    name = _pkg(tmp_path, monkeypatch, WORKERS, "fakesgl_roles")
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    wrappers.reset_for_tests()
    try:
        shim.install(name)
        ps = importlib.import_module(f"{name}.srt.distributed.parallel_state")
        ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker_v2")
        assert capsys.readouterr().err == ""  # the launcher: imports only
        ps.GroupCoordinator("tp", 0, 1)  # TP 1: no all-reduce to miss
        assert ew.EAGLEWorkerV2().forward_batch_generation("b") == ["b"]
        assert ew.EAGLEWorkerV2().forward_batch_generation("b") == ["b"]
        assert capsys.readouterr().err == ""  # draft, verify, draft_extend, accept all annotated
        assert ew.SubclassWorker().forward_batch_generation("b") == ["b", "b"]
        assert ew.SubclassWorker().forward_batch_generation("b") == ["b", "b"]
        err = capsys.readouterr().err
        assert err.count("nvtx_annotate: SubclassWorker: could not annotate verify (SubclassWorker.verify)") == 1
        assert "allreduce" not in err
        assert ew.NoVerifyWorker().forward_batch_generation("b") == ["b"]
        assert capsys.readouterr().err == ""
        assert shim.worker_roles(ew.NoVerifyWorker()) == {"draft": "annotated", "verify": "absent",
                                                          "draft_extend": "annotated"}
    finally:
        shim.uninstall(name)
        _nvtx.set_backend(prev)
        wrappers.reset_for_tests()


def test_roles_warning_names_a_missing_allreduce_when_tp_is_wider_than_one(tmp_path, monkeypatch, capsys):
    import importlib

    files = dict(WORKERS)
    files["srt/distributed/parallel_state.py"] = files["srt/distributed/parallel_state.py"].replace(
        "def all_reduce", "def renamed_all_reduce")
    name = _pkg(tmp_path, monkeypatch, files, "fakesgl_tp2")
    rec = _nvtx.RecordingBackend()
    prev = _nvtx.set_backend(rec)
    wrappers.reset_for_tests()
    try:
        shim.install(name)
        ps = importlib.import_module(f"{name}.srt.distributed.parallel_state")
        ew = importlib.import_module(f"{name}.srt.speculative.eagle_worker_v2")
        ps.GroupCoordinator("tp", 1, 2)
        ew.EAGLEWorkerV2().forward_batch_generation("b")
        err = capsys.readouterr().err
        assert "EAGLEWorkerV2: could not annotate allreduce in this" in err
        assert rec.marks()[0] == ("rank=1 world=2 device=cpu", None)
    finally:
        shim.uninstall(name)
        _nvtx.set_backend(prev)
        wrappers.reset_for_tests()


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
    wrappers.reset_for_tests()
    try:
        shim.install(name)
        import importlib
        from types import SimpleNamespace

        v2 = importlib.import_module(f"{name}.srt.speculative.eagle_worker_v2")
        mx = importlib.import_module(f"{name}.srt.managers.scheduler_output_processor_mixin")
        assert v2.EAGLEWorkerV2().on_verify_complete_cpu([3, 1], batch_size=2) == 2
        assert mx.SchedulerOutputProcessorMixin()._resolve_spec_overlap_token_ids(
            SimpleNamespace(accept_lens=[4, 1, 2]), None) == []
        tagged = SimpleNamespace(accept_lens=[2, 2], _specprof_nvtx_cycle=17)  # what a decode cycle returned
        mx.SchedulerOutputProcessorMixin()._resolve_spec_overlap_token_ids(tagged, None)
        assert rec.marks() == [("accept_len=4 reqs=2 lens=3,1", 4), ("accept_len=4 reqs=3 lens=3,0,1", 4),
                               ("accept_len=2 reqs=2 cycle=17 lens=1,1", 2)]
        assert rec.ranges() == []
    finally:
        shim.uninstall(name)
        _nvtx.set_backend(prev)
        wrappers.reset_for_tests()


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


def test_graph_capture_counter_is_per_thread_and_caches_no_negative(monkeypatch):
    """The counter hooked onto torch.cuda.CUDAGraph.capture_begin/end makes skip() true exactly
    while a capture is open on THIS thread (another thread keeps its ranges); before torch is
    complete the guard answers False without remembering it (a stand-in torch: CPU builds cannot
    capture)."""
    import threading
    import types

    from nvtx_annotate import guard

    calls, stream = [], {"capturing": False}

    class CUDAGraph:
        def capture_begin(self, pool=None):
            calls.append("begin")

        def capture_end(self):
            calls.append("end")

    monkeypatch.setattr(guard, "_state", {"compiling": None, "cuda": None, "capturing": None})
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())  # half-imported: no cuda yet
    assert guard.skip() is False and guard._state["compiling"] is None
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(graphs=types.SimpleNamespace(CUDAGraph=CUDAGraph),
                                                            _initialized=True, is_current_stream_capturing=lambda: stream["capturing"]),
                                 compiler=types.SimpleNamespace(is_compiling=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert guard.skip() is False and guard._state["compiling"] is not None  # found now
    g = CUDAGraph()
    g.capture_begin()
    seen = {}
    t = threading.Thread(target=lambda: seen.update(other=guard.skip(), other_exact=guard.skip_exact()))
    t.start()
    t.join()
    assert guard.skip() is True and guard.capture_depth() == 1
    assert seen == {"other": False, "other_exact": False}  # the capture is on this thread only
    g.capture_end()
    assert guard.skip() is False and calls == ["begin", "end"]
    stream["capturing"] = True  # a capture torch.cuda.graph did not open
    assert guard.skip() is False and guard.skip_exact() is True
    fake.cuda._initialized = False  # CUDA not initialised: the stream is not even asked
    assert guard.skip_exact() is False
    fake.compiler.is_compiling = lambda: True
    monkeypatch.setattr(guard, "_state", {"compiling": None, "cuda": None, "capturing": None})
    assert guard.skip() is True  # torch.compile tracing


def test_every_target_names_a_known_range_and_kind():
    from nvtx_annotate import protocol
    from nvtx_annotate.targets import KIND_READS

    names = set(nvtx_annotate.RANGE_NAMES)
    assert names == set(protocol.RANGE_NAMES)
    for t in TARGETS:
        assert t.range_name is None or t.range_name in names
        assert t.kind in set(KIND_READS) | {"range", "allreduce_fn", "verify_v1", "profile_start", "idle"}
    assert {t.role for t in TARGETS} >= {"draft", "verify", "allreduce", "accept", "rank", "profile_start"}


# ----------------------------------------------------------------------------- packaging, start-up cost

def test_boot_imports_only_light_stdlib():
    """What the .pth hook costs every Python process started with SPECPROF_NVTX=1: the shim's own
    modules plus light standard-library ones; nothing of typing, dataclasses, logging, ctypes,
    inspect, threading or importlib.abc (those load later, with SGLang and torch, when needed)."""
    code = ("import sys, json; before = set(sys.modules); import nvtx_annotate._boot; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPECPROF_NVTX="1")
    r = subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    new = set(json.loads(r.stdout))
    assert "nvtx_annotate.shim" in new and "nvtx_annotate._nvtx_ctypes" not in new
    assert all(m.startswith("nvtx_annotate") or m.split(".")[0] in sys.stdlib_module_names for m in new), new
    heavy = {"typing", "dataclasses", "logging", "ctypes", "inspect", "threading", "importlib.abc", "ast", "asyncio"}
    assert not new & heavy, new & heavy


def test_wheel_ships_the_pth_hook_and_pip_manages_it(tmp_path):
    """The wheel carries specprof_nvtx.pth at the root of purelib (a build_py step of setup.py, as
    setuptools does for distutils-precedence.pth): pip install puts it into site-packages, where it
    loads the shim only with SPECPROF_NVTX=1, and pip uninstall removes it."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / f, src / f)
    for d in ("analyze", "nvtx_annotate"):
        shutil.copytree(REPO / d, src / d, ignore=shutil.ignore_patterns("__pycache__"))
    assert (REPO / "nvtx_annotate" / "specprof_nvtx.pth").read_text() == PTH_LINE
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path / "whl")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (whl,) = (tmp_path / "whl").glob("specprof-*.whl")
    with zipfile.ZipFile(whl) as z:
        assert z.read("specprof_nvtx.pth").decode() == PTH_LINE
        record = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))).decode()
        assert any(line.startswith("specprof_nvtx.pth,sha256=") for line in record.splitlines())
    venv = tmp_path / "v"
    r = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"cannot create a venv with pip: {r.stderr[-300:]}")
    py = venv / "bin" / "python"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    site_dir = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True).stdout.strip())
    assert (site_dir / "specprof_nvtx.pth").read_text() == PTH_LINE
    probe = "import sys; print('nvtx_annotate.shim' in sys.modules)"
    env = {k: v for k, v in os.environ.items() if k not in ("SPECPROF_NVTX", "PYTHONPATH")}
    off = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    on = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, env=dict(env, SPECPROF_NVTX="1"),
                        cwd=tmp_path)
    assert (off.stdout.strip(), on.stdout.strip()) == ("False", "True"), (off.stderr, on.stderr)
    r = subprocess.run([str(py), "-m", "pip", "uninstall", "-y", "-q", "specprof"], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    assert not (site_dir / "specprof_nvtx.pth").exists()
