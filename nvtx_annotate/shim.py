"""Wraps SGLang's methods in NVTX ranges, in every process, without editing SGLang.

``install()`` registers a lazy post-import hook (a ``sys.meta_path`` finder) for each module of
the target table: when SGLang imports ``sglang.srt.speculative.eagle_worker`` (in the launcher or
in a spawned TP worker), the module is executed normally and the listed methods are wrapped right
after, before anyone else can bind them.  Modules already imported are patched at once.  The
``.pth`` hook (see ``nvtx_annotate.pth``) and SGLang's plugin entry point both call ``install()``.

A missing target never breaks the server: after the first decode cycle (or at exit) one warning
names the roles that could not be annotated.  While a CUDA graph is being captured or
torch.compile/dynamo is tracing no NVTX call is made (such ranges would appear once, at capture).
"""

from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import logging
import os
import sys
import threading
from typing import Callable, Dict, List, Optional

from . import _nvtx
from .targets import (
    ACCEPT_CPU_ARG,
    ACCEPT_RESOLVE,
    ALLREDUCE_FN,
    ALLREDUCE_TP,
    CYCLE,
    RANGE,
    RANK_INIT,
    REQUIRED_ROLES,
    VERIFY_V1,
    Target,
    by_module,
)

log = logging.getLogger("nvtx_annotate")
ENV_ON = "SPECPROF_NVTX"
ENV_PACKAGE = "SPECPROF_NVTX_PACKAGE"
_WRAPPED = "__specprof_nvtx_wrapped__"


def enabled() -> bool:
    return os.environ.get(ENV_ON, "") not in ("", "0", "false", "False", "no")


# ------------------------------------------------------------------ capture / compile guards

_capture_depth = 0  # CUDA graph captures in progress (torch.cuda.CUDAGraph.capture_begin/end)


def _hook_graph_capture(torch) -> None:
    """Counts captures through torch.cuda.CUDAGraph (what torch.cuda.graph, SGLang's graph
    runners and torch's cudagraph trees use): a global int is far cheaper to read than
    torch.cuda.is_current_stream_capturing() (~1.5 us on an H200 host)."""
    cls = getattr(getattr(getattr(torch, "cuda", None), "graphs", None), "CUDAGraph", None)
    if cls is None or getattr(cls, "__specprof_capture_hook__", False):
        return
    begin, end = cls.capture_begin, cls.capture_end

    def capture_begin(self, *a, **k):
        global _capture_depth
        _capture_depth += 1
        try:
            return begin(self, *a, **k)
        except BaseException:
            _capture_depth -= 1
            raise

    def capture_end(self, *a, **k):
        global _capture_depth
        try:
            return end(self, *a, **k)
        finally:
            _capture_depth = max(0, _capture_depth - 1)

    functools.update_wrapper(capture_begin, begin)
    functools.update_wrapper(capture_end, end)
    cls.capture_begin, cls.capture_end = capture_begin, capture_end
    cls.__specprof_capture_hook__ = True


def _make_capture_check(exact: bool) -> Callable[[], bool]:
    """Returns a function telling whether NVTX must be skipped right now: a CUDA graph is being
    captured or torch.compile/dynamo is tracing.  ``exact`` adds the per-call stream query
    (used for the all-reduce targets, which run inside captured forwards)."""
    state = {"fn": None}

    def check() -> bool:
        fn = state["fn"]
        if fn is None:
            torch = sys.modules.get("torch")
            if torch is None or not hasattr(torch, "cuda"):
                return False  # torch not (fully) imported yet: nothing can be capturing
            try:
                _hook_graph_capture(torch)
            except Exception:  # pragma: no cover - defensive
                pass
            comp = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)
            capt = None
            if exact:
                cuda = torch.cuda
                try:
                    if cuda.is_available():
                        capt = cuda.is_current_stream_capturing
                except Exception:  # pragma: no cover
                    capt = None
            mod = sys.modules[__name__]
            if capt is None:
                def fn():
                    return mod._capture_depth > 0 or comp()
            else:
                def fn():
                    return mod._capture_depth > 0 or comp() or capt()
            state["fn"] = fn
        return fn()

    return check


skip_nvtx = _make_capture_check(exact=False)
skip_nvtx_exact = _make_capture_check(exact=True)


# ------------------------------------------------------------------ per-thread state

class _State(threading.local):
    def __init__(self):
        self.accept: Optional[List[int]] = None
        self.depth = 0


_tls = _State()
_stats = {"cycles": 0, "marks": 0, "rank_marks": 0}


ACCEPT_LENS_MAX_REQS = 64  # per-request lengths are added to the mark up to this batch size


def _accept_mark(lengths) -> None:
    """``accept_len=N reqs=M lens=l1,...,lM``: N = sum of the accepted draft tokens over the M
    requests (what older readers parse), then each request's accepted length in request order
    (only for M <= ACCEPT_LENS_MAX_REQS, to bound the string). Payload: N."""
    try:
        vals = [int(x) for x in lengths]
    except Exception:
        return
    n = sum(vals)
    text = f"accept_len={n} reqs={len(vals)}"
    if 0 < len(vals) <= ACCEPT_LENS_MAX_REQS:
        text += " lens=" + ",".join(map(str, vals))
    _nvtx.mark(text, n)
    _stats["marks"] += 1


def _find_accept(ret):
    """accept_length_per_req_cpu from a v1 verify return value (object or tuple of objects)."""
    v = getattr(ret, "accept_length_per_req_cpu", None)
    if v is not None:
        return v
    if isinstance(ret, (tuple, list)):
        for item in ret:
            v = getattr(item, "accept_length_per_req_cpu", None)
            if v is not None:
                return v
    return None


# ------------------------------------------------------------------ wrappers

def _wrap(fn: Callable, target: Target, package: Optional[str] = None) -> Callable:
    name = target.range_name
    kind = target.kind
    nv = _nvtx
    _shim = sys.modules[__name__]

    exact = kind in (ALLREDUCE_TP, ALLREDUCE_FN)

    def backend():
        """The active backend, or None when nothing records (no profiler) or while a CUDA
        graph is captured / torch.compile traces."""
        b = nv._backend or nv.get_backend()
        if not b.active:
            return None
        if (_shim.skip_nvtx_exact if exact else _shim.skip_nvtx)():
            return None
        return b

    if kind in (RANGE, ALLREDUCE_FN):
        def wrapper(*args, **kwargs):
            b = backend()
            if b is None:
                return fn(*args, **kwargs)
            b.push(name)
            try:
                return fn(*args, **kwargs)
            finally:
                b.pop()

    elif kind == CYCLE:
        def wrapper(*args, **kwargs):
            b = backend()
            if b is None:
                return fn(*args, **kwargs)
            st = _tls
            st.accept = None
            b.push(name)
            try:
                return fn(*args, **kwargs)
            finally:
                acc, st.accept = st.accept, None
                if acc is not None:
                    _accept_mark(acc)
                _stats["cycles"] += 1
                b.pop()
                if _stats["cycles"] == 1:
                    report_missing_once(package)

    elif kind == VERIFY_V1:
        def wrapper(*args, **kwargs):
            b = backend()
            if b is None:
                return fn(*args, **kwargs)
            b.push(name)
            try:
                ret = fn(*args, **kwargs)
            finally:
                b.pop()
            acc = _find_accept(ret)
            if acc is not None:
                _tls.accept = acc
            return ret

    elif kind == ALLREDUCE_TP:
        def wrapper(self, *args, **kwargs):
            uname = getattr(self, "unique_name", None) or getattr(self, "group_name", "")
            b = backend() if str(uname).startswith("tp") else None
            if b is None:
                return fn(self, *args, **kwargs)
            b.push(name)
            try:
                return fn(self, *args, **kwargs)
            finally:
                b.pop()

    elif kind == ACCEPT_RESOLVE:
        def wrapper(self, result, *args, **kwargs):
            ret = fn(self, result, *args, **kwargs)
            acc = getattr(result, "accept_length_per_req_cpu", None)
            if acc is not None:
                _accept_mark(acc)
            return ret

    elif kind == ACCEPT_CPU_ARG:
        def wrapper(self, lengths, *args, **kwargs):
            ret = fn(self, lengths, *args, **kwargs)
            if isinstance(lengths, (list, tuple)):
                _accept_mark(lengths)
            return ret

    elif kind == RANK_INIT:
        def wrapper(self, *args, **kwargs):
            ret = fn(self, *args, **kwargs)
            try:
                emit_rank_mark_for_group(self)
            except Exception:  # never break the server
                log.debug("rank mark failed", exc_info=True)
            return ret

    else:  # pragma: no cover - table is static
        raise ValueError(kind)

    functools.update_wrapper(wrapper, fn)
    setattr(wrapper, _WRAPPED, fn)
    return wrapper


def _device_index(dev) -> str:
    if isinstance(dev, int):
        return str(dev)
    idx = None if isinstance(dev, str) else getattr(dev, "index", None)
    if isinstance(idx, int):
        return str(idx)
    s = str(dev)
    return s.split(":", 1)[1] if ":" in s else s


def emit_rank_mark(rank: int, world: int, device) -> None:
    """The per-process mark ``rank=R world=W device=D`` the analyzer reads."""
    _nvtx.mark(f"rank={int(rank)} world={int(world)} device={_device_index(device)}")
    _stats["rank_marks"] += 1


def emit_rank_mark_for_group(group) -> None:
    uname = str(getattr(group, "unique_name", None) or getattr(group, "group_name", ""))
    if not uname.startswith("tp") or _stats["rank_marks"]:
        return
    emit_rank_mark(group.rank_in_group, group.world_size, getattr(group, "device", "?"))


# ------------------------------------------------------------------ patching

_installed: Dict[str, object] = {}  # package -> finder
_patched: Dict[str, List[Target]] = {}  # full module -> patched targets
_missing_reported = False
_install_lock = threading.RLock()


def _resolve(obj, attr: str):
    parts = attr.split(".")
    owner = obj
    for p in parts[:-1]:
        owner = getattr(owner, p, None)
        if owner is None:
            return None, None
    return owner, parts[-1]


def patch_module(module, targets: List[Target]) -> List[Target]:
    """Wraps the targets present in ``module``; returns those patched."""
    done = []
    for t in targets:
        owner, name = _resolve(module, t.attr)
        if owner is None:
            continue
        if isinstance(owner, type):
            raw = owner.__dict__.get(name)  # only methods the class itself defines
        else:
            raw = getattr(owner, name, None)
        if raw is None or not callable(raw) or getattr(raw, _WRAPPED, None) is not None:
            if raw is not None and getattr(raw, _WRAPPED, None) is not None:
                done.append(t)
            continue
        suffix = "." + t.module
        package = module.__name__[: -len(suffix)] if module.__name__.endswith(suffix) else None
        try:
            setattr(owner, name, _wrap(raw, t, package))
            done.append(t)
        except Exception:  # never break the server
            log.debug("could not wrap %s", t.attr, exc_info=True)
    _patched.setdefault(module.__name__, []).extend(d for d in done if d not in _patched.get(module.__name__, []))
    return done


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, loader, targets: List[Target]):
        self._loader = loader
        self._targets = targets

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            patch_module(module, self._targets)
        except Exception:  # never break the server
            log.debug("patching %s failed", module.__name__, exc_info=True)

    def __getattr__(self, item):  # get_resource_reader, get_source, ...
        return getattr(self._loader, item)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self, modules: Dict[str, List[Target]]):
        self.modules = modules
        self._busy = threading.local()

    def find_spec(self, fullname, path, target=None):
        targets = self.modules.get(fullname)
        if targets is None or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, targets)
        return spec


def install(package: Optional[str] = None) -> bool:
    """Idempotent: hook the package's modules (default ``$SPECPROF_NVTX_PACKAGE`` or ``sglang``)."""
    package = package or os.environ.get(ENV_PACKAGE) or "sglang"
    with _install_lock:
        if package in _installed:
            return False
        modules = by_module(package)
        finder = _PostImportFinder(modules)
        sys.meta_path.insert(0, finder)
        _installed[package] = finder
        for name, targets in modules.items():
            mod = sys.modules.get(name)
            if mod is not None:
                patch_module(mod, targets)
        atexit.register(report_missing_once)
    return True


def uninstall(package: Optional[str] = None) -> None:
    """Removes the import hook and unwraps what was patched (tests)."""
    package = package or os.environ.get(ENV_PACKAGE) or "sglang"
    with _install_lock:
        finder = _installed.pop(package, None)
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
        prefix = package + "."
        for modname in [m for m in _patched if m.startswith(prefix)]:
            mod = sys.modules.get(modname)
            for t in _patched.pop(modname):
                if mod is None:
                    continue
                owner, name = _resolve(mod, t.attr)
                if owner is None:
                    continue
                cur = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
                orig = getattr(cur, _WRAPPED, None)
                if orig is not None:
                    setattr(owner, name, orig)


def patched_roles(package: Optional[str] = None) -> Dict[str, List[str]]:
    package = package or os.environ.get(ENV_PACKAGE) or "sglang"
    out: Dict[str, List[str]] = {}
    from .targets import TARGETS

    for t in TARGETS:
        if any(p.attr == t.attr for p in _patched.get(t.full_module(package), [])):
            out.setdefault(t.role, []).append(t.label)
    return out


def report_missing_once(package: Optional[str] = None) -> Optional[str]:
    """Logs one warning naming the required roles nothing was patched for (if SGLang's EAGLE
    modules were imported at all); returns the message."""
    global _missing_reported
    if _missing_reported:
        return None
    package = package or os.environ.get(ENV_PACKAGE) or "sglang"
    if not any(m.startswith(package + ".") for m in _patched) and not any(
        m.startswith(package + ".srt.speculative") for m in sys.modules
    ):
        return None  # the server never loaded speculative decoding: nothing to say
    _missing_reported = True
    roles = patched_roles(package)
    missing = [r for r in REQUIRED_ROLES if r not in roles]
    if not missing:
        return None
    msg = (
        f"nvtx_annotate: could not annotate {', '.join(missing)} in this {package} "
        f"(run `python -m nvtx_annotate --check`); the server runs unchanged"
    )
    log.warning(msg)
    print(msg, file=sys.stderr)
    return msg


def stats() -> dict:
    return dict(_stats)
