"""Which argument of a target holds what the shim reads, found once from its signature.

A target's signature is reduced to a neutral list of ``(name, kind)`` parameters, from the live
function (``inspect.signature``, at patch time) or from its source (``ast``, for ``--check``), so
that the running shim and ``--check`` bind exactly alike. A read (:class:`Read`) names candidate
parameter names and a fallback position (counted after ``self``/``cls``); the binding
(:class:`Bound`) is what a wrapper uses at call time: ``kwargs[name]`` if given by keyword, else
``args[index]``.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Sequence

POS_ONLY, POS_OR_KW, VAR_POS, KW_ONLY, VAR_KW = "pos_only", "pos_or_kw", "var_pos", "kw_only", "var_kw"
Param = tuple[str, str]  # (name, kind)

MISSING = object()
"""What a getter returns when the call did not pass the argument."""


class Read(namedtuple("Read", "what names position")):
    """One value a wrapper reads from its call: ``what`` (for messages), candidate parameter names
    (tried first, in order) and the fallback position after self/cls (None: names only)."""

    __slots__ = ()


class Bound(namedtuple("Bound", "name index")):
    """Where a read is found in a call: ``index`` into ``args`` (None: keyword only) and ``name``
    in ``kwargs`` (None: positional only)."""

    __slots__ = ()

    def describe(self) -> str:
        if self.index is None:
            return f"keyword argument {self.name!r}"
        return f"parameter {self.name!r} (argument {self.index})" if self.name else f"argument {self.index}"

    def getter(self):
        """``get(args, kwargs)`` -> the value, or MISSING."""
        name, index = self.name, self.index
        if index is None:
            def get(args, kwargs):
                return kwargs.get(name, MISSING)
        elif name is None:
            def get(args, kwargs):
                return args[index] if len(args) > index else MISSING
        else:
            def get(args, kwargs):
                if len(args) > index:
                    return args[index]
                return kwargs.get(name, MISSING)
        return get


def bind(params: Sequence[Param], read: Read, skip_first: bool) -> Bound | None:
    """The binding of ``read`` in a callable with ``params``; ``skip_first``: the first parameter
    is self/cls (filled by the method binding, not a value the shim reads). None: not found."""
    positional = [p for p in params if p[1] in (POS_ONLY, POS_OR_KW)]
    for cand in read.names:
        for i, (name, kind) in enumerate(params):
            if name != cand:
                continue
            if kind == KW_ONLY:
                return Bound(name, None)
            if kind in (POS_ONLY, POS_OR_KW):
                idx = positional.index((name, kind))
                if skip_first and idx == 0:
                    break  # the self slot
                return Bound(name if kind == POS_OR_KW else None, idx)
    if read.position is None:
        return None
    idx = read.position + (1 if skip_first else 0)
    if idx < len(positional):
        name, kind = positional[idx]
        return Bound(name if kind == POS_OR_KW else None, idx)
    if any(k == VAR_POS for _, k in params):
        return Bound(None, idx)  # *args: the value is at that position when given
    return None


def self_bound(params: Sequence[Param], skip_first: bool) -> Bound | None:
    """The binding of the instance (``self``) of a method, None for functions/staticmethods."""
    if not skip_first:
        return None
    positional = [p for p in params if p[1] in (POS_ONLY, POS_OR_KW)]
    if positional:
        return Bound(None, 0)
    if any(k == VAR_POS for _, k in params):
        return Bound(None, 0)
    return None


def params_of(fn) -> list[Param] | None:
    """Neutral parameter list of a live callable (None when it has no readable signature)."""
    import inspect

    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: POS_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD: POS_OR_KW,
        inspect.Parameter.VAR_POSITIONAL: VAR_POS,
        inspect.Parameter.KEYWORD_ONLY: KW_ONLY,
        inspect.Parameter.VAR_KEYWORD: VAR_KW,
    }
    try:
        sig = inspect.signature(fn)  # follows __wrapped__: the parameters callers pass
    except (TypeError, ValueError):
        return None
    return [(p.name, kinds[p.kind]) for p in sig.parameters.values()]


def params_of_ast(node) -> list[Param]:
    """Neutral parameter list of an ``ast.FunctionDef`` / ``ast.AsyncFunctionDef``."""
    a = node.args
    out: list[Param] = [(x.arg, POS_ONLY) for x in a.posonlyargs]
    out += [(x.arg, POS_OR_KW) for x in a.args]
    if a.vararg is not None:
        out.append((a.vararg.arg, VAR_POS))
    out += [(x.arg, KW_ONLY) for x in a.kwonlyargs]
    if a.kwarg is not None:
        out.append((a.kwarg.arg, VAR_KW))
    return out
