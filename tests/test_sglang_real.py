"""The shim inside a real SGLang release (0.5.17, what runs on the H200), no GPU.

The wheel's Python code is unpacked and imported on CPU torch, with the pure-Python / CPU packages
it imports installed into a cache (``pip install --no-deps --target``, pinned) and stubs for the
GPU-only ones (``tests/sglang_real_driver.py``, run in a subprocess). Skips cleanly when the
wheel or its packages cannot be had (no index access).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SPECPROF_SGLANG_CACHE", Path.home() / ".cache" / "specprof" / "sglang"))
VERSION = "0.5.17"
# what sglang 0.5.17's import chain needs on CPU (versions that import it, here, with torch 2.13)
DEPS = [
    "aiohappyeyeballs==2.7.1", "aiohttp==3.14.5", "aiosignal==1.4.0", "annotated-doc==0.0.7",
    "annotated-types==0.8.0", "anyio==4.16.0", "apache-tvm-ffi==0.1.11", "attrs==26.1.0",
    "certifi==2026.10.19.post1", "charset-normalizer==3.5.3", "click==8.5.1", "compressed-tensors==0.20.1",
    "dill==0.4.1", "einops==0.8.2", "fastapi==0.165.0", "frozenlist==1.8.0", "gguf==0.19.0", "h11==0.16.0",
    "hf-xet==1.8.0", "httpcore==1.0.9", "httpx==0.28.1", "httpx2==2.16.2", "huggingface-hub==1.33.0",
    "idna==3.20", "loguru==0.7.3", "markdown-it-py==4.3.0", "mdurl==0.1.2", "msgspec==0.23.0",
    "multidict==7.2.1", "openai==3.57.0", "opentelemetry-api==1.45.2", "orjson==3.13.0",
    "partial-json-parser==0.2.1.1.post7", "propcache==0.5.4", "pybase64==1.5.1", "pydantic==2.14.4",
    "pydantic-core==2.50.5", "pygments==2.21.0", "python-multipart==0.0.34", "regex==2026.11.19",
    "requests==2.34.2", "rich==15.0.0", "safetensors==0.8.0", "sentencepiece==0.2.3", "setproctitle==1.3.8",
    "shellingham==1.5.4", "sniffio==1.3.1", "starlette==1.10.0", "tokenizers==0.22.2", "transformers==5.12.1",
    "typer==0.29.2", "typing-extensions==4.16.0", "typing-inspection==0.4.5", "urllib3==2.8.0",
    "uvicorn==0.54.0", "xgrammar==0.2.9", "yarl==1.25.1",
]


def _pip(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=timeout)


def _source(version: str) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    dest = CACHE / f"src-{version}"
    # tests/test_nvtx_annotate.py unpacks the same wheel into the same folder (and marks it complete)
    if not ((dest / ".complete").exists() and (dest / "sglang" / "_triton_stub.py").exists()):
        wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
        if not wheels:
            r = _pip("download", f"sglang=={version}", "--no-deps", "--only-binary=:all:", "-d", str(CACHE), "-q")
            wheels = sorted(CACHE.glob(f"sglang-{version}-*.whl"))
            if not wheels:
                pytest.skip(f"cannot download sglang=={version}: {r.stderr.strip()[-300:]}")
        with zipfile.ZipFile(wheels[0]) as z:
            for n in z.namelist():
                if n.endswith(".py") and n.startswith("sglang/") or n.endswith(".dist-info/METADATA"):
                    z.extract(n, dest)
        (dest / ".complete").write_text("ok")
    # sglang.kernels.jit looks for them at import; made whoever unpacked the wheel (CI ran
    # test_nvtx_annotate.py first, whose unpack has no such folders, and every import failed)
    for d in ("include", "csrc"):
        (dest / "sglang" / "kernels" / "jit" / d).mkdir(parents=True, exist_ok=True)
    return dest


def _deps() -> Path:
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    dest = CACHE / f"deps-{tag}"
    stamp = dest / ".complete"
    if stamp.exists() and stamp.read_text() == "\n".join(DEPS):
        return dest
    r = _pip("install", "-q", "--no-deps", "--only-binary=:all:", "--target", str(dest), "--upgrade", *DEPS)
    if r.returncode != 0:
        pytest.skip(f"cannot install the packages sglang {VERSION} imports: {r.stderr.strip()[-300:]}")
    stamp.write_text("\n".join(DEPS))
    return dest


def _meta() -> Path:
    """A torchvision dist-info (transformers reads its version; the module itself is a stub)."""
    d = CACHE / "meta" / "torchvision-0.28.0.dist-info"
    d.mkdir(parents=True, exist_ok=True)
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: torchvision\nVersion: 0.28.0\n")
    (d / "top_level.txt").write_text("torchvision\n")
    return d.parent


@pytest.fixture(scope="module")
def real017(tmp_path_factory):
    pytest.importorskip("torch")
    src, deps, meta = _source(VERSION), _deps(), _meta()
    out = tmp_path_factory.mktemp("real") / "out.json"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("SPECPROF_NVTX", None)
    r = subprocess.run([sys.executable, str(REPO / "tests" / "sglang_real_driver.py"), str(src), str(deps),
                        str(meta), str(out)], capture_output=True, text=True, timeout=900, env=env, cwd=REPO)
    assert r.returncode == 0 and out.exists(), r.stderr[-3000:]
    res = json.loads(out.read_text())
    # import_errors says why a module phase 2 drives is missing (CI once failed on a bare KeyError)
    assert res["errors"] == [], (res["errors"], res["import_errors"])
    return res


V2 = "srt.speculative.eagle_worker_v2"


def test_real_0517_import_hook_wraps_every_target_present(real017):
    """Every target that exists in 0.5.17 is wrapped by the post-import hook, its signature and
    kind kept; the subclasses that override the targets included; nothing present is missed."""
    res = real017
    assert res["present_not_wrapped"] == [] and res["skipped"] == {}
    wrapped = set(res["wrapped"])
    for t in (f"{V2}:EAGLEWorkerV2.forward_batch_generation", f"{V2}:EAGLEWorkerV2.verify",
              f"{V2}:EagleDraftWorker.draft", f"{V2}:EagleDraftWorker._draft_extend_for_decode",
              "srt.speculative.multi_layer_eagle_worker_v2:MultiLayerEagleWorkerV2.forward_batch_generation",
              "srt.speculative.multi_layer_eagle_worker_v2:MultiLayerEagleDraftWorker.draft",
              "srt.speculative.frozen_kv_mtp_worker_v2:FrozenKVMTPWorkerV2.forward_batch_generation",
              "srt.speculative.frozen_kv_mtp_worker_v2:FrozenKVMTPDraftWorker._draft_extend_for_decode",
              "srt.speculative.dflash_worker_v2:DFlashWorkerV2.forward_batch_generation",
              "srt.managers.scheduler_components.batch_result_processor:"
              "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
              "srt.distributed.parallel_state:GroupCoordinator.all_reduce",
              "srt.model_executor.runner.decode_cuda_graph_runner:DecodeCudaGraphRunner.execute",
              "srt.managers.scheduler_components.profiler_manager:SchedulerProfilerManager._start_profile",
              "srt.utils.profile_utils:_ProfilerCudart.start"):
        assert t in wrapped, t
    assert set(res["signatures_kept"]) == wrapped
    # what 0.5.17 no longer has is absent, not an error
    assert all(v == "absent in this version" for v in res["import_errors"].values()), res["import_errors"]
    assert f"sglang.{V2}" not in res["import_errors"]


def test_real_0517_forward_batch_generation_emits_cycle_phases_and_prefill(real017):
    """The real EAGLEWorkerV2.forward_batch_generation (decode branch) with stub collaborators:
    decode_cycle (payload = cycle number) > draft > graph_replay_draft, verify > graph_replay_verify,
    draft_extend > graph_replay_draft_extend; the extend branch records `prefill`, not a cycle."""
    ev = real017["events"]
    assert real017["balanced"] is True
    pushes = [(t, v) for k, t, v in ev if k == "push"]
    assert pushes[:3] == [("allreduce", None), ("prefill", None), ("decode_cycle", 41)]
    depth, tree = 0, []
    for k, t, v in ev[real017["events_before_decode"]:]:
        if k == "push":
            tree.append((t, depth))
            depth += 1
        elif k == "pop":
            depth -= 1
    first = tree[:7]
    assert first == [("decode_cycle", 0), ("draft", 1), ("graph_replay_draft", 2), ("verify", 1),
                     ("graph_replay_verify", 2), ("draft_extend", 1), ("graph_replay_draft_extend", 2)]
    assert [v for t, v in pushes if t == "decode_cycle"] == [41, 42]  # numbered per process
    assert real017["cycle_attr"] == 41  # the GenerationBatchResult carries its cycle's number
    assert real017["prefill_next_draft_input"] == "next draft input"  # the real prefill branch ran
    assert real017["calls"][:8] == ["draft_extend prefill", "draft graph", "build verify input", "verify forward",
                                    "verify graph", "publish", "draft_extend", "draft_extend graph"]
    assert real017["stats"]["cycles"] == 2 and real017["stats"]["prefills"] == 1
    assert real017["stats"]["faults"] == 0


def test_real_0517_resolve_spec_v2_tokens_emits_the_accept_mark_of_its_cycle(real017):
    """The real scheduler-side `_resolve_spec_v2_tokens(result, batch)`, run after the cycle's range
    closed: accept_lens [3, 1, 4] (bonus included) -> num_correct_drafts [2, 0, 3] -> the mark
    `accept_len=5 reqs=3 cycle=41 lens=2,0,3`, payload 5; the nested on_verify_complete_cpu adds
    none; a result that no annotated cycle returned gets a mark without cycle=."""
    ev = real017["events"]
    marks = [(t, v) for k, t, v in ev if k == "mark"]
    assert ("accept_len=5 reqs=3 cycle=41 lens=2,0,3", 5) in marks
    assert ("accept_len=5 reqs=2 lens=1,4", 5) in marks
    assert len([m for m in marks if m[0].startswith("accept_len=")]) == 2
    assert real017["num_correct_drafts_per_req_cpu"] == [2, 0, 3]
    assert real017["resolved_tokens"] == [[0, 1, 2], [4], [8, 9, 10, 11]]  # SGLang's own result unchanged
    # the accept mark lies after the cycle's range: only the cycle number ties them
    i_mark = next(i for i, e in enumerate(ev) if e[1] == "accept_len=5 reqs=3 cycle=41 lens=2,0,3")
    i_cycle_end = max(i for i, e in enumerate(ev[:i_mark]) if e[0] == "pop")
    assert i_cycle_end < i_mark


def test_real_0517_accept_mark_leaves_out_requests_finished_before_the_cycle(real017):
    """With the overlap scheduler a cycle also runs for a request the previous result finished;
    SGLang's resolver skips it (no spec_verify_ct, no accepted drafts), and so does the mark: of
    lengths [2, 0, 3] with request 1 finished, `reqs=2 lens=2,3`."""
    k = real017["done_cycle"]
    assert isinstance(k, int)
    assert f"accept_len=5 reqs=2 cycle={k} lens=2,3" in real017["done_marks"]


def test_real_0517_rank_mark_from_group_coordinator_and_again_at_profile_start(real017):
    """A real one-rank GroupCoordinator (gloo on CPU) named `tp` emits `rank=0 world=1 device=cpu`
    and its all_reduce gets a range; the real `_ProfilerCudart.start` emits the mark again at once
    and at the next decode cycle (a cudaProfilerApi capture opens after the first one)."""
    assert real017["group"] == ["tp:0", 0, 1, "cpu"] and real017["allreduce_result"] == [1.0, 1.0]
    ev = real017["events"]
    rank_marks = [i for i, e in enumerate(ev) if e[0] == "mark" and e[1] == "rank=0 world=1 device=cpu"]
    assert len(rank_marks) == 3 and rank_marks[0] == 0
    last_cycle = max(i for i, e in enumerate(ev) if e[0] == "push" and e[1] == "decode_cycle")
    assert rank_marks[1] < rank_marks[2] < last_cycle
