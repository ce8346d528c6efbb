"""``profile-trace [options] -- CMD...``: run CMD under ``nsys profile`` with the NVTX shim on.

Adds what a tensor-parallel, CUDA-graph server needs: ``--trace-fork-before-exec=true`` (TP
workers are spawned processes), ``--cuda-graph-trace=node`` (kernels inside graph replays),
``--cuda-flush-interval=1000`` (SGLang kills its workers at shutdown: unsaved CUDA buffers would be lost),
``-t cuda,nvtx,osrt``; capture everything, by delay/duration, or by ``cudaProfilerApi`` (with
``--sglang-url`` it calls SGLang's ``/start_profile`` with ``CUDA_PROFILER`` once the server
answers).  Sets ``SPECPROF_NVTX=1`` (the ``.pth`` hook that ``pip install specprof`` put into
site-packages then loads the shim in every process; nothing is written into site-packages here),
exports SQLite next to the report and prints the ``analyze-trace`` command.

``--drive`` profiles a server in one command: CMD (``python -m sglang.launch_server ...``) is
started, profile-trace waits for it to answer, sends warm-up requests, starts SGLang's profiler
(``--capture cudaprofilerapi``: exactly SGLang's ``/start_profile`` window of ``--sglang-steps``
forward steps), drives ``--requests`` ``/generate`` requests of token ids, writes what SGLang
reported per request to ``BASE.load.json`` and stops the server as Ctrl-C would
(``nvtx_annotate/serve.py``).  An existing report is never overwritten without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from typing import List, Optional, Tuple

from . import protocol as P

MIN_NSYS = (2022, 4)


class ProfileTraceError(RuntimeError):
    pass


def find_nsys(explicit: Optional[str] = None) -> Optional[str]:
    for cand in (explicit, os.environ.get("NSYS"), shutil.which("nsys")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def parse_nsys_version(text: str) -> Optional[Tuple[int, ...]]:
    """'NVIDIA Nsight Systems version 2022.4.2.1-df9881f' -> (2022, 4, 2, 1)."""
    m = re.search(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:\.(\d+))?", text)
    if not m:
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


def nsys_version(nsys: str) -> Tuple[int, ...]:
    try:
        out = subprocess.run([nsys, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProfileTraceError(f"cannot run {nsys} --version: {e}") from e
    v = parse_nsys_version(out.stdout + out.stderr)
    if v is None:
        raise ProfileTraceError(f"cannot read the nsys version from: {(out.stdout + out.stderr).strip()!r}")
    return v


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("specprof")
    except Exception:  # noqa: BLE001 - a source tree
        return "0.1.0 (source tree)"


def _own_options(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings if s.startswith("--")}


def build_parser() -> argparse.ArgumentParser:
    from analyze.errors import non_negative_int, positive_int     # no pandas (analyze/__init__.py)

    p = argparse.ArgumentParser(
        prog="profile-trace",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="profile-trace [options] -- CMD...",
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    p.add_argument("-o", "--output", help="report path without extension (default specprof-<time>)")
    p.add_argument("--delay", type=float, default=None, help="seconds before collection starts")
    p.add_argument("--duration", type=float, default=None, help="seconds of collection")
    p.add_argument("--capture", choices=["all", "cudaprofilerapi"], default="all",
                   help="cudaprofilerapi: collect between cudaProfilerStart/Stop only")
    p.add_argument("--sglang-url", default=None,
                   help="with --capture cudaprofilerapi: POST <url>/start_profile once the server is up")
    p.add_argument("--sglang-steps", type=positive_int, default=20, help="num_steps for /start_profile")
    p.add_argument("--sglang-wait", type=float, default=600, help="seconds to wait for the server")
    p.add_argument("--cuda-graph-trace", choices=["node", "graph"], default="node")
    p.add_argument("--cuda-flush-interval", type=non_negative_int, default=1000, metavar="MS",
                   help="nsys saves buffered CUDA data every MS milliseconds (default 1000; 0: only when a "
                        "buffer is full). SGLang kills its TP workers at shutdown, so data still buffered then "
                        "is lost: on a real SGLang 0.5.17 run the last 3 s of kernels (and with eager mode, "
                        "every kernel) were missing without it")
    p.add_argument("-t", "--trace", default="cuda,nvtx,osrt")
    p.add_argument("--nsys", default=None, help="nsys binary (default $NSYS, then nsys on PATH)")
    p.add_argument("--package", default=None, help="package the shim patches (default sglang)")
    p.add_argument("--no-shim", action="store_true", help="do not set SPECPROF_NVTX=1")
    p.add_argument("--no-install-pth", action="store_true",
                   help="do not warn when this Python has no .pth hook (nothing is installed either way)")
    p.add_argument("--no-export", action="store_true", help="skip the SQLite export")
    p.add_argument("--stats", action="store_true",
                   help="also write nsys stats CSVs (cuda_gpu_kern_sum, nvtx_gpu_proj_sum)")
    p.add_argument("--nsys-arg", action="append", default=[], help="extra argument for nsys profile")
    p.add_argument("--scrub", action="store_true",
                   help="also write BASE.scrubbed.sqlite: a shareable copy without the machine's "
                        "environment, command line, paths and host names (timing rows untouched)")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing BASE.nsys-rep / BASE.sqlite (default: refuse, exit 8)")
    d = p.add_argument_group("driving a server (--drive)")
    d.add_argument("--drive", action="store_true",
                   help="CMD is an SGLang server: wait for it, warm it up, start its profiler "
                        "(--capture cudaprofilerapi), send the load, then stop it")
    d.add_argument("--requests", type=positive_int, default=16, help="requests sent (default 16)")
    d.add_argument("--concurrency", type=positive_int, default=8, help="requests in flight (default 8)")
    d.add_argument("--input-len", type=positive_int, default=32, help="prompt token ids per request (default 32)")
    d.add_argument("--output-len", type=positive_int, default=64, help="tokens generated per request (default 64)")
    d.add_argument("--warmup-requests", type=non_negative_int, default=2, help="untimed requests first (default 2)")
    d.add_argument("--clock-rounds", type=non_negative_int, default=3,
                   help="with --capture cudaprofilerapi: send the whole load this many times before SGLang's profiler "
                        "starts (default 3; 0: none): the shim records those decode cycles' clock, which analyze-trace "
                        "whatif and advise calibrate from (the profiler stretches the cycles inside the window). "
                        "A calibration needs 100 steady cycles at a batch size and one round of the default load "
                        "gives ~85, so the default 3 rounds give ~250")
    d.add_argument("--prompt-vocab", type=positive_int, default=1000,
                   help="prompt token ids are drawn from [3, 3 + N) (default 1000; keep it below the model's vocabulary)")
    d.add_argument("--stop-grace", type=float, default=300,
                   help="seconds nsys may take to write its report after the server is stopped")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD...")
    return p


def profile_command(a, nsys: str, base: str) -> List[str]:
    cmd = [
        nsys, "profile",
        "-t", a.trace,
        "--trace-fork-before-exec=true",
        f"--cuda-graph-trace={a.cuda_graph_trace}",
    ]
    if getattr(a, "cuda_flush_interval", 0) and "cuda" in a.trace.split(","):
        cmd.append(f"--cuda-flush-interval={a.cuda_flush_interval}")
    if getattr(a, "force", False):
        cmd.append("--force-overwrite=true")
    cmd += ["-o", base]
    if a.delay is not None and a.capture == "all":
        cmd.append(f"--delay={a.delay:g}")
    if a.duration is not None:
        cmd.append(f"--duration={a.duration:g}")
    if a.capture == "cudaprofilerapi":
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    # the analyzer reads neither CPU samples nor context switches, and nsys' default sampling costs time
    # in every TP worker: off unless the user's --nsys-arg says otherwise
    given = {x.split("=", 1)[0] for x in a.nsys_arg}
    for flag in ("--sample", "--cpuctxsw"):
        if flag not in given and not (flag == "--sample" and "-s" in given):
            cmd.append(f"{flag}=none")
    cmd += list(a.nsys_arg)
    return cmd + list(a.cmd)


def export_command(nsys: str, base: str) -> List[str]:
    # the .sqlite was checked absent (or --force given) before profiling: this export owns it
    return [nsys, "export", "--type", "sqlite", "--force-overwrite", "true",
            "-o", base + ".sqlite", base + ".nsys-rep"]


OUTPUT_SUFFIXES = (".nsys-rep", ".sqlite", ".scrubbed.sqlite", ".load.json")


def refuse_outputs(base: str, force: bool) -> Optional[str]:
    """Why this run may not write its outputs at ``base`` (the output policy of
    analyze/output_policy.py: no earlier report replaced without ``--force``), or None. The policy
    module imports no pandas: this runs before the server starts."""
    from analyze.errors import OutputError
    from analyze.output_policy import refuse_existing

    try:
        refuse_existing([base + s for s in OUTPUT_SUFFIXES], force=force)
    except OutputError as exc:
        return f"{exc} (an earlier run?)"
    return None


def stats_reports(version: Optional[Tuple[int, ...]]) -> str:
    """Report names changed in 2023.2 (gpukernsum -> cuda_gpu_kern_sum); the NVTX GPU projection
    report does not exist before it."""
    if version is not None and version[:2] < (2023, 2):
        return "gpukernsum,nvtxsum"
    return "cuda_gpu_kern_sum,nvtx_gpu_proj_sum"


def stats_command(nsys: str, base: str, version: Optional[Tuple[int, ...]] = None) -> List[str]:
    return [nsys, "stats", "-r", stats_reports(version), "--format", "csv",
            "--force-export", "false", "-o", base + ".stats", base + ".sqlite"]


CLOCK_STOP_EARLY_S = 1.0
"""``--delay``: the shim's clock stops this long before nsys is due to start collecting (its cycles then all ran
uncollected)."""
CLOCK_MARKS_LATE_S = (5.0, 15.0)
"""``--delay``: the shim writes its clock marks this long after nsys is due to start collecting, twice (nsys counts its
delay from its own start, a moment after this command's; a load paused at the first): at most a third and two thirds of
``--duration``."""


def delayed_clock_env(a, now_ns: int) -> dict:
    """The shim's clock times for ``--delay`` (nvtx_annotate/wrappers.py, ``clock_deadlines``): wall-clock ns at which
    the clock stops and at which its marks are written; {} without a delay, under --capture cudaprofilerapi (SGLang's
    profiler tells the shim) or without the shim."""
    if a.delay is None or a.capture != "all" or a.no_shim:
        return {}
    late = CLOCK_MARKS_LATE_S if a.duration is None else tuple(min(x, a.duration * (i + 1) / 3)
                                                                for i, x in enumerate(CLOCK_MARKS_LATE_S))
    due = now_ns + int(a.delay * 1e9)
    return {P.CLOCK_STOP_AT_ENV: str(max(now_ns, due - int(CLOCK_STOP_EARLY_S * 1e9))),
            P.CLOCK_MARKS_AT_ENV: ",".join(str(due + int(x * 1e9)) for x in late)}


def shim_env(a) -> dict:
    env = dict(os.environ)
    if not a.no_shim:
        env["SPECPROF_NVTX"] = "1"
    if a.package:
        env["SPECPROF_NVTX_PACKAGE"] = a.package
    # the shim must be importable from the profiled interpreters
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _start_profile_thread(url: str, steps: int, wait: float, delay: Optional[float]):
    def run():
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                pass
            time.sleep(2)
        else:
            print(f"profile-trace: {url} did not answer in {wait:g}s; no /start_profile sent", file=sys.stderr)
            return
        if delay:
            time.sleep(delay)
        body = json.dumps({"activities": ["CUDA_PROFILER"], "num_steps": steps}).encode()
        req = urllib.request.Request(url.rstrip("/") + "/start_profile", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                print(f"profile-trace: /start_profile -> {r.status}", file=sys.stderr)
        except Exception as e:
            print(f"profile-trace: /start_profile failed: {e}", file=sys.stderr)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _log(text: str) -> None:
    print(f"profile-trace: {text}", file=sys.stderr, flush=True)


def drive_plan(a) -> List[str]:
    """What ``--drive`` does over HTTP, as comment lines for ``--dry-run``."""
    from . import serve

    url = serve.server_url(a.cmd, a.sglang_url)
    start = a.capture == "cudaprofilerapi"
    return [f"# --drive: wait up to {a.sglang_wait:g} s for GET {url}/health",
            f"# --drive: {a.warmup_requests} warm-up POST {url}/generate (input_ids of {a.input_len} tokens)",
            *([f"# --drive: the load below {a.clock_rounds} time(s) before the window (the profile's own clock)"]
              if start and a.clock_rounds else []),
            *([f"# --drive: POST {url}/start_profile {{\"activities\": [\"CUDA_PROFILER\"]"
               + (f", \"num_steps\": {a.sglang_steps}" if a.sglang_steps else "") + "}"] if start else []),
            f"# --drive: {a.requests} POST {url}/generate, {a.concurrency} at a time, {a.output_len} new tokens each",
            *([f"# --drive: POST {url}/stop_profile (if the window is still open)"] if start else []),
            "# --drive: stop the server as Ctrl-C would (SIGINT to its process group)"]


def _run_driven(a, cmd: List[str], env: dict, base: str) -> int:
    """Starts the server under nsys in its own process group, drives it, stops it; returns 0, or 3
    when the server never answered or no request succeeded."""
    from . import serve

    url = serve.server_url(a.cmd, a.sglang_url)
    load = serve.Load(requests=a.requests, concurrency=a.concurrency, input_len=a.input_len,
                      output_len=a.output_len, warmup_requests=a.warmup_requests, vocab=a.prompt_vocab,
                      clock_rounds=a.clock_rounds)
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    failed = False
    try:
        waited = serve.wait_ready(url, a.sglang_wait, alive=lambda: proc.poll() is None)
        _log(f"{url} is up after {waited:.0f} s")
        result = serve.drive(url, load, profile_steps=a.sglang_steps,
                             start=a.capture == "cudaprofilerapi", log=_log)
        from analyze.atomic import atomic_write

        path = base + ".load.json"
        with atomic_write(path) as f:
            json.dump(result.to_json(), f, indent=1)
        _log(f"wrote {path} (what SGLang reported per request)")
        failed = result.totals()["succeeded"] == 0
    except serve.ServerError as exc:
        _log(f"error: {exc}")
        failed = True
    except KeyboardInterrupt:
        _log("interrupted: stopping the server")
        failed = True
    finally:
        nsys_rc = serve.stop_process_group(proc, grace_s=a.stop_grace, log=_log)
        _log(f"nsys exited with status {nsys_rc}")
    # nsys passes on the server's status, non-zero after SIGINT: the load's outcome decides (3 = the
    # server did not come up or no request succeeded; the report, if any, is still exported)
    return 3 if failed else 0


# nsys 2025.3.1's node-level graph tracing made real SGLang 0.5.17's CUDA-graph replays fail on an H100 (a
# 128-layer target at batch 1, "CUDA error: unspecified launch failure", with and without the shim; the same
# run at graph level and the unprofiled engine ran: recipes/nsys_node_check.sh)
NODE_TRACE_HINT = ("profile-trace: warning: the command exited with status {rc} under --cuda-graph-trace=node. If its log "
                   "shows \"CUDA error: unspecified launch failure\", nsys's per-node graph tracing is a known cause "
                   "(seen on SGLang with a deep target): rerun with --cuda-graph-trace graph (kernels inside graphs "
                   "are then not seen; phase and cycle times and the step count from the shim's marks are). A report "
                   "written before the failure holds only the cycles up to it.")


def main(argv=None) -> int:
    p = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    a = p.parse_args(argv)
    if a.cmd and a.cmd[0] == "--":
        a.cmd = a.cmd[1:]
    elif a.cmd:
        # no `--`: an option of ours after the command would go to the command (`CMD --dry-run` ran CMD)
        mine = sorted(_own_options(p) & {x.split("=", 1)[0] for x in a.cmd})
        if mine:
            p.error(f"{', '.join(mine)} after the command would be passed to it: put profile-trace's options "
                    "first and the command after `--` (profile-trace [options] -- CMD...)")
    if not a.cmd:
        p.error("no command given: profile-trace [options] -- CMD...")
    if a.drive and a.delay is not None:
        p.error("--drive starts the profile itself (after warm-up): --delay does not apply")
    base = a.output or time.strftime("specprof-%Y%m%d-%H%M%S")
    base = re.sub(r"\.(nsys-rep|qdrep|sqlite)$", "", base)
    nsys = find_nsys(a.nsys)
    env = shim_env(a)
    if a.dry_run:
        n = nsys or "nsys"
        envs = " ".join(f"{k}={env[k]}" for k in ("SPECPROF_NVTX", "SPECPROF_NVTX_PACKAGE") if k in env)
        clock = delayed_clock_env(a, 0)
        if clock:   # wall-clock times set as the command starts: in the line as shell arithmetic on that start (bash)
            marks = ",".join(f"$((T+{x}))" for x in clock[P.CLOCK_MARKS_AT_ENV].split(","))
            envs = (f"T=$(date +%s%N); {P.CLOCK_STOP_AT_ENV}=$((T+{clock[P.CLOCK_STOP_AT_ENV]})) "
                    f"{P.CLOCK_MARKS_AT_ENV}={marks} {envs}")
        line = f"{envs} {shlex.join(profile_command(a, n, base))}".strip()
        print(f"({line})" if clock else line)       # a subshell: T stays out of the user's shell
        if clock:           # wall-clock times, set when the command starts: said here relative to it
            marks = ", ".join(f"{int(x) / 1e9:g} s" for x in clock[P.CLOCK_MARKS_AT_ENV].split(","))
            print(f"profile-trace: the shim's clock stops {int(clock[P.CLOCK_STOP_AT_ENV]) / 1e9:g} s after the start "
                  f"and its marks are written at {marks} ({P.CLOCK_STOP_AT_ENV}, {P.CLOCK_MARKS_AT_ENV})",
                  file=sys.stderr)
        if a.drive:
            for line in drive_plan(a):
                print(line)
        if not a.no_export:
            print(shlex.join(export_command(n, base)))
            if a.stats:
                print(shlex.join(stats_command(n, base)))
            if a.scrub:
                print(shlex.join(["analyze-trace", "scrub", base + ".sqlite", "-o", base + ".scrubbed.sqlite"]))
        print(f"analyze-trace {shlex.quote(base + '.sqlite')} --json {shlex.quote(base + '.json')}")
        return 0
    if nsys is None:
        print("profile-trace: error: nsys not found. Install Nsight Systems >= 2022.4 "
              "(e.g. apt install nsight-systems-cli) or pass --nsys PATH / set NSYS.", file=sys.stderr)
        return 127
    try:
        ver = nsys_version(nsys)
    except ProfileTraceError as e:
        print(f"profile-trace: error: {e}", file=sys.stderr)
        return 127
    if ver[:2] < MIN_NSYS:
        print(f"profile-trace: error: nsys {'.'.join(map(str, ver))} is too old; need >= "
              f"{MIN_NSYS[0]}.{MIN_NSYS[1]} (--cuda-graph-trace, NVTX domains in the export).",
              file=sys.stderr)
        return 2
    if not a.no_shim and not a.no_install_pth:
        from .pth import is_installed

        if not is_installed():  # a source checkout: pip installs the hook with the wheel
            print("profile-trace: warning: this Python has no specprof_nvtx.pth hook, so only SGLang >= 0.5.11 "
                  "(its plugin entry point) annotates its TP workers; `pip install` of specprof (not -e) installs the hook, "
                  "`python -m nvtx_annotate install-pth` adds it to a source checkout's Python", file=sys.stderr)
    refused = refuse_outputs(base, a.force)
    if refused:
        print(f"profile-trace: error: {refused}", file=sys.stderr)
        return 8
    cmd = profile_command(a, nsys, base)
    print("profile-trace:", shlex.join(cmd), file=sys.stderr)
    if a.drive:
        rc = _run_driven(a, cmd, env, base)
    else:
        if a.capture == "cudaprofilerapi" and a.sglang_url:
            _start_profile_thread(a.sglang_url, a.sglang_steps, a.sglang_wait, a.delay)
        rc = subprocess.call(cmd, env=dict(env, **delayed_clock_env(a, time.time_ns())))
        if rc != 0 and a.cuda_graph_trace == "node":     # (--drive's status is the load's, not the command's)
            print(NODE_TRACE_HINT.format(rc=rc), file=sys.stderr)
    rep = base + ".nsys-rep"
    if not os.path.exists(rep):
        print(f"profile-trace: error: nsys wrote no report ({rep}); exit status {rc}", file=sys.stderr)
        return rc or 1
    if not a.no_export:
        erc = subprocess.call(export_command(nsys, base))
        if erc != 0 or not os.path.exists(base + ".sqlite"):
            print(f"profile-trace: error: nsys export failed ({erc})", file=sys.stderr)
            return erc or 1
        if a.stats:
            subprocess.call(stats_command(nsys, base, ver))
        print(f"profile-trace: wrote {rep} and {base}.sqlite", file=sys.stderr)
        if a.scrub:
            from analyze.errors import TraceError
            from analyze.tools.scrub import scrub

            try:
                scrub(base + ".sqlite", base + ".scrubbed.sqlite")
            except TraceError as e:
                print(f"profile-trace: error: scrub failed: {e}", file=sys.stderr)
                return getattr(e, "exit_code", 1)
            print(f"profile-trace: wrote {base}.scrubbed.sqlite (environment, command line, paths and "
                  "host names blanked; share this one)", file=sys.stderr)
        print(f"analyze-trace {shlex.quote(base + '.sqlite')} --json {shlex.quote(base + '.json')}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
