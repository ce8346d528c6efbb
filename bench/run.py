"""Benchmark: analyze-trace against nsys 2025.3's own stats reports and the bare reads, one file at a time.

    python -m bench.run [--sizes 1e6,1e7] [--files synth,real,sglang] [--real-sizes 1e6] [--sglang-sizes 1e6,1e7]
                        [--nsys-scripts DIR] [--repeat 3]

Files (kept in --data, made once): ``synth``: fixtures/synth.py's scale mode (8 ranks in one
report, CUDA graph node traces, NVTX/runtime rows in its proportions, activity tables in start
order); ``real``: the bundled real H200 trace (4 processes, eager) as 8 processes tiled in time
(bench/tile_real.py); ``sglang``: the real SGLang 0.5.17 server trace (fixtures/real/sglang_server:
EAGLE-3, CUDA graphs, one process) copied to 8 processes and tiled the same way. For every file, one command after the other (never two at once), each in a
fresh process under ``/usr/bin/time`` (wall, user + system CPU, peak RSS), the file in the page
cache:

* ``analyze-trace FILE`` (the terminal report written to a file): the whole analysis end to end;
  ``analyze-trace FILE -q --json OUT`` (what profile-trace tells its user to run next); and
  ``analyze-trace FILE -q --memory-budget BUDGET``;
* the bare reads of the columns analyze-trace reads (bench/bare_read.py: its very statements into
  Arrow, dropped): ADBC and connectorx (when installed: ``pip install .[bench]``) and
  analyze-trace's own pages.py, on one thread and on two;
* the sqlite3 CLI summing the same columns (no row leaves SQLite; a reference, not a read);
* nsys 2025.3's ``nvtx_gpu_proj_sum`` and ``nvtx_kern_sum`` scripts, run as nsys runs them (its
  Python modules and bundled libsqlite) when a copy is found (``--nsys-scripts DIR`` or
  ``$SPECPROF_NSYS_SCRIPTS``: the folder holding ``reports/``, ``python/lib`` and
  ``libsqlite3.so.0``); skipped otherwise;
* nsys 2022.4's ``nsys stats -r nvtxgpuproj`` (when an nsys 2022.4 is on PATH) on the same trace
  written in the 2022.4 schema (synth files only: it cannot read newer exports).

Everything is measured, nothing extrapolated: a command still running after --timeout (30 min) is
stopped and reported as "> 30 min"; once a command has been stopped at one size it is not started on
a larger one (reported "> 30 min, not run": the same statements on more rows). Writes
bench/results.json, bench/results.md, bench/scaling.png and docs/performance.md's table (between its
``bench:begin``/``bench:end`` marks).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
ANALYZE = str(Path(PY).with_name("analyze-trace"))
NSYS = shutil.which("nsys")
TIMEOUT_S = 1800.0

# what the two targets of issue 19 compare (keys of a file's measurements)
ANALYZE_KEY = "analyze"
NSYS_PROJ_KEY = "nsys25_proj"


# -------------------------------------------------------------------------------------------------
# running and timing one command
# -------------------------------------------------------------------------------------------------

def timed(cmd: list[str], *, timeout: float | None = None, env: dict | None = None, stdout=None,
          cwd: Path | None = None) -> dict:
    """Run ``cmd`` under ``/usr/bin/time``: wall seconds, user and system CPU seconds, peak RSS
    (MiB), return code. Past ``timeout`` the whole process group is killed and ``timed_out`` set."""
    with tempfile.NamedTemporaryFile("r", suffix=".time", delete=False) as tf:
        tpath = tf.name
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(["/usr/bin/time", "-o", tpath, "-f", "%e %U %S %M", *cmd], stdout=out,
                            stderr=subprocess.PIPE, env=env, cwd=cwd or ROOT, start_new_session=True)
    timed_out = False
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        timed_out = True
    wall = time.perf_counter() - t0
    if stdout:
        out.close()
    fields = Path(tpath).read_text().split()[-4:] if Path(tpath).exists() else []
    Path(tpath).unlink(missing_ok=True)
    res = {"cmd": " ".join(cmd), "wall_s": round(wall, 3), "rc": proc.returncode, "timed_out": timed_out,
           "stderr_tail": err.decode(errors="replace")[-600:]}
    if len(fields) == 4 and not timed_out:
        try:
            _, user, sys_, rss = map(float, fields)
            res.update(user_s=user, sys_s=sys_, cpu_s=round(user + sys_, 2), peak_mib=round(rss / 1024, 1))
        except ValueError:
            pass
    return res


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall time (its own CPU and peak), with every wall time listed."""
    ok = [r for r in runs if r["rc"] == 0 and not r["timed_out"]] or runs
    ok = sorted(ok, key=lambda r: r["wall_s"])
    pick = dict(ok[(len(ok) - 1) // 2])
    pick["walls_s"] = [r["wall_s"] for r in runs]
    return pick


# -------------------------------------------------------------------------------------------------
# the machine and the tools
# -------------------------------------------------------------------------------------------------

def machine() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        m = re.search(r"MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text())
        mem = int(m.group(1)) * 1024 if m else None
    except OSError:
        pass
    import sqlite3
    return {"cpu": model or platform.processor(), "cores": os.cpu_count(), "mem_bytes": mem,
            "os": platform.platform(), "python": platform.python_version(), "sqlite": sqlite3.sqlite_version}


def describe_machine(m: dict) -> str:
    mem = f", {m['mem_bytes'] / 2**30:.0f} GiB" if m.get("mem_bytes") else ""
    return f"{m['cpu']}, {m['cores']} cores{mem}, Python {m['python']}"


def nsys_scripts_dir(arg: str | None) -> Path | None:
    """nsys 2025.x's stats scripts: --nsys-scripts DIR, else $SPECPROF_NSYS_SCRIPTS; None when absent."""
    d = arg or os.environ.get("SPECPROF_NSYS_SCRIPTS")
    if not d:
        return None
    d = Path(d)
    if not (d / "reports" / "nvtx_gpu_proj_sum.py").exists() or not (d / "python" / "lib").is_dir():
        print(f"  --nsys-scripts {d}: no reports/nvtx_gpu_proj_sum.py and python/lib there: skipped", flush=True)
        return None
    return d


def nsys_scripts_version(d: Path) -> str:
    v = d / "VERSION"
    if v.exists():
        m = re.search(r"(\d{4}\.\d+\.\d+(\.\d+)?)", v.read_text())
        if m:
            return m.group(1)
    return "2025.x"


def nsys_binary_version() -> str | None:
    if not NSYS:
        return None
    try:
        out = subprocess.run([NSYS, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d{4}\.\d+\.\d+)", out)
    return m.group(1) if m else None


def bare_backends() -> list[str]:
    """The bare-read contenders: ADBC and connectorx where installed (``pip install .[bench]``; no
    reader of analyze-trace's since issue 42, they stay the reference the speed bar is stated
    against), and analyze-trace's own pages.py."""
    return [b for b in ("adbc", "connectorx") if have_module({"adbc": "adbc_driver_sqlite"}.get(b, b))] + ["pages"]


def have_module(name: str) -> bool:
    return subprocess.run([PY, "-c", f"import {name}"], capture_output=True).returncode == 0


# -------------------------------------------------------------------------------------------------
# the files
# -------------------------------------------------------------------------------------------------

def synth_file(n: int, ranks: int, data: Path, schema: str) -> Path:
    d = data / f"synth_k{n}_{schema}"
    f = d / "report.sqlite"
    if f.exists() and (d / "truth.json").exists():
        return f
    cmd = [PY, "-m", "fixtures.synth", "--ranks", str(ranks), "--kernels", str(n), "--graph", "node",
           "--schema", schema, "-o", str(d)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    print(f"  generated {f} ({f.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return f


# the file kinds' names in the tables and the plot
SGLANG_SOURCE = ROOT / "fixtures" / "real" / "sglang_server.sqlite"
KIND_LABELS = {"synth": "synthetic", "real": "real H200 eager, tiled",
               "sglang": "real SGLang 0.5.17 EAGLE-3 server x 8, tiled"}
PLOT_LABELS = {"synth": "synthetic files", "real": "real H200 trace, tiled", "sglang": "real SGLang trace, tiled"}
PLOT_STYLES = {"synth": "-", "real": "--", "sglang": "-."}


def tiled_source(kind: str) -> Path:
    """The real export a tiled file of ``kind`` is built from (``real``: the bundled demo trace;
    ``sglang``: the SGLang server fixture, unpacked from its .xz on first use)."""
    from bench import tile_real
    if kind == "real":
        return tile_real.default_source()
    from analyze.demo import unpack_xz
    return Path(unpack_xz(str(SGLANG_SOURCE) + ".xz", str(SGLANG_SOURCE)))


def real_file(n: int, data: Path, kind: str = "real") -> Path:
    from bench import tile_real
    f = data / f"{kind}_k{n}" / "report.sqlite"
    if f.exists():
        return f
    t0 = time.perf_counter()
    tile_real.build(tiled_source(kind), f, kernels=n)
    print(f"  built {f} ({f.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
    return f


def count_rows(path: Path) -> dict:
    import sqlite3
    uri = path.resolve().as_uri() + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    out = {}
    try:
        for key, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("calls", "CUPTI_ACTIVITY_KIND_RUNTIME"),
                           ("nvtx", "NVTX_EVENTS"), ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY"),
                           ("memset", "CUPTI_ACTIVITY_KIND_MEMSET")):
            try:
                out[key] = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            except sqlite3.Error:
                out[key] = 0
        out["processes"] = conn.execute("SELECT count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    finally:
        conn.close()
    return out


# -------------------------------------------------------------------------------------------------
# the contenders
# -------------------------------------------------------------------------------------------------

SCAN_SQL = ("SELECT total(globalPid), total(deviceId), total(streamId), total(correlationId), total(graphNodeId), "
            "total(demangledName), total(start), total(end) FROM CUPTI_ACTIVITY_KIND_KERNEL; "
            "SELECT total(globalTid), total(correlationId), total(nameId), total(start), total(end) "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME; "
            "SELECT total(start), total(end), total(eventType), count(text), total(textId), total(globalTid), "
            "total(endGlobalTid), total(domainId), total(int64Value) FROM NVTX_EVENTS;")


def compile_python(dirs: list[Path]) -> list[str]:
    """Byte-compile every Python file under ``dirs`` beside its source (``__pycache__``), with the
    interpreter that runs them, as ``pip install`` leaves a package: where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on the benchmark machine) or for an editable install,
    every run would otherwise compile its modules again (0.07 s of analyze-trace's 2.2 s on the real
    1M file). The same for both tools: analyze-trace's packages and nsys' report scripts and Python
    modules (a copy outside the repository). A folder that cannot be compiled (read-only, a syntax
    error) is left out and said so; its modules then compile at every run. (Not into a
    ``PYTHONPYCACHEPREFIX``: with one set, every module, NumPy's and pandas' too, is looked for
    there, and compiled at every run when it is not.) Returns the folders compiled."""
    done = []
    for d in dirs:
        if not d.is_dir():
            continue
        r = subprocess.run([PY, "-m", "compileall", "-q", "-j", "0", str(d)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if r.returncode == 0:
            done.append(str(d))
        else:
            print(f"  byte-compiling {d} failed (rc {r.returncode}): its modules compile at every run", flush=True)
    return done


def own_packages() -> list[Path]:
    """Where the analyze and nvtx_annotate packages this interpreter imports live."""
    import analyze
    import nvtx_annotate

    return [Path(analyze.__file__).parent, Path(nvtx_annotate.__file__).parent]


def nsys_env(d: Path) -> dict:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(d) + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PYTHONPATH"] = f"{d / 'python' / 'lib'}:{d / 'reports'}"
    return env


def contenders(f: Path, out: Path, a, scripts: Path | None, backends: list[str], f22: Path | None,
               nsys22: bool = False) -> list[dict]:
    """(key, label, command, stdout file, env, repeat, is_read) for one file, in the order they run."""
    stmts = out / "statements.json"
    items = []
    for backend in backends:
        for th in (1, 2):
            items.append(dict(key=f"bare_{backend}_{th}", label=f"bare read, {backend} ({th} thread{'s' * (th > 1)})",
                              cmd=[PY, str(HERE / "bare_read.py"), "read", "--backend", backend, "--threads", str(th),
                                   str(stmts), str(f)], repeat=a.repeat, read=True))
    items.append(dict(key="sqlite_scan", label="sqlite3 CLI scan (no rows out)",
                      cmd=["sqlite3", "-readonly", str(f), SCAN_SQL], repeat=a.repeat))
    items.append(dict(key=ANALYZE_KEY, label="analyze-trace", cmd=[ANALYZE, str(f)], stdout=out / "analyze.txt",
                      repeat=a.repeat))
    items.append(dict(key="analyze_json", label="analyze-trace -q --json (as profile-trace suggests)",
                      cmd=[ANALYZE, str(f), "-q", "--json", str(out / "analyze.json")], repeat=a.repeat))
    items.append(dict(key="analyze_budget", label=f"analyze-trace --memory-budget {a.budget}",
                      cmd=[ANALYZE, str(f), "-q", "--memory-budget", a.budget], repeat=a.repeat))
    if scripts is not None:
        ver = nsys_scripts_version(scripts)
        for key, report in ((NSYS_PROJ_KEY, "nvtx_gpu_proj_sum"), ("nsys25_kern", "nvtx_kern_sum")):
            items.append(dict(key=key, label=f"nsys {ver} {report}",
                              cmd=[PY, str(scripts / "reports" / f"{report}.py"), str(f)],
                              stdout=out / f"{report}.csv", env=nsys_env(scripts), repeat=1, timeout=a.timeout))
    if f22 is not None or nsys22:
        ver = nsys_binary_version() or "2022.4"
        items.append(dict(key="nsys22_proj", label=f"nsys {ver} stats -r nvtxgpuproj (2022.4 schema file)",
                          cmd=[NSYS, "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "--force-overwrite", "true",
                               "-o", str(out / "nsys22_proj"), str(f22 or "")], repeat=1, timeout=a.timeout,
                          file=str(f22 or "")))
    return items


def run_file(kind: str, n: int, f: Path, a, scripts, backends, f22, stopped: set, only: set | None,
             row: dict | None = None, skip: set = frozenset()) -> dict:
    """Run the contenders on one file (those in ``only`` when given, none in ``skip``) into ``row``."""
    out = f.parent / "bench_out"
    out.mkdir(exist_ok=True)
    if row is None:
        subprocess.run([PY, str(HERE / "bare_read.py"), "record", str(f), str(out / "statements.json")],
                       check=True, cwd=ROOT)
        row = {"file_kind": kind, "target_kernels": n, "file": str(f), "file_mib": round(f.stat().st_size / 2**20, 1),
               "rows": count_rows(f), "runs": {}}
    for c in contenders(f, out, a, scripts, backends, f22, nsys22=(kind, "nsys22_proj") in stopped):
        key = c["key"]
        if (only and key not in only) or key in skip:
            continue
        if (kind, key) in stopped:
            row["runs"][key] = {"label": c["label"], "not_run": True, "timed_out": True, "wall_s": None,
                                "why": f"stopped at {limit(a.timeout)[2:]} on a smaller file"}
            print(f"  {c['label']:52s} {limit(a.timeout)} (not run: stopped on a smaller file)", flush=True)
            continue
        for p in [f, f22] if c.get("file") else [f]:      # every contender reads from the page cache
            subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)
        runs = [timed(c["cmd"], timeout=c.get("timeout"), env=c.get("env"), stdout=c.get("stdout"))
                for _ in range(c["repeat"])]
        r = median_run(runs)
        r["label"] = c["label"]
        r["read"] = bool(c.get("read"))
        if c.get("file"):
            r["file"] = c["file"]
        row["runs"][key] = r
        if r["timed_out"]:
            stopped.add((kind, key))
            print(f"  {c['label']:52s} {limit(a.timeout)} (stopped)", flush=True)
        else:
            print(f"  {c['label']:52s} {r['wall_s']:8.2f} s wall {r.get('cpu_s', 0):8.2f} s CPU "
                  f"{r.get('peak_mib', 0):8.0f} MiB  rc={r['rc']}  walls={r['walls_s']}", flush=True)
    return row


# -------------------------------------------------------------------------------------------------
# the tables, the plot, the README
# -------------------------------------------------------------------------------------------------

def fastest_read(row: dict) -> tuple[str | None, dict | None]:
    reads = [(k, r) for k, r in row["runs"].items() if r.get("read") and r["rc"] == 0 and not r["timed_out"]]
    if not reads:
        return None, None
    return min(reads, key=lambda kr: kr[1]["wall_s"])


def ratios(row: dict) -> dict:
    a = row["runs"].get(ANALYZE_KEY)
    out = {}
    if not a or a["rc"] != 0:
        return out
    _, b = fastest_read(row)
    if b:
        out["analyze_over_read"] = a["wall_s"] / b["wall_s"]
    p = row["runs"].get(NSYS_PROJ_KEY)
    if p and p.get("wall_s") and p["rc"] == 0 and not p["timed_out"]:
        out["nsys_proj_over_analyze"] = p["wall_s"] / a["wall_s"]
        out["nsys_proj_over_analyze_cpu"] = p["cpu_s"] / a["cpu_s"] if a.get("cpu_s") else None
    elif p and p.get("timed_out"):
        out["nsys_proj_over_analyze_min"] = TIMEOUT_S / a["wall_s"]
    return out


def limit(timeout: float) -> str:
    return f"> {timeout / 60:.0f} min" if timeout >= 60 else f"> {timeout:.0f} s"


def fmt_s(r: dict | None, timeout: float) -> str:
    if not r:
        return "–"
    if r.get("timed_out"):
        return limit(timeout) + (" (not run)" if r.get("not_run") else "")
    if r["rc"] != 0:
        return f"failed (rc {r['rc']})"
    x = r["wall_s"]
    return f"{x:.2f} s" if x < 10 else (f"{x:.1f} s" if x < 100 else f"{x:.0f} s")


def gib(r: dict | None) -> str:
    return f"{r['peak_mib'] / 1024:.2f} GiB" if r and r.get("peak_mib") else "–"


def file_label(row: dict) -> str:
    k = row["rows"]["kernels"]
    name = KIND_LABELS.get(row["file_kind"], row["file_kind"])
    return f"{name}, {k / 1e6:.2g}M kernels" if k >= 100_000 else f"{name}, {k / 1e3:.0f}k kernels"


def markdown(results: dict) -> str:
    rows, timeout = results["rows"], results["timeout_s"]
    lines = [f"Machine: {describe_machine(results['machine'])}. Generated by `{results['command']}` on "
             f"{results['date']}; every command in a fresh process under `/usr/bin/time`, one after the other, "
             f"the file in the page cache; median of {results['repeat']} runs (nsys: one run)"
             + ("; both tools' Python byte-compiled beforehand, as `pip install` leaves it" if results.get("compiled")
                else "") + ".", ""]
    lines += ["| file (8 processes) | size | analyze-trace | fastest bare read | analyze / read (target <= 1.5x) | "
              f"{results.get('nsys_proj_label', 'nsys nvtx_gpu_proj_sum')} | nsys / analyze (target >= 15x) | "
              "analyze peak | --memory-budget peak |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        a = row["runs"].get(ANALYZE_KEY)
        _, b = fastest_read(row)
        rt = ratios(row)
        p = row["runs"].get(NSYS_PROJ_KEY)
        ch = row["runs"].get("analyze_budget")
        read = f"{fmt_s(b, timeout)} ({b['label'].replace('bare read, ', '')})" if b else "–"
        over_read = f"{rt['analyze_over_read']:.2f}x" if "analyze_over_read" in rt else "–"
        cpu_ratio = f" ({rt['nsys_proj_over_analyze_cpu']:.1f}x in CPU time)" if rt.get("nsys_proj_over_analyze_cpu") else ""
        nsys_ratio = (f"{rt['nsys_proj_over_analyze']:.1f}x{cpu_ratio}" if "nsys_proj_over_analyze" in rt else
                      f"> {rt['nsys_proj_over_analyze_min']:.0f}x" if "nsys_proj_over_analyze_min" in rt else "–")
        lines.append(f"| {file_label(row)} | {row['file_mib']:.0f} MiB | {fmt_s(a, timeout)} | {read} | {over_read} | "
                     f"{fmt_s(p, timeout)} | {nsys_ratio} | {gib(a)} | {gib(ch)} |")
    lines += ["", "Every command (wall / CPU = user + system / peak RSS):", "",
              "| file | command | wall | CPU | peak | vs analyze-trace (wall) |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        a = row["runs"].get(ANALYZE_KEY)
        for key, r in row["runs"].items():
            cpu = f"{r['cpu_s']:.1f} s" if r.get("cpu_s") is not None else "–"
            peak = gib(r)
            rel = (f"{r['wall_s'] / a['wall_s']:.2f}x" if a and a["rc"] == 0 and r.get("wall_s") and not r["timed_out"]
                   and r["rc"] == 0 else ("> " + f"{timeout / a['wall_s']:.0f}x" if a and r.get("timed_out") else "–"))
            lines.append(f"| {file_label(row)} | {r['label']} | {fmt_s(r, timeout)} | {cpu} | {peak} | {rel} |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        return
    fig = Figure(figsize=(13, 4.6))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
    styles = PLOT_STYLES
    colors: dict = {}          # one colour per command, the file kind shown by the line style
    palette = matplotlib.colormaps["tab20"].colors
    for kind in sorted({r["file_kind"] for r in results["rows"]}):
        rows = sorted([r for r in results["rows"] if r["file_kind"] == kind], key=lambda r: r["rows"]["kernels"])
        keys = []
        for r in rows:
            keys += [k for k in r["runs"] if k not in keys]
        for key in keys:
            pts = [(r["rows"]["kernels"], r["runs"][key]["wall_s"]) for r in rows
                   if key in r["runs"] and r["runs"][key].get("wall_s") and not r["runs"][key]["timed_out"]
                   and r["runs"][key]["rc"] == 0]
            if pts:
                label = next(r["runs"][key]["label"] for r in rows if key in r["runs"])
                first = key not in colors
                color = colors.setdefault(key, palette[len(colors) % len(palette)])
                ax.plot(*zip(*pts), "o" + styles.get(kind, ":"), color=color, markersize=4,
                        label=label if first else "_nolegend_")
        for key, mark in ((ANALYZE_KEY, "o"), ("analyze_budget", "s")):
            pts = [(r["rows"]["kernels"], r["runs"][key]["peak_mib"] / 1024) for r in rows
                   if r["runs"].get(key, {}).get("peak_mib")]
            if pts:
                ax2.plot(*zip(*pts), mark + styles.get(kind, ":"), label=f"{rows[0]['runs'][key]['label']} [{kind}]")
    ax.set_xscale("log"), ax.set_yscale("log")
    ax.set_xlabel("kernels (8 processes)"), ax.set_ylabel("wall time (s)")
    ax.set_title("wall time, measured (" + describe_machine(results["machine"]).split(",")[1].strip() + ")")
    if ax.get_legend_handles_labels()[0]:
        for kind, style in styles.items():
            if any(r["file_kind"] == kind for r in results["rows"]):
                ax.plot([], [], "k" + style, label=PLOT_LABELS[kind])
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax2.set_xscale("log"), ax2.set_xlabel("kernels (8 processes)"), ax2.set_ylabel("peak RSS (GiB)")
    ax2.axhline(2.0, color="grey", linestyle=":", linewidth=1, label="2 GiB")
    ax2.set_title("peak memory")
    ax2.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")


README_BEGIN, README_END = "<!-- bench:begin -->", "<!-- bench:end -->"


def update_readme(md: str, readme: Path = ROOT / "docs" / "performance.md") -> bool:
    """Replace docs/performance.md's text between the bench marks with ``md``; False when there are no marks."""
    text = readme.read_text()
    i, j = text.find(README_BEGIN), text.find(README_END)
    if i < 0 or j < i:
        return False
    new = text[:i + len(README_BEGIN)] + "\n" + md + text[j:]
    if new != text:
        write_text(readme, new)
    return True


def write_text(path: Path, text: str) -> None:
    from analyze.atomic import atomic_write
    with atomic_write(path) as f:
        f.write(text)


def write_outputs(results: dict, readme: bool = True) -> str:
    from analyze.atomic import atomic_path
    write_text(HERE / "results.json", json.dumps(results, indent=1))
    md = markdown(results)
    write_text(HERE / "results.md", md)
    with atomic_path(HERE / "scaling.png") as tmp:
        plot(results, Path(tmp))
    if readme:
        update_readme(md + "\n![measured cost vs size](bench/scaling.png)\n")
    return md


def kind_sizes(a) -> dict[str, list[int]]:
    """Kernels per file of each kind, ascending: ``--sizes`` (synthetic), ``--real-sizes`` (the real
    eager trace), ``--sglang-sizes`` (the SGLang trace; ``--real-sizes`` when not given)."""
    def parse(text: str) -> list[int]:
        return sorted(int(float(x)) for x in text.split(",") if x.strip())
    real = parse(a.real_sizes)
    return {"synth": parse(a.sizes), "real": real, "sglang": parse(a.sglang_sizes) if a.sglang_sizes else real}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="kernels per file, comma separated (default 1e6,1e7)")
    ap.add_argument("--files", default="synth,real", help="synth, real, sglang, comma separated (default synth,real; "
                    "sglang: the real SGLang server fixture, tiled)")
    ap.add_argument("--real-sizes", default="1e6",
                    help="kernels of the tiled real traces (default 1e6: 4M runtime calls for real, 0.8M for "
                         "sglang; 1e7 makes 40M, 3.4 GB)")
    ap.add_argument("--sglang-sizes", help="kernels of the tiled SGLang traces (default: --real-sizes; 1e7 makes "
                    "8.0M calls, 1.2 GiB)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--data", default=str(ROOT / ".work" / "bench"), help="where generated exports are kept")
    ap.add_argument("--nsys-scripts", metavar="DIR", help="nsys 2025.x stats scripts (else $SPECPROF_NSYS_SCRIPTS)")
    ap.add_argument("--no-nsys22", action="store_true", help="do not run nsys 2022.4 even when installed")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each fast command (the median is kept)")
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds before a command is stopped")
    ap.add_argument("--budget", default="1GB")
    ap.add_argument("--only", help="comma-separated contender keys to run (e.g. analyze,bare_connectorx_2)")
    ap.add_argument("--no-readme", action="store_true", help="leave docs/performance.md's table alone")
    ap.add_argument("--replot", action="store_true", help="rewrite results.md, the plot and README from results.json")
    a = ap.parse_args(argv)
    if a.replot:
        print(write_outputs(json.loads((HERE / "results.json").read_text()), readme=not a.no_readme))
        return 0
    kinds = [k.strip() for k in a.files.split(",") if k.strip()]
    sizes_of = kind_sizes(a)
    unknown = [k for k in kinds if k not in sizes_of]
    if unknown:
        raise SystemExit(f"unknown --files kind {unknown[0]!r} (synth, real, sglang)")
    data = Path(a.data)
    data.mkdir(parents=True, exist_ok=True)
    scripts = nsys_scripts_dir(a.nsys_scripts)
    backends = bare_backends()
    nsys22 = NSYS and (nsys_binary_version() or "").startswith("2022") and not a.no_nsys22
    only = set(a.only.split(",")) if a.only else None
    results = {"machine": machine(), "command": "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d"), "repeat": a.repeat, "timeout_s": a.timeout, "rows": []}
    if scripts is not None:
        results["nsys_proj_label"] = f"nsys {nsys_scripts_version(scripts)} nvtx_gpu_proj_sum"
    results["compiled"] = compile_python(own_packages() + ([scripts / "reports", scripts / "python" / "lib"]
                                                           if scripts is not None else []))
    print(describe_machine(results["machine"]), flush=True)
    stopped: set = set()
    files = []
    for kind in kinds:
        for n in sizes_of[kind]:
            print(f"{kind}: {n:,} kernels", flush=True)
            f = synth_file(n, a.ranks, data, "2025.3") if kind == "synth" else real_file(n, data, kind)
            # nsys 2022.4 (minutes to hours) goes last, after every other command on every file
            results["rows"].append(run_file(kind, n, f, a, scripts, backends, None, stopped, only,
                                            skip={"nsys22_proj"}))
            files.append((kind, n, f, results["rows"][-1]))
            write_outputs(results, readme=False)      # partial results survive an interrupted run
    if nsys22 and (not only or "nsys22_proj" in only):
        for kind, n, f, row in files:
            if kind != "synth":
                continue
            print(f"{kind}: {n:,} kernels, nsys 2022.4", flush=True)
            f22 = synth_file(n, a.ranks, data, "2022.4") if (kind, "nsys22_proj") not in stopped else None
            run_file(kind, n, f, a, scripts, backends, f22, stopped, {"nsys22_proj"}, row=row)
            write_outputs(results, readme=False)
    print(write_outputs(results, readme=not a.no_readme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
