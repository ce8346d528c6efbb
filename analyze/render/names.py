"""Kernel names fit for a table cell or an axis label, and never two kernels under one label.

C++ kernel names run to hundreds of characters (``void at::native::vectorized_elementwise_kernel<
(int)4, at::native::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)``). :func:`short_name`
keeps the function (no return type, template arguments, parameter list, leading namespaces while
too long); :func:`display_names` gives every distinct name a label of at most ``width``
characters, the full name when it fits, and guarantees that different names get different labels:
kernels that shorten alike get the word that tells them apart (the functor in brackets,
``vectorized_elementwise_kernel [FillFunctor]``), names that differ only at the end (``..._TNT`` vs
``..._splitK_TNT``) keep their end (``nvjet_sm90_tst…_splitK_TNT``), and as a last resort a
number. Pure string functions (no matplotlib): the terminal, HTML and figures share them.
"""
from __future__ import annotations

import re
from typing import Callable

__all__ = ["short_name", "display_names", "distinguishing_word", "normalize"]

_ANON = "(anonymous namespace)"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")
_BORING = {"void", "const", "float", "long", "unsigned", "char", "bool", "native", "array", "operator",
           "lambda", "instance", "anonymous", "namespace", "TensorIteratorBase", "BFloat16", "Half", "int64_t"}
ELLIPSIS = "…"


def normalize(name) -> str:
    """Whitespace runs as one space (what every label starts from)."""
    return " ".join(str(name).split())


def _strip_brackets(text: str, open_: str, close: str, keep: Callable[[str], bool] = lambda s: False) -> str:
    """Remove the (nested) ``open_ ... close`` groups of ``text``, except those ``keep`` accepts."""
    out, depth, buf = [], 0, []
    for ch in text:
        if ch == open_:
            if depth == 0:
                buf = []
            depth += 1
        if depth == 0:
            out.append(ch)
        else:
            buf.append(ch)
        if ch == close and depth:
            depth -= 1
            if depth == 0 and keep("".join(buf)):
                out.append("".join(buf))
    return "".join(out)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def short_name(name: str, width: int = 48) -> str:
    """A kernel name fit for an axis label: no return type, template arguments, parameter list or
    leading namespaces (kept while they fit), truncated to ``width`` characters with an ellipsis.

    ``void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)`` ->
    ``at::native::vectorized_elementwise_kernel``; ``[CUDA memcpy]`` stays as it is."""
    s = normalize(name)
    if not s:
        return "?"
    if s.startswith("[") and s.endswith("]"):
        return _cut(s, width)
    s = s.replace(_ANON, "(anon)")
    s = _strip_brackets(s, "<", ">")
    # drop the parameter list: the last top-level (...) group and everything after it
    s = _strip_brackets(s, "(", ")", keep=lambda g: g == "(anon)")
    s = s.replace("(anon)::", "").replace("(anon)", "")
    s = re.sub(r"^(?:void|static|__global__|inline|\s)+\s", "", s).strip()
    s = s.split(" ")[-1] or s  # a remaining return type ("float foo") goes
    parts = [p for p in s.split("::") if p]
    while len(parts) > 1 and len("::".join(parts)) > width:
        parts = parts[1:]
    s = "::".join(parts) if parts else str(name)
    return _cut(s, width)


def distinguishing_word(name: str, others: list[str]) -> str | None:
    """The first identifier of ``name`` (template arguments included) found in none of ``others``."""
    seen = set()
    for o in others:
        seen.update(_WORD.findall(o))
    for w in _WORD.findall(name):
        if w not in seen and w not in _BORING and not re.fullmatch(r"T\d+", w):
            return w
    return None


def _tagged(name: str, word: str, width: int) -> str | None:
    """``short_name [word]`` in ``width`` characters: the word whole while the base keeps 10
    characters, the base shortened first; None when the width leaves no room for both."""
    tag = f" [{_cut(word, max(width - 13, 3))}]"
    if width - len(tag) < 6:
        return None
    return _shorten(name, width - len(tag)) + tag


def _shorten(name: str, width: int) -> str:
    """:func:`short_name` without its cut: leading namespaces dropped while too long, then
    :func:`_fit_plain`."""
    parts = short_name(name, 10 ** 6).split("::")
    while len(parts) > 1 and len("::".join(parts)) > width:
        parts = parts[1:]
    return _fit_plain("::".join(parts), width)


def _fit_plain(text: str, width: int) -> str:
    """``text`` in ``width`` characters; a plain identifier too long keeps its head and its end
    (``nvjet_sm90_tst_64x8…_splitK_NNT``: the variant suffix tells kernels apart), a bracketed
    one is cut at the end."""
    if len(text) <= width:
        return text
    if not any(c in text for c in "<>()[] ") and width >= 12:
        tail = (width - 1) * 2 // 5
        return text[: width - 1 - tail] + ELLIPSIS + text[len(text) - tail:]
    return _cut(text, width)


def _head_tail(name: str, others: list[str], width: int) -> str | None:
    """``head…tail`` keeping the part of ``name`` after its longest common prefix with ``others``
    (names that differ only towards the end), or None when that part does not fit."""
    prefix = 0
    for o in others:
        n = 0
        while n < min(len(name), len(o)) and name[n] == o[n]:
            n += 1
        prefix = max(prefix, n)
    # the tail must start at or before the first differing character
    tail_len = len(name) - max(prefix - 2, 0)
    head_len = width - 1 - tail_len
    if head_len < 4:
        return None
    return name[:head_len] + ELLIPSIS + name[len(name) - tail_len:]


def display_names(names, width: int) -> list[str]:
    """One label of at most ``width`` characters per entry of ``names`` (a repeated name gets the
    same label): the name itself when it fits, else :func:`short_name`; labels shared by different
    names are told apart (the distinguishing word, then the differing end, then ``#k``), so two
    different names never print the same."""
    width = max(int(width), 12)
    uniq = list(dict.fromkeys(normalize(n) for n in names))
    label = {n: (n if len(n) <= width else _shorten(n, width)) for n in uniq}

    def twins() -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for n in uniq:
            groups.setdefault(label[n], []).append(n)
        return {lbl: members for lbl, members in groups.items() if len(members) > 1}

    for attempt in (0, 1):
        groups = twins()
        if not groups:
            break
        for members in groups.values():
            for n in members:
                others = [m for m in members if m != n]
                if attempt == 0:
                    word = distinguishing_word(n, others)
                    new = (_tagged(n, word, width) if word else None) or _head_tail(n, others, width)
                else:
                    new = _head_tail(n, others, width)
                if new is not None:
                    label[n] = new
    for members in twins().values():        # the last resort: numbered, still within the width
        for k, n in enumerate(members[1:], start=2):
            suffix = f" #{k}"
            label[n] = _cut(label[n], width - len(suffix)) + suffix
    return [label[normalize(n)] for n in names]
