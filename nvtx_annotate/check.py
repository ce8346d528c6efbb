"""``--check``: the target table against real SGLang sources, read (parsed), never imported.

For every target: found or not, its shape (method, staticmethod, classmethod, async, property,
generator), where the values the shim reads sit in its signature (bound exactly as the running
shim binds them, ``binding.py``), and so what it will and will not record on that version.
"""

from __future__ import annotations

import ast
import glob
import os
from typing import Dict, List, Optional

from . import protocol as P
from .binding import bind, params_of_ast, self_bound
from .targets import (
    ACCEPT_CPU_ARG,
    ACCEPT_RESOLVE,
    ALLREDUCE_FN,
    ALLREDUCE_TP,
    CONFIG_INIT,
    CYCLE,
    PROFILE_START,
    RANGE,
    RANK_INIT,
    REQUIRED_ROLES,
    ROLES,
    TARGETS,
    VERIFY_V1,
    Target,
)

UNWRAPPABLE = ("property", "generator function")


def _module_file(root: str, package: str, module: str) -> Optional[str]:
    base = os.path.join(root, package, *module.split("."))
    for cand in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(cand):
            return cand
    return None


def _decorator_names(node) -> List[str]:
    out = []
    for d in node.decorator_list:
        e = d.func if isinstance(d, ast.Call) else d
        if isinstance(e, ast.Name):
            out.append(e.id)
        elif isinstance(e, ast.Attribute):
            out.append(e.attr)
    return out


def _yields(node) -> bool:
    """A ``yield`` in the function's own body (not in nested functions or lambdas)."""
    stack = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False


def _shape(node, in_class: bool) -> str:
    decos = _decorator_names(node)
    is_async = isinstance(node, ast.AsyncFunctionDef)
    if any(d in ("property", "cached_property", "setter", "getter", "deleter") for d in decos):
        return "property"
    if _yields(node):
        return "generator function"
    prefix = "async " if is_async else ""
    if "staticmethod" in decos:
        return prefix + "staticmethod"
    if "classmethod" in decos:
        return prefix + "classmethod"
    if in_class:
        return prefix + "method"
    return prefix + "function"


def _defs_in(path: str) -> Dict[str, Dict[str, object]]:
    """{'': top-level functions/assignments, 'Class': methods} of a Python file (last one wins,
    like the class body)."""
    with open(path, "rb") as f:
        tree = ast.parse(f.read(), filename=path)
    out: Dict[str, Dict[str, object]] = {"": {}}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[""][node.name] = node
        elif isinstance(node, ast.ClassDef):
            out[node.name] = {n.name: n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    out[""][t.id] = node  # an alias or a wrapped function: shape unknown
    return out


def _records(t: Target, shape: str, reads: Dict[str, Optional[str]]) -> tuple:
    """(what it records, what it will not) for a found target."""
    if shape in UNWRAPPABLE:
        return [], [f"{t.role}: {t.label} is a {shape}, left alone"]
    bound = {k: v is not None for k, v in reads.items()}
    rec, nope = [], []
    if t.kind in (RANGE, ALLREDUCE_FN):
        rec.append(f"range {t.range_name}")
    elif t.kind == ALLREDUCE_TP:
        rec.append(f"range {t.range_name} (TP group only)" if bound.get("the instance")
                   else f"range {t.range_name} (every group: the group cannot be read)")
    elif t.kind == CYCLE:
        rec.append(f"range {P.DECODE_CYCLE} (payload: cycle number)")
        if bound.get("the batch (forward mode)"):
            rec.append(f"range {P.PREFILL} for extend batches")
        else:
            nope.append(f"{P.PREFILL}: no batch parameter in {t.label}, prefill batches count as decode cycles")
    elif t.kind == VERIFY_V1:
        rec.append(f"range {t.range_name or P.VERIFY}" if t.role == "verify" else
                   "accept mark with cycle=K inside the cycle (from the returned accept_length_per_req_cpu)")
    elif t.kind == ACCEPT_RESOLVE:
        if bound.get("the batch result"):
            rec.append("accept mark with cycle=K (after the cycle, from the resolved batch result)")
        else:
            nope.append(f"accept: {t.label} has no batch-result parameter")
    elif t.kind == ACCEPT_CPU_ARG:
        if bound.get("the accept lengths"):
            rec.append("accept mark without cycle (only when no resolver wraps the call)")
        else:
            nope.append(f"accept: {t.label} has no accept-lengths parameter")
    elif t.kind == RANK_INIT:
        if bound.get("the instance"):
            rec.append("rank mark")
        else:
            nope.append(f"rank: {t.label} has no instance")
    elif t.kind == CONFIG_INIT:
        if bound.get("the instance"):
            rec.append("spec_config mark (SGLang's speculative configuration)")
        else:
            nope.append(f"config: {t.label} has no instance")
    elif t.kind == PROFILE_START:
        rec.append("rank and spec_config marks again when profiling starts")
    return rec, nope


def resolve_static(root: str, package: str = "sglang") -> List[dict]:
    """For every target: found or not, the file, its shape, the reads and what it records."""
    cache: Dict[str, Optional[Dict[str, Dict[str, object]]]] = {}
    rows = []
    for t in TARGETS:
        path = _module_file(root, package, t.module)
        node, in_class, why = None, False, ""
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
                        node, in_class = defs[cls][meth], True
                elif t.attr in defs[""]:
                    node = defs[""][t.attr]
                else:
                    why = f"{t.attr} not defined"
        row = {"role": t.role, "range": t.range_name, "target": f"{t.full_module(package)}:{t.attr}",
               "kind": t.kind, "found": node is not None, "why": why,
               "file": os.path.relpath(path, root) if path else None,
               "shape": None, "params": None, "reads": {}, "records": [], "not_recorded": [], "annotatable": False}
        if node is not None:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                shape = _shape(node, in_class)
                params = params_of_ast(node)
                skip_first = in_class and "staticmethod" not in shape
                for read in t.reads:
                    if read.position is None and not read.names:
                        b = self_bound(params, skip_first)
                    else:
                        b = bind(params, read, skip_first)
                    row["reads"][read.what] = b.describe() if b is not None else None
                row["params"] = [p[0] for p in params]
            else:
                shape = "assigned name"
            row["shape"] = shape
            row["records"], row["not_recorded"] = _records(t, shape, row["reads"])
            row["annotatable"] = bool(row["records"])
        rows.append(row)
    return rows


def summarize(rows: List[dict]) -> dict:
    """Roles (annotatable or not), and what the shim will and will not record on this tree."""
    roles = {r: any(x["annotatable"] for x in rows if x["role"] == r) for r in ROLES}
    will, wont = [], []
    for r in ROLES:
        recs = [s for x in rows if x["role"] == r for s in x["records"]]
        if recs:
            will.append(f"{r}: " + "; ".join(dict.fromkeys(recs)))
        else:
            why = [s for x in rows if x["role"] == r for s in x["not_recorded"]]
            wont.append(f"{r}: " + ("; ".join(why) if why else "no target in this version"))
    for x in rows:  # found but degraded (e.g. no prefill split) while the role is annotatable
        for s in x["not_recorded"]:
            if roles.get(x["role"]) and not any(s in w for w in wont):
                wont.append(s)
    if not any("cycle=K" in s for x in rows for s in x["records"]) and roles.get("accept"):
        wont.append("accept: marks carry no cycle number (matched by containment in the cycle range)")
    missing_required = [r for r in REQUIRED_ROLES if not roles[r]]
    return {"roles": roles, "will_record": will, "will_not_record": wont, "missing_required": missing_required}


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


def sglang_version(root: str, package: str = "sglang") -> Optional[str]:
    """The version of the SGLang tree under ``root`` (read, never executed): ``_version.py``,
    a ``*.dist-info/METADATA`` beside the package, or a top-level constant in ``version.py``."""

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
