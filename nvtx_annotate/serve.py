"""Driving an SGLang HTTP server for ``profile-trace --drive`` (standard library only).

The one-command server profile: ``profile-trace`` starts ``python -m sglang.launch_server ...`` under
nsys; this module waits until the server answers, sends a few warm-up requests (so JIT kernels, CUDA
graph capture and the first prefill are behind us), asks SGLang to start profiling
(``/start_profile`` with ``CUDA_PROFILER``, for ``--capture cudaprofilerapi``), drives a short
closed-loop load of ``/generate`` requests made of token ids (a server started with
``--skip-tokenizer-init`` has no tokenizer), records what SGLang itself reports per request
(``meta_info``: completion tokens, ``spec_verify_ct``, ``spec_num_correct_drafts``,
``spec_accept_length``), and then stops the server the way Ctrl-C does (SIGINT to the process group
that nsys and the server share), so nsys finalizes its report.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Callable, List, Optional, Sequence

DEFAULT_PORT = 30000


class ServerError(RuntimeError):
    """The server did not come up, or stopped answering."""


@dataclass(frozen=True)
class Load:
    """A closed-loop load: ``requests`` requests, at most ``concurrency`` in flight, each of
    ``input_len`` random token ids (seeded) generating exactly ``output_len`` tokens (greedy,
    ``ignore_eos``)."""

    requests: int = 16
    concurrency: int = 8
    input_len: int = 32
    output_len: int = 64
    warmup_requests: int = 2
    vocab: int = 1000  # token ids drawn from [3, 3 + vocab)
    clock_rounds: int = 3  # with a capture window: the whole load this many times before it opens (the shim's clock)
    seed: int = 0

    def prompts(self) -> List[List[int]]:
        rng = random.Random(self.seed)
        return [[1] + [3 + rng.randrange(self.vocab) for _ in range(self.input_len - 1)]
                for _ in range(self.requests)]


@dataclass
class RequestResult:
    index: int
    ok: bool
    seconds: float
    completion_tokens: Optional[int] = None
    spec_verify_ct: Optional[int] = None
    spec_num_correct_drafts: Optional[int] = None
    spec_accept_length: Optional[float] = None
    error: Optional[str] = None


@dataclass
class LoadResult:
    url: str
    load: Load
    profile_started: Optional[bool] = None
    profile_message: Optional[str] = None
    profile_stop_message: Optional[str] = None
    seconds: float = 0.0
    requests: List[RequestResult] = field(default_factory=list)
    clock_rounds: List[dict] = field(default_factory=list)

    def totals(self) -> dict:
        ok = [r for r in self.requests if r.ok]

        def total(name):
            vals = [getattr(r, name) for r in ok]
            return None if any(v is None for v in vals) or not vals else int(sum(vals))

        completion = total("completion_tokens")
        verify = total("spec_verify_ct")
        return {
            "requests": len(self.requests),
            "succeeded": len(ok),
            "completion_tokens": completion,
            "spec_verify_ct": verify,
            "spec_num_correct_drafts": total("spec_num_correct_drafts"),
            # SGLang's own accept length: completion tokens per verify step (bonus included)
            "spec_accept_length": (completion / verify) if completion and verify else None,
            "tokens_per_s": (completion / self.seconds) if completion and self.seconds > 0 else None,
        }

    def to_json(self) -> dict:
        return {"url": self.url, "load": asdict(self.load), "profile_started": self.profile_started,
                "profile_message": self.profile_message,
                "profile_stop_message": self.profile_stop_message, "seconds": self.seconds,
                "totals": self.totals(), "requests": [asdict(r) for r in self.requests],
                "clock_rounds": self.clock_rounds}


def server_url(cmd: Sequence[str], explicit: Optional[str] = None) -> str:
    """``explicit``, else ``http://HOST:PORT`` from the server command's ``--host``/``--port``
    (SGLang's defaults 127.0.0.1 and 30000)."""
    if explicit:
        return explicit.rstrip("/")
    host, port = "127.0.0.1", DEFAULT_PORT
    args = list(cmd)
    for i, arg in enumerate(args):
        m = re.match(r"^--(host|port)(?:=(.*))?$", arg)
        if not m:
            continue
        value = m.group(2) if m.group(2) is not None else (args[i + 1] if i + 1 < len(args) else None)
        if value is None:
            continue
        if m.group(1) == "host":
            host = "127.0.0.1" if value in ("0.0.0.0", "::") else value
        else:
            try:
                port = int(value)
            except ValueError:
                pass
    return f"http://{host}:{port}"


def _post(url: str, body: dict, timeout: float) -> dict | str:
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode("utf-8", "replace")
    try:
        return json.loads(text)
    except ValueError:
        return text


def wait_ready(url: str, timeout_s: float, alive: Callable[[], bool] = lambda: True,
               poll_s: float = 1.0) -> float:
    """Polls ``/health`` until it answers 200; returns the seconds waited. Raises
    :class:`ServerError` when ``alive()`` turns False (the server died) or on timeout."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout_s:
        if not alive():
            raise ServerError(f"the server exited before {url} answered")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except (urllib.error.URLError, OSError, ValueError) as exc:
            last = exc
        time.sleep(poll_s)
    raise ServerError(f"{url}/health did not answer 200 within {timeout_s:g} s (last: {last})")


def generate(url: str, input_ids: List[int], output_len: int, timeout_s: float = 600) -> dict:
    body = {"input_ids": input_ids,
            "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}
    out = _post(url + "/generate", body, timeout_s)
    if isinstance(out, list):  # a batch answer for one prompt
        out = out[0]
    if not isinstance(out, dict):
        raise ServerError(f"/generate answered {str(out)[:200]!r}")
    return out


def _request_result(index: int, answer: dict, seconds: float) -> RequestResult:
    meta = answer.get("meta_info") or {}

    def num(key, kind=int):
        v = meta.get(key)
        return kind(v) if isinstance(v, (int, float)) else None

    completion = num("completion_tokens")
    if completion is None and isinstance(answer.get("output_ids"), list):
        completion = len(answer["output_ids"])
    drafts = num("spec_num_correct_drafts")
    if drafts is None:
        drafts = num("spec_accepted_drafts")
    return RequestResult(index=index, ok=True, seconds=seconds, completion_tokens=completion,
                         spec_verify_ct=num("spec_verify_ct"), spec_num_correct_drafts=drafts,
                         spec_accept_length=num("spec_accept_length", float))


def start_profile(url: str, num_steps: Optional[int], timeout_s: float = 120) -> str:
    body: dict = {"activities": ["CUDA_PROFILER"]}
    if num_steps:
        body["num_steps"] = int(num_steps)
    out = _post(url + "/start_profile", body, timeout_s)
    return out if isinstance(out, str) else json.dumps(out)


def stop_profile(url: str, timeout_s: float = 300) -> str:
    out = _post(url + "/stop_profile", {}, timeout_s)
    return out if isinstance(out, str) else json.dumps(out)


def run_load(url: str, load: Load, prompts: List[List[int]]) -> tuple:
    """The load once: every prompt, ``load.concurrency`` in flight; (rows by index, seconds). A failed request is
    a row with its error, never an exception."""
    lock = threading.Lock()
    queue = list(enumerate(prompts))
    rows: List[RequestResult] = []

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                index, ids = queue.pop(0)
            t = time.monotonic()
            try:
                answer = generate(url, ids, load.output_len)
                row = _request_result(index, answer, time.monotonic() - t)
            except Exception as exc:  # recorded, the load goes on
                row = RequestResult(index=index, ok=False, seconds=time.monotonic() - t, error=str(exc)[:300])
            with lock:
                rows.append(row)

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, load.concurrency))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(rows, key=lambda r: r.index), time.monotonic() - t0


def drive(url: str, load: Load, profile_steps: Optional[int] = None, start: bool = False,
          log: Callable[[str], None] = lambda s: None) -> LoadResult:
    """Warm-up requests; then (``start``) the load ``load.clock_rounds`` times outside the window (the shim
    records those decode cycles' clock, nvtx_annotate/clock.py: the profile's own unprofiled clock), then
    ``/start_profile``; then the load; every request's outcome recorded (a failed request is a row with its
    error, never an exception)."""
    result = LoadResult(url=url, load=load)
    prompts = load.prompts()
    for i in range(min(load.warmup_requests, len(prompts))):
        generate(url, prompts[i], min(load.output_len, 16))
    log(f"{load.warmup_requests} warm-up requests done")
    if start:
        for i in range(load.clock_rounds):
            rows, seconds = run_load(url, load, prompts)
            done = [r.completion_tokens for r in rows if r.ok and r.completion_tokens is not None]
            result.clock_rounds.append({"seconds": seconds, "succeeded": len(done), "completion_tokens": sum(done),
                                        "tokens_per_s": sum(done) / seconds if seconds > 0 else None})
            log(f"load {i + 1} of {load.clock_rounds} before the window: {sum(done)} tokens in {seconds:.1f} s")
        try:
            result.profile_message = start_profile(url, profile_steps).strip()
            result.profile_started = True
            log(f"/start_profile (CUDA_PROFILER, num_steps={profile_steps}): {result.profile_message}")
        except (urllib.error.URLError, OSError, ServerError) as exc:
            result.profile_started = False
            result.profile_message = str(exc)
            log(f"/start_profile failed: {exc}")
    result.requests, result.seconds = run_load(url, load, prompts)
    if start and result.profile_started:
        # a window still open (the load ended before num_steps): SGLang's cudaProfilerStop makes nsys
        # save its CUDA buffers now; stopping the server later kills the workers with SIGKILL, and
        # nsys loses what it has not saved (seen on real SGLang 0.5.17)
        try:
            result.profile_stop_message = stop_profile(url).strip()
        except (urllib.error.URLError, OSError, ValueError) as exc:  # already stopped by num_steps
            result.profile_stop_message = f"not stopped here: {str(exc)[:200]}"
        log(f"/stop_profile: {result.profile_stop_message}")
    tot = result.totals()
    log(f"{tot['succeeded']}/{tot['requests']} requests in {result.seconds:.1f} s, "
        f"{tot['completion_tokens']} tokens, SGLang's accept length {tot['spec_accept_length']}")
    return result


def _proc_table() -> dict:
    """{pid: (ppid, command line)} of every process, from /proc (empty where there is none)."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("utf-8", "replace")
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, ValueError, IndexError):
            continue
        table[int(name)] = (ppid, cmd)
    return table


def _is_nsys_part(cmd: str) -> bool:
    exe = os.path.basename(cmd.split(" ", 1)[0]) if cmd else ""
    return exe.startswith("nsys") or exe in ("nsys-launcher", "nsys-tee")


def _children(table: dict) -> dict:
    """{pid: [child pids]} of a :func:`_proc_table`."""
    children: dict = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    return children


def app_roots(root_pid: int, table: Optional[dict] = None) -> List[int]:
    """The profiled application's top processes under ``root_pid`` (nsys): the first descendants
    that are not nsys' own processes. nsys' launcher starts the application in a session of its
    own, so a signal to nsys' process group does not reach it."""
    table = _proc_table() if table is None else table
    children = _children(table)
    roots, stack = [], [root_pid]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            if _is_nsys_part(table[child][1]):
                stack.append(child)
            else:
                roots.append(child)
    return sorted(roots)


def _signal_groups(pids: List[int], sig) -> None:
    for pid in pids:
        try:
            os.killpg(os.getpgid(pid), sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) != "Z"  # a zombie is not alive


def _state(pid: int) -> str:
    """The process' state letter in /proc (Z: a zombie), "?" where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[1][:1].decode("ascii", "replace")
    except (OSError, IndexError):
        return "?"


def still_running(pids: List[int], table: Optional[dict] = None) -> List[tuple]:
    """(pid, state letter, command line) of ``pids`` and all their descendants that are still in
    the process table, in pid order: what is left of an nsys session that did not finish."""
    table = _proc_table() if table is None else table
    children = _children(table)
    seen, stack = set(), [p for p in pids if p in table]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, []))
    return [(pid, _state(pid), table[pid][1]) for pid in sorted(seen)]


def stop_process_group(proc: subprocess.Popen, grace_s: float = 300,
                       log: Callable[[str], None] = lambda s: None) -> int:
    """Stops the server that ``proc`` (nsys, or the server itself; started with
    ``start_new_session=True``) runs, as Ctrl-C would, so that nsys writes its report: SIGINT to
    the application's process group(s), then SIGTERM and SIGKILL if it does not exit; then waits
    up to ``grace_s`` for nsys to finish the report, and only then stops nsys itself (and its
    agent, which runs in a session of its own) the same way. Returns ``proc``'s exit status."""
    roots = app_roots(proc.pid) or [proc.pid]
    for sig, wait_s in ((signal.SIGINT, 60), (signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        live = [p for p in roots if _alive(p)]
        if not live or proc.poll() is not None:
            break
        _signal_groups(live, sig)
        log(f"sent {signal.Signals(sig).name} to the server (pid {', '.join(map(str, live))})")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_alive(p) for p in live) and proc.poll() is None:
            time.sleep(0.2)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        log(f"nsys did not finish within {grace_s:g} s after the server stopped: stopping it")
    table = _proc_table()
    agents = [pid for pid, (_, cmd) in table.items()
              if "--start-agent" in cmd and cmd.split("--session-name=", 1)[-1].split(" ", 1)[0].endswith(f"-{proc.pid}")]
    for pid, state, cmd in still_running([proc.pid] + agents, table):
        log(f"still running: pid {pid} ({state}) {' '.join(cmd.split())[:200]}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        _signal_groups([proc.pid], sig)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        finally:
            for pid in agents:
                if _alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
    return proc.wait()
