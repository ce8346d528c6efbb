"""Benchmark: analyze-trace vs a bare SQLite read vs ``nsys stats`` on generated 8-rank exports.

    python -m bench.run --sizes 1e6,1e7 [--ranks 8] [--data DIR] [--nsys-max 1e7] [--budget 1GB]

For every size (total kernels over all ranks; NVTX ranges, runtime calls, memcpy/memset and CUDA
graph node kernels in the proportions of fixtures/synth.py's scale mode) it generates the export
once (kept in --data), then times, one after the other (never two at once), each in a fresh process
measured with ``/usr/bin/time -v`` (wall time and peak RSS of the process):

* ``analyze-trace FILE -q``: the whole analysis, end to end (process start, imports, read, map,
  reduce);
* ``analyze-trace FILE -q --memory-budget BUDGET``;
* bare read (ADBC): the very SELECTs analyze-trace issues, fetched into Arrow and dropped
  (``bench/bare_read.py``): the floor any Python reader pays;
* bare scan (sqlite3 CLI): ``SELECT sum(col)...`` over the same columns: no row leaves SQLite;
* ``nsys stats -r nvtxgpuproj`` (nsys 2022.4's name of ``nvtx_gpu_proj_sum``) on the same trace
  written in nsys 2022.4's schema (the 2022.4 binary does not know newer exports). Sizes above
  --nsys-max are not run (estimated from the largest run size, linearly, and marked so).

Writes bench/results.json, bench/results.md (the table) and bench/scaling.png (cost vs size).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
ANALYZE = str(Path(PY).with_name("analyze-trace"))
NSYS = shutil.which("nsys") or "/usr/bin/nsys"


def timed(cmd: list[str], timeout: float | None = None, env=None) -> dict:
    """Run ``cmd`` under /usr/bin/time -v: wall seconds, peak RSS (MiB), return code."""
    t0 = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return {"cmd": " ".join(cmd), "wall_s": round(wall, 3), "peak_mib": round(int(m.group(1)) / 1024, 1) if m else None,
            "rc": proc.returncode, "stdout_tail": proc.stdout[-400:], "stderr_tail": proc.stderr[-600:]}


def generate(n: int, ranks: int, data: Path, schema: str) -> Path:
    d = data / f"k{n}_{schema}"
    f = d / "report.sqlite"
    if f.exists() and (d / "truth.json").exists():
        return f
    cmd = [PY, "-m", "fixtures.synth", "--ranks", str(ranks), "--kernels", str(n), "--graph", "node",
           "--schema", schema, "-o", str(d)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    print(f"  generated {f} ({f.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return f


def sqlite_scan(path: Path) -> dict:
    """The sqlite3 CLI summing every column the analysis reads: no row leaves SQLite."""
    q = ("SELECT total(globalPid), total(deviceId), total(streamId), total(correlationId), total(graphNodeId), "
         "total(demangledName), total(start), total(end) FROM CUPTI_ACTIVITY_KIND_KERNEL; "
         "SELECT total(globalTid), total(correlationId), total(nameId), total(start), total(end) "
         "FROM CUPTI_ACTIVITY_KIND_RUNTIME; "
         "SELECT total(start), total(end), total(eventType), count(text), total(textId), total(globalTid), "
         "total(endGlobalTid), total(domainId) FROM NVTX_EVENTS;")
    return timed(["sqlite3", "-readonly", str(path), q])


def nsys_stats(path: Path, timeout: float) -> dict:
    out = path.parent / "nsys_out"
    out.mkdir(exist_ok=True)
    r = timed([NSYS, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "--force-overwrite", "true",
               "-o", str(out / "proj"), str(path)], timeout=timeout)
    files = sorted(out.glob("proj*.csv"))
    r["rows"] = max(0, sum(1 for _ in open(files[0])) - 1) if files else None
    return r


def fmt_s(x):
    return "–" if x is None else (f"{x:.1f} s" if x < 100 else f"{x:.0f} s")


def write_outputs(rows: list[dict], budget: str) -> None:
    (HERE / "results.json").write_text(json.dumps(rows, indent=1))
    lines = ["| kernels (8 ranks) | file | analyze-trace | peak | bare read (ADBC) | sqlite3 scan | "
             f"analyze / bare read | nsys stats nvtxgpuproj | nsys / analyze | --memory-budget {budget} | peak |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a, b, s, n, c = r["analyze"], r["bare_read"], r["sqlite_scan"], r.get("nsys"), r.get("chunked")
        nsys_s = n["wall_s"] if n else None
        est = " (est.)" if n and n.get("estimated") else ""
        nsys_ratio = f"{nsys_s / a['wall_s']:.0f}x" if nsys_s else "–"
        chunk = (fmt_s(c["wall_s"]), f"{c['peak_mib'] / 1024:.2f} GiB") if c else ("–", "–")
        lines.append(f"| {r['kernels'] / 1e6:g}M | {r['file_mib']:.0f} MiB | {fmt_s(a['wall_s'])} | "
                     f"{a['peak_mib'] / 1024:.2f} GiB | {fmt_s(b['wall_s'])} | {fmt_s(s['wall_s'])} | "
                     f"{a['wall_s'] / b['wall_s']:.1f}x | {fmt_s(nsys_s)}{est} | {nsys_ratio} | "
                     f"{chunk[0]} | {chunk[1]} |")
    cpu = os.cpu_count()
    lines.append("")
    lines.append(f"{cpu} CPU cores; wall time and peak RSS of each command in a fresh process (`/usr/bin/time -v`), "
                 "generated by `python -m bench.run`.")
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    xs = [r["kernels"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    series = [("analyze-trace", lambda r: r["analyze"]["wall_s"], "o-"),
              ("bare read (ADBC)", lambda r: r["bare_read"]["wall_s"], "s--"),
              ("sqlite3 scan", lambda r: r["sqlite_scan"]["wall_s"], "^:"),
              ("nsys stats nvtxgpuproj", lambda r: r["nsys"]["wall_s"] if r.get("nsys") and not r["nsys"].get("estimated") else None, "x-")]
    for label, get, style in series:
        pts = [(x, get(r)) for x, r in zip(xs, rows) if get(r) is not None]
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    est = [(x, r["nsys"]["wall_s"]) for x, r in zip(xs, rows) if r.get("nsys") and r["nsys"].get("estimated")]
    if est:
        ax.plot(*zip(*est), "x", color="grey", label="nsys (estimated)")
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("kernels (8 ranks)"), ax.set_ylabel("wall time (s)"), ax.set_title("time")
    ax.legend(fontsize=8)
    ax2.plot(xs, [r["analyze"]["peak_mib"] / 1024 for r in rows], "o-", label="analyze-trace")
    ch = [(x, r["chunked"]["peak_mib"] / 1024) for x, r in zip(xs, rows) if r.get("chunked")]
    if ch:
        ax2.plot(*zip(*ch), "s--", label=f"--memory-budget {budget}")
        from analyze.cli import parse_size
        ax2.axhline(parse_size(budget) / 2**30, color="grey", linestyle=":", linewidth=1,
                    label=f"the budget ({budget})")
    ax2.set_xscale("log"), ax2.set_xlabel("kernels (8 ranks)"), ax2.set_ylabel("peak RSS (GiB)")
    ax2.set_title("memory"), ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "scaling.png", dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="total kernels, comma separated (e.g. 1e6,1e7,3e7)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--data", default=str(ROOT / ".work" / "bench"), help="where generated exports are kept")
    ap.add_argument("--nsys-max", type=float, default=1e7, help="largest size nsys stats is run on")
    ap.add_argument("--nsys-timeout", type=float, default=1800)
    ap.add_argument("--budget", default="1GB")
    ap.add_argument("--no-nsys", action="store_true")
    ap.add_argument("--reuse-nsys", action="store_true",
                    help="take the nsys stats measurements of the same sizes from the previous bench/results.json "
                         "instead of running nsys (it takes minutes per 20k kernels)")
    ap.add_argument("--replot", action="store_true",
                    help="rewrite results.md and scaling.png from bench/results.json (no run)")
    a = ap.parse_args(argv)
    if a.replot:
        write_outputs(json.loads((HERE / "results.json").read_text()), a.budget)
        print((HERE / "results.md").read_text())
        return 0
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    sizes = [int(float(s)) for s in a.sizes.split(",")]
    rows = []
    for n in sizes:
        print(f"{n:,} kernels over {a.ranks} ranks", flush=True)
        f = generate(n, a.ranks, data, "2025.3")
        row = {"kernels": n, "ranks": a.ranks, "file": str(f), "file_mib": f.stat().st_size / 2**20}
        # warm the page cache once so that every contender reads from memory
        subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
        row["bare_read"] = timed([PY, str(HERE / "bare_read.py"), str(f)])
        row["sqlite_scan"] = sqlite_scan(f)
        row["analyze"] = timed([ANALYZE, str(f), "-q"])
        row["chunked"] = timed([ANALYZE, str(f), "-q", "--memory-budget", a.budget])
        for k in ("bare_read", "sqlite_scan", "analyze", "chunked"):
            print(f"  {k:12s} {row[k]['wall_s']:8.1f} s  peak {row[k]['peak_mib']:8.0f} MiB  rc={row[k]['rc']}", flush=True)
        if not a.no_nsys and n <= a.nsys_max and Path(NSYS).exists():
            f22 = generate(n, a.ranks, data, "2022.4")
            subprocess.run(["cat", str(f22)], stdout=subprocess.DEVNULL, check=True)
            row["nsys"] = nsys_stats(f22, a.nsys_timeout)
            row["nsys"]["file"] = str(f22)
            print(f"  nsys stats   {row['nsys']['wall_s']:8.1f} s  peak {row['nsys']['peak_mib']:8.0f} MiB  "
                  f"rc={row['nsys']['rc']} rows={row['nsys']['rows']}", flush=True)
        rows.append(row)
    if a.reuse_nsys and (HERE / "results.json").exists():
        previous = {r["kernels"]: r.get("nsys") for r in json.loads((HERE / "results.json").read_text())}
        for r in rows:
            old = previous.get(r["kernels"])
            if not r.get("nsys") and old and not old.get("estimated") and old.get("rc") == 0:
                r["nsys"] = dict(old, reused=True)
    measured = [r for r in rows if r.get("nsys") and r["nsys"].get("rc") == 0]
    if measured:
        ref = max(measured, key=lambda r: r["kernels"])
        for r in rows:
            if not r.get("nsys"):
                r["nsys"] = {"wall_s": ref["nsys"]["wall_s"] * r["kernels"] / ref["kernels"], "estimated": True,
                             "from_kernels": ref["kernels"]}
    write_outputs(rows, a.budget)
    print((HERE / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
