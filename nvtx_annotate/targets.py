"""What the shim annotates, per SGLang version (read from the released wheels 0.4.6 ... 0.5.23).

Every target is (role, module relative to the package root, attribute path, kind).  A role is
annotated when at least one of its targets exists in the installed SGLang; the others are
simply absent in that version.  ``--check`` resolves the same table against the installed
package or an unpacked source tree (by parsing, without importing SGLang).

| role | range | where (versions) |
|---|---|---|
| decode_cycle | ``decode_cycle`` | v1 ``EAGLEWorker.forward_batch_speculative_generation`` (0.4.x), ``.forward_batch_generation`` (0.5.0-0.5.12); v2 ``EAGLEWorkerV2.forward_batch_generation`` (0.5.6+) |
| draft | ``draft`` | ``EAGLEWorker.draft`` (to 0.5.12), ``EagleDraftWorker.draft`` (0.5.6+) |
| draft_extend | ``draft_extend`` | ``EAGLEWorker.forward_draft_extend_after_decode``, ``EagleDraftWorker._draft_extend_for_decode`` |
| verify | ``verify`` | ``EAGLEWorker.verify``, ``EAGLEWorkerV2.verify`` |
| allreduce | ``allreduce`` | ``GroupCoordinator.all_reduce`` (TP group only), ``flashinfer_allreduce_residual_rmsnorm`` |
| graph_replay_* | ``graph_replay_draft`` / ``_draft_extend`` / ``_verify`` | ``EAGLEDraftCudaGraphRunner.replay`` / ``.execute`` (0.5.2x), ``EAGLEDraftExtendCudaGraphRunner.replay`` / ``.execute``, ``CudaGraphRunner.replay`` (<= 0.5.1x), ``DecodeCudaGraphRunner.execute`` (0.5.2x) |
| accept | mark ``accept_len=N reqs=M`` | v1: return value of ``EAGLEWorker.verify``; v2: ``Scheduler._resolve_spec_overlap_token_ids`` (<= 0.5.1x), ``EAGLEWorkerV2.on_verify_complete_cpu`` (0.5.2x) |
| rank | mark ``rank=R world=W device=D`` | ``GroupCoordinator.__init__`` of the TP group |
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

# kinds
RANGE = "range"  # push/pop around the call
CYCLE = "cycle"  # range; emits the accept mark recorded by a nested v1 verify
VERIFY_V1 = "verify_v1"  # range; reads accept_length_per_req_cpu from the return value
ALLREDUCE_TP = "allreduce_tp"  # range only for the TP group, never while capturing
ALLREDUCE_FN = "allreduce_fn"  # range, never while capturing
ACCEPT_RESOLVE = "accept_resolve"  # no range; mark from result.accept_length_per_req_cpu
ACCEPT_CPU_ARG = "accept_cpu_arg"  # no range; mark from the first argument (list of ints)
RANK_INIT = "rank_init"  # no range; rank mark after GroupCoordinator.__init__ of the TP group


@dataclass(frozen=True)
class Target:
    role: str
    range_name: Optional[str]
    module: str  # relative to the package root, e.g. "srt.speculative.eagle_worker"
    attr: str  # "Class.method" or "function"
    kind: str = RANGE

    def full_module(self, package: str) -> str:
        return f"{package}.{self.module}"

    @property
    def label(self) -> str:
        return f"{self.module.rsplit('.', 1)[-1]}.{self.attr}"


TARGETS: List[Target] = [
    # decode cycle
    Target("decode_cycle", "decode_cycle", "srt.speculative.eagle_worker", "EAGLEWorker.forward_batch_generation", CYCLE),
    Target("decode_cycle", "decode_cycle", "srt.speculative.eagle_worker", "EAGLEWorker.forward_batch_speculative_generation", CYCLE),
    Target("decode_cycle", "decode_cycle", "srt.speculative.eagle_worker_v2", "EAGLEWorkerV2.forward_batch_generation", CYCLE),
    # draft
    Target("draft", "draft", "srt.speculative.eagle_worker", "EAGLEWorker.draft"),
    Target("draft", "draft", "srt.speculative.eagle_worker_v2", "EagleDraftWorker.draft"),
    # draft extend
    Target("draft_extend", "draft_extend", "srt.speculative.eagle_worker", "EAGLEWorker.forward_draft_extend_after_decode"),
    Target("draft_extend", "draft_extend", "srt.speculative.eagle_worker_v2", "EagleDraftWorker._draft_extend_for_decode"),
    # verify
    Target("verify", "verify", "srt.speculative.eagle_worker", "EAGLEWorker.verify", VERIFY_V1),
    Target("verify", "verify", "srt.speculative.eagle_worker_v2", "EAGLEWorkerV2.verify"),
    # allreduce
    Target("allreduce", "allreduce", "srt.distributed.parallel_state", "GroupCoordinator.all_reduce", ALLREDUCE_TP),
    Target("allreduce", "allreduce", "srt.layers.flashinfer_comm_fusion", "flashinfer_allreduce_residual_rmsnorm", ALLREDUCE_FN),
    # CUDA graph replays
    Target("graph_replay_draft", "graph_replay_draft", "srt.speculative.eagle_draft_cuda_graph_runner", "EAGLEDraftCudaGraphRunner.replay"),
    Target("graph_replay_draft", "graph_replay_draft", "srt.speculative.eagle_draft_cuda_graph_runner", "EAGLEDraftCudaGraphRunner.execute"),
    Target("graph_replay_draft_extend", "graph_replay_draft_extend", "srt.speculative.eagle_draft_extend_cuda_graph_runner", "EAGLEDraftExtendCudaGraphRunner.replay"),
    Target("graph_replay_draft_extend", "graph_replay_draft_extend", "srt.speculative.eagle_draft_extend_cuda_graph_runner", "EAGLEDraftExtendCudaGraphRunner.execute"),
    Target("graph_replay_verify", "graph_replay_verify", "srt.model_executor.cuda_graph_runner", "CudaGraphRunner.replay"),
    Target("graph_replay_verify", "graph_replay_verify", "srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner.execute"),
    # accepted tokens per cycle
    Target("accept", None, "srt.speculative.eagle_worker", "EAGLEWorker.verify", VERIFY_V1),
    Target("accept", None, "srt.managers.scheduler_output_processor_mixin", "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids", ACCEPT_RESOLVE),
    Target("accept", None, "srt.speculative.eagle_worker_v2", "EAGLEWorkerV2.on_verify_complete_cpu", ACCEPT_CPU_ARG),
    # rank
    Target("rank", None, "srt.distributed.parallel_state", "GroupCoordinator.__init__", RANK_INIT),
]

ROLES = [
    "decode_cycle", "draft", "draft_extend", "verify", "allreduce",
    "graph_replay_draft", "graph_replay_draft_extend", "graph_replay_verify", "accept", "rank",
]
REQUIRED_ROLES = ("draft", "verify", "allreduce")


def patch_targets() -> List[Target]:
    """Targets to patch, without duplicates (the v1 verify appears for two roles)."""
    seen, out = set(), []
    for t in TARGETS:
        key = (t.module, t.attr)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def by_module(package: str) -> Dict[str, List[Target]]:
    out: Dict[str, List[Target]] = {}
    for t in patch_targets():
        out.setdefault(t.full_module(package), []).append(t)
    return out


# ---------------------------------------------------------------- static resolution (--check)

def _module_file(root: str, package: str, module: str) -> Optional[str]:
    base = os.path.join(root, package, *module.split("."))
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def _defs_in(path: str) -> Dict[str, set]:
    """{'': top-level function names, 'Class': method names} of a Python file."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    out: Dict[str, set] = {"": set()}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[""].add(node.name)
        elif isinstance(node, ast.ClassDef):
            out[node.name] = {
                n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            # `name = something` at module level (aliases, wrapped functions)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[""].add(t.id)
    return out


def find_source_root(source: Optional[str], package: str = "sglang") -> Optional[str]:
    """Directory that contains ``<package>/``: an unpacked tree, a wheel unpack, or the
    installed package (when ``source`` is None)."""
    if source is None:
        import importlib.util

        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            return None
        return os.path.dirname(list(spec.submodule_search_locations)[0])
    source = os.path.abspath(source)
    for cand in (source, os.path.join(source, "python")):  # repo checkout keeps it in python/
        if os.path.isdir(os.path.join(cand, package)):
            return cand
    if os.path.basename(source) == package:
        return os.path.dirname(source)
    return None


def resolve_static(root: str, package: str = "sglang") -> List[dict]:
    """For every target: found or not, with the file it was looked up in."""
    cache: Dict[str, Optional[Dict[str, set]]] = {}
    rows = []
    for t in TARGETS:
        path = _module_file(root, package, t.module)
        found = False
        why = ""
        if path is None:
            why = "module not found"
        else:
            if path not in cache:
                try:
                    cache[path] = _defs_in(path)
                except SyntaxError as e:  # pragma: no cover - real releases parse
                    cache[path] = None
                    why = f"unparsable: {e}"
            defs = cache[path]
            if defs is not None:
                if "." in t.attr:
                    cls, meth = t.attr.split(".", 1)
                    if cls not in defs:
                        why = f"class {cls} not found"
                    elif meth not in defs[cls]:
                        why = f"{cls}.{meth} not defined"
                    else:
                        found = True
                else:
                    found = t.attr in defs[""]
                    why = "" if found else f"{t.attr} not defined"
        rows.append(
            {
                "role": t.role,
                "range": t.range_name,
                "target": f"{t.full_module(package)}:{t.attr}",
                "kind": t.kind,
                "found": found,
                "why": why,
                "file": os.path.relpath(path, root) if path else None,
            }
        )
    return rows


def sglang_version(root: str, package: str = "sglang") -> Optional[str]:
    """The version of the SGLang tree under ``root`` (read, never executed): ``_version.py``,
    a ``*.dist-info/METADATA`` beside the package, or a top-level constant in ``version.py``."""
    import glob

    def const_version(path):
        try:
            with open(path, "rb") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError):
            return None
        for node in tree.body:  # top level only: skips fallbacks inside try/except
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
                    return str(node.value.value)
        return None

    v = const_version(os.path.join(root, package, "_version.py"))
    if v:
        return v
    for meta in sorted(glob.glob(os.path.join(root, f"{package}-*.dist-info", "METADATA"))):
        with open(meta, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return const_version(os.path.join(root, package, "version.py"))
