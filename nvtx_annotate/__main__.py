"""``python -m nvtx_annotate``: --check, install-pth, uninstall-pth, bench."""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import _nvtx
from .check import find_source_root, resolve_static, sglang_version, summarize
from .targets import ROLES


def check(source=None, package="sglang", as_json=False, out=sys.stdout) -> int:
    root = find_source_root(source, package)
    if root is None:
        where = source or f"the installed Python ({sys.executable})"
        print(f"error: no '{package}' package found in {where}", file=sys.stderr)
        return 2
    rows = resolve_static(root, package)
    version = sglang_version(root, package)
    summary = summarize(rows)
    roles, missing_required = summary["roles"], summary["missing_required"]
    if as_json:
        json.dump({"package": package, "version": version, "root": root, "targets": rows, **summary,
                   "ok": not missing_required}, out, indent=1)
        out.write("\n")
    else:
        print(f"{package} {version or '(version unknown)'} at {root}", file=out)
        for r in ROLES:
            print(f"{r:<26} {'found' if roles[r] else 'MISSING'}", file=out)
            for x in rows:
                if x["role"] != r:
                    continue
                if not x["found"]:
                    print(f"    missing {x['target']}  ({x['why']})", file=out)
                    continue
                reads = "; ".join(f"{k}: {v or 'NOT FOUND'}" for k, v in x["reads"].items())
                names = x["params"]
                params = "" if names is None else "(" + ", ".join(names[:5]) + (", ..." if len(names) > 5 else "") + ")"
                print(f"    found   {x['target']}  [{x['shape']}{params}]" + (f"  reads {reads}" if reads else ""),
                      file=out)
        print("will record:", file=out)
        for line in summary["will_record"]:
            print(f"    {line}", file=out)
        print("will not record:", file=out)
        for line in summary["will_not_record"] or ["(nothing)"]:
            print(f"    {line}", file=out)
        if missing_required:
            print(f"cannot annotate: {', '.join(missing_required)}", file=out)
        else:
            print("ok: draft, verify and allreduce can be annotated", file=out)
    return 1 if missing_required else 0


def bench(n=200_000, backend=None, out=sys.stdout) -> dict:
    """ns per call: the emitter's push+pop pair, a plain method call, and the same method wrapped as
    a range (draft/verify/replays), as a TP all-reduce (per-stream capture check) and as a decode
    cycle (forward-mode read, cycle number, result tag); one accept mark (4 requests, cycle=K); the
    capture guard alone; and, when CUDA is available, ``torch.cuda.is_current_stream_capturing()``.
    Best of 3 runs of ``n`` calls."""
    from . import guard, wrappers
    from .targets import ALLREDUCE_TP, CYCLE, RANGE, Target

    try:  # as in a server process: the capture guard then finds torch and asks it
        import torch
    except ImportError:  # pragma: no cover - torch is optional
        torch = None
    prev = _nvtx.set_backend(_nvtx.make_backend(backend)) if backend is not None else None
    b = _nvtx.get_backend()

    class Mode:
        def is_extend(self):
            return False

    class Result:
        pass

    class Obj:
        unique_name = "tp:0"
        batch = type("Batch", (), {"forward_mode": Mode(), "is_extend_in_batch": False})()

        def f(self, x):
            return x

        def cycle(self, batch):
            return Result()

    def wrapped(attr, kind, name):
        return wrappers.make_wrapper(Obj.__dict__[attr], Target("bench", name, "bench", f"Obj.{attr}", kind),
                                     skip_first=True)

    class Wrapped(Obj):
        f = wrapped("f", RANGE, "bench")
        ar = wrapped("f", ALLREDUCE_TP, "allreduce")
        cycle = wrapped("cycle", CYCLE, "decode_cycle")

    o, w = Obj(), Wrapped()
    batch = Obj.batch
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

    def loop(call):
        def run():
            for i in range(n):
                call(i)
        return run

    def loop_cycle(call):
        def run():
            for _ in range(n):
                call(batch)
        return run

    res = {"backend": b.name, "active": bool(b.active), "n": n, "push_pop_ns": timeit(loop_pp)}
    res["plain_call_ns"] = timeit(loop(o.f))
    res["wrapped_call_ns"] = timeit(loop(w.f))
    res["wrapped_allreduce_ns"] = timeit(loop(w.ar))
    res["plain_cycle_ns"] = timeit(loop_cycle(o.cycle))
    res["wrapped_cycle_ns"] = timeit(loop_cycle(w.cycle))
    res["wrapper_overhead_ns"] = res["wrapped_call_ns"] - res["plain_call_ns"]
    res["allreduce_overhead_ns"] = res["wrapped_allreduce_ns"] - res["plain_call_ns"]
    res["cycle_overhead_ns"] = res["wrapped_cycle_ns"] - res["plain_cycle_ns"]
    lens = [2, 0, 3, 1]
    res["accept_mark_ns"] = timeit(loop(lambda i: wrappers.emit_accept(lens, i)))
    res["guard_skip_ns"] = timeit(loop(lambda i: guard.skip()))
    res["guard_skip_exact_ns"] = timeit(loop(lambda i: guard.skip_exact()))
    res["torch"] = getattr(torch, "__version__", None)
    res["is_current_stream_capturing_ns"] = None
    try:
        if torch is not None and torch.cuda.is_available():
            torch.cuda.init()
            cap = torch.cuda.is_current_stream_capturing
            res["is_current_stream_capturing_ns"] = timeit(loop(lambda i: cap()))
    except Exception:  # pragma: no cover - a broken CUDA setup
        pass
    if prev is not None or backend is not None:
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
