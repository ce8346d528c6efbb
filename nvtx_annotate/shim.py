"""Wraps SGLang's methods in NVTX ranges, in every process, without editing SGLang.

``install()`` registers a lazy post-import hook (a ``sys.meta_path`` finder) for each module of
the target table: when SGLang imports ``sglang.srt.speculative.eagle_worker_v2`` (in the launcher
or in a spawned TP worker), the module is executed normally and the listed attributes are
replaced right after by wrappers of the same kind (``wrappers.py``), before anyone else can bind
them. Modules already imported are patched at once. The ``.pth`` hook (``nvtx_annotate.pth``)
and SGLang's plugin entry point both call ``install()``.

Nothing here can break the server: patching errors are logged and skipped, the wrappers never
change a call's result. The one warning about roles that could not be annotated is printed only
by a process that runs a speculative worker, at that worker's first decode cycle, and only for
the roles that worker has (its draft / verify / draft-extend methods, the all-reduce when the TP
group has more than one rank, the accept marks).
"""

from __future__ import annotations

import os
import sys
from _thread import RLock, _local  # threading's, without importing threading at interpreter start

from . import _nvtx, guard, wrappers  # noqa: F401 (_nvtx: the emitter, for callers)
from .targets import REQUIRED_ROLES, TARGETS, WORKER_ROLES, Target, by_module, method_names
from .wrappers import emit_rank_mark, emit_rank_mark_for_group, is_wrapped, stats  # noqa: F401 (API)

ENV_ON = "SPECPROF_NVTX"
ENV_PACKAGE = "SPECPROF_NVTX_PACKAGE"


def enabled() -> bool:
    return os.environ.get(ENV_ON, "") not in ("", "0", "false", "False", "no")


def _package(package: str | None) -> str:
    return package or os.environ.get(ENV_PACKAGE) or "sglang"


# ------------------------------------------------------------------ patching

_installed: dict[str, object] = {}  # package -> finder
_patched: dict[str, list[Target]] = {}  # full module -> patched targets
_skipped: dict[str, str] = {}  # "module:attr" -> why it was found but left alone
_install_lock = RLock()


def _resolve(obj, attr: str):
    parts = attr.split(".")
    owner = obj
    for p in parts[:-1]:
        owner = getattr(owner, p, None)
        if owner is None:
            return None, None
    return owner, parts[-1]


def patch_module(module, targets: list[Target]) -> list[Target]:
    """Wraps the targets present in ``module``; returns those patched (now or before)."""
    done = []
    for t in targets:
        owner, name = _resolve(module, t.attr)
        if owner is None:
            continue
        in_class = isinstance(owner, type)
        raw = owner.__dict__.get(name) if in_class else getattr(owner, name, None)  # own attributes only
        if raw is None:
            continue
        if is_wrapped(raw):
            done.append(t)
            continue
        try:
            new = wrappers.wrap_attribute(raw, t, in_class)
            if new is None:
                _skipped[f"{module.__name__}:{t.attr}"] = wrappers.describe_kind(raw, in_class)
                wrappers.debug("left %s alone (%s)", t.attr, _skipped[f"{module.__name__}:{t.attr}"])
                continue
            setattr(owner, name, new)
            done.append(t)
        except Exception:  # never break the server
            wrappers.debug("could not wrap %s", t.attr, exc_info=True)
    have = _patched.setdefault(module.__name__, [])
    have.extend(d for d in done if d not in have)
    return done


class _PatchingLoader:
    def __init__(self, loader, targets: list[Target]):
        self._loader = loader
        self._targets = targets

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            guard.install_hook()
            patch_module(module, self._targets)
        except Exception:  # never break the server
            wrappers.debug("patching %s failed", module.__name__, exc_info=True)

    def __getattr__(self, item):  # get_resource_reader, get_source, ...
        return getattr(self._loader, item)


class _PostImportFinder:
    def __init__(self, modules: dict[str, list[Target]]):
        self.modules = modules
        self._busy = _local()

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


def install(package: str | None = None) -> bool:
    """Idempotent: hook the package's modules (default ``$SPECPROF_NVTX_PACKAGE`` or ``sglang``)."""
    package = _package(package)
    with _install_lock:
        if package in _installed:
            return False
        modules = by_module(package)
        finder = _PostImportFinder(modules)
        sys.meta_path.insert(0, finder)
        _installed[package] = finder
        wrappers.on_first_cycle = check_worker
        guard.install_hook()
        _enable_timing()
        for name, targets in modules.items():
            mod = sys.modules.get(name)
            if mod is not None:
                patch_module(mod, targets)
    return True


def _enable_timing() -> None:
    """``SPECPROF_TIMING=1``: the timing mode (nvtx_annotate/live) in this process; never breaks the server."""
    from . import live

    if not live.timing_enabled():
        return
    try:
        live.enable()
    except Exception as exc:
        wrappers.warn_once("live:enable", f"nvtx_annotate: SPECPROF_TIMING: timing mode not enabled "
                                          f"({type(exc).__name__}: {exc})")


def uninstall(package: str | None = None) -> None:
    """Removes the import hook and unwraps what was patched (tests)."""
    package = _package(package)
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
                orig = wrappers.unwrap_attribute(cur)
                if orig is not None:
                    setattr(owner, name, orig)
        for key in [k for k in _skipped if k.startswith(prefix)]:
            del _skipped[key]
        _checked.clear()


def patched_roles(package: str | None = None) -> dict[str, list[str]]:
    """Role -> labels of the targets patched in this process."""
    package = _package(package)
    out: dict[str, list[str]] = {}
    for t in TARGETS:
        if any(p.attr == t.attr for p in _patched.get(t.full_module(package), [])):
            out.setdefault(t.role, []).append(t.label)
    return out


# ------------------------------------------------------------------ per-worker roles check

_checked: set = set()


def _effective(obj, name: str):
    """(defining class, attribute) of ``name`` on ``obj``'s class, looked up in the MRO without
    calling anything (no properties, no __getattr__)."""
    for klass in type(obj).__mro__:
        if name in klass.__dict__:
            return klass, klass.__dict__[name]
    return None, None


def _draft_workers(worker) -> list:
    """The worker and the draft workers it holds (v2: ``_draft_worker``), from instance attributes
    only (properties are not called)."""
    out = [worker]
    d = getattr(worker, "__dict__", {})
    for key in ("_draft_worker", "draft_worker"):
        dw = d.get(key)
        if dw is not None and all(dw is not o for o in out):
            out.append(dw)
    return out


def worker_roles(worker) -> dict[str, str]:
    """Per worker role: ``annotated``, ``absent`` (this worker has no such method: nothing to do)
    or ``missing: Class.method`` (it has one and it is not wrapped)."""
    objs = _draft_workers(worker)
    out = {}
    for role in WORKER_ROLES:
        found = []
        for obj in objs:
            for name in method_names(role):
                klass, raw = _effective(obj, name)
                if klass is not None and klass is not object and (
                        callable(raw) or isinstance(raw, (staticmethod, classmethod))):
                    found.append((klass, name, raw))  # (a class that sets it to None has none)
        if not found:
            out[role] = "absent"
        elif any(is_wrapped(raw) for _, _, raw in found):
            out[role] = "annotated"
        else:
            k, n, _ = found[0]
            out[role] = f"missing: {k.__name__}.{n}"
    return out


def check_worker(worker, package: str | None = None) -> str | None:
    """At a speculative worker's first decode cycle: one warning naming the roles it needs that
    could not be annotated (returns it), nothing when all are there. Once per worker class."""
    cls = type(worker)
    if cls in _checked:
        return None
    _checked.add(cls)
    if package is None:  # the package the worker's class comes from, when the shim hooks it
        top = str(getattr(cls, "__module__", "")).split(".", 1)[0]
        package = top if top in _installed else None
    package = _package(package)
    missing = []
    for role, state in worker_roles(worker).items():
        if state.startswith("missing"):
            missing.append(f"{role} ({state.split(': ', 1)[1]})")
    roles = patched_roles(package)
    world = wrappers.tp_world()
    if "allreduce" in REQUIRED_ROLES and world is not None and world > 1 and "allreduce" not in roles:
        missing.append("allreduce")
    if "accept" not in roles:
        missing.append("accept (tokens per cycle)")
    if not missing:
        return None
    return wrappers.warn_once(
        f"roles:{cls.__module__}.{cls.__qualname__}",
        f"nvtx_annotate: {cls.__name__}: could not annotate {', '.join(missing)} in this {package} "
        f"(run `python -m nvtx_annotate --check`); the server runs unchanged")


def skipped() -> dict[str, str]:
    """Targets found but left alone (property, generator, ...), with what they are."""
    return dict(_skipped)
