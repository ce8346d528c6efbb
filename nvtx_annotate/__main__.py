"""``python -m nvtx_annotate``: --check, install-pth, uninstall-pth, bench."""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import _nvtx
from .targets import REQUIRED_ROLES, ROLES, find_source_root, resolve_static, sglang_version


def check(source=None, package="sglang", as_json=False, out=sys.stdout) -> int:
    root = find_source_root(source, package)
    if root is None:
        where = source or f"the installed Python ({sys.executable})"
        print(f"error: no '{package}' package found in {where}", file=sys.stderr)
        return 2
    rows = resolve_static(root, package)
    version = sglang_version(root, package)
    roles = {r: any(x["found"] for x in rows if x["role"] == r) for r in ROLES}
    missing_required = [r for r in REQUIRED_ROLES if not roles[r]]
    if as_json:
        json.dump(
            {
                "package": package,
                "version": version,
                "root": root,
                "targets": rows,
                "roles": roles,
                "missing_required": missing_required,
                "ok": not missing_required,
            },
            out,
            indent=1,
        )
        out.write("\n")
    else:
        print(f"{package} {version or '(version unknown)'} at {root}", file=out)
        for r in ROLES:
            print(f"{r:<26} {'found' if roles[r] else 'MISSING'}", file=out)
            for x in rows:
                if x["role"] == r:
                    state = "found  " if x["found"] else "missing"
                    why = "" if x["found"] else f"  ({x['why']})"
                    print(f"    {state} {x['target']}{why}", file=out)
        if missing_required:
            print(f"cannot annotate: {', '.join(missing_required)}", file=out)
        else:
            print("ok: draft, verify and allreduce can be annotated", file=out)
    return 1 if missing_required else 0


def bench(n=200_000, backend=None, out=sys.stdout) -> dict:
    """ns per push+pop pair of the emitter and of a wrapped call vs. a plain call."""
    from .shim import _wrap
    from .targets import RANGE, Target

    if backend is not None:
        prev = _nvtx.set_backend(_nvtx.make_backend(backend))
    b = _nvtx.get_backend()

    def f(x):
        return x

    t = Target("bench", "bench", "bench", "f", RANGE)
    w = _wrap(f, t)
    push, pop = _nvtx.push, _nvtx.pop

    def timeit(fn):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter_ns()
            fn()
            best = min(best, time.perf_counter_ns() - t0)
        return best / n

    def loop_pp():
        for _ in range(n):
            push("bench")
            pop()

    def loop_plain():
        for i in range(n):
            f(i)

    def loop_wrapped():
        for i in range(n):
            w(i)

    res = {
        "backend": b.name,
        "active": bool(b.active),
        "n": n,
        "push_pop_ns": timeit(loop_pp),
        "plain_call_ns": timeit(loop_plain),
        "wrapped_call_ns": timeit(loop_wrapped),
    }
    res["wrapper_overhead_ns"] = res["wrapped_call_ns"] - res["plain_call_ns"]
    if backend is not None:
        _nvtx.set_backend(prev)
    json.dump(res, out)
    out.write("\n")
    return res


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m nvtx_annotate", description=__doc__)
    p.add_argument("--check", action="store_true", help="list every target as found/missing")
    p.add_argument("--source", help="an unpacked SGLang tree (default: the installed sglang)")
    p.add_argument("--package", default="sglang", help="package root (default sglang)")
    p.add_argument("--json", action="store_true", help="--check output as JSON")
    p.add_argument("command", nargs="?", choices=["check", "install-pth", "uninstall-pth", "bench"])
    p.add_argument("--site", help="site-packages directory for install-pth (default: this Python's)")
    p.add_argument("-n", type=int, default=200_000, help="bench iterations")
    p.add_argument("--backend", help="bench backend (default: SPECPROF_NVTX_BACKEND or auto)")
    a = p.parse_args(argv)
    if a.check or a.command == "check":
        return check(a.source, a.package, a.json)
    if a.command == "install-pth":
        from .pth import install_pth

        print(install_pth(a.site))
        return 0
    if a.command == "uninstall-pth":
        from .pth import uninstall_pth

        print(uninstall_pth(a.site) or "not installed")
        return 0
    if a.command == "bench":
        bench(a.n, a.backend)
        return 0
    p.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
