"""``python -m analyze.cli ARGS`` as a process of its own, forked from a server that has imported what every command
imports: the tests' command-line runs without each paying the interpreter's start and the imports of NumPy, pandas
and pyarrow (0.6 s of CPU a run on the 2-core machine; some 200 runs in the default suite).

:func:`run` is ``subprocess.run([sys.executable, "-m", "analyze.cli", *args], capture_output=True, text=True, ...)``:
the same CompletedProcess (the exit status, a signal's as -N; stdout and stderr as the process wrote them to its file
descriptors 1 and 2), TimeoutExpired past ``timeout`` (the process killed). Each run is a process of its own (a
crash, a hang, a changed module ends with it), forked by tests/helpers/cli_server.py, which imports nothing of the
analyzer past its command line and sets first what analyze-trace's main sets before NumPy loads. A server runs per
test process and per environment of the variables read at an interpreter's start (``PYTHON*``, thread counts,
allocators, MPLBACKEND): a run whose environment differs from every server's there gets a server of its own.
"""
from __future__ import annotations

import atexit
import json
import locale
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SERVER = Path(__file__).with_name("cli_server.py")
STARTUP_PREFIXES = ("PYTHON", "OPENBLAS", "OMP_", "MKL_", "GOTO", "BLIS_", "VECLIB", "NUMEXPR", "NPY_", "ARROW_",
                    "JE_", "MALLOC_", "LD_", "MPL", "PANDAS", "LANG", "LC_", "TZ", "SPECPROF_NVTX")
"""Environment variables read when an interpreter (its locale, its time zone, site's .pth hooks: SPECPROF_NVTX),
NumPy, pandas or pyarrow start: the server's must be the run's."""

_servers: dict[tuple, subprocess.Popen] = {}
_lock = threading.Lock()          # one request at a time on a server: its answers come in order


def _startup(env: dict) -> tuple:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(STARTUP_PREFIXES)))


def _server(env: dict) -> subprocess.Popen:
    key = _startup(env)
    server = _servers.get(key)
    if server is None or server.poll() is not None:
        # unbuffered: select() sees every answer not yet read
        server = subprocess.Popen([sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=env, bufsize=0)
        _servers[key] = server
    return server


def _answer(server: subprocess.Popen, timeout: float | None) -> dict | None:
    """The server's next JSON line; None past ``timeout`` seconds."""
    if timeout is not None and not select.select([server.stdout], [], [], max(timeout, 0))[0]:
        return None
    line = server.stdout.readline()
    if not line:
        raise RuntimeError(f"{SERVER.name} ended (exit {server.wait()})")
    return json.loads(line)


def run(args, *, cwd=None, env: dict | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``python -m analyze.cli ARGS`` in ``cwd`` with ``env`` (this process' environment when None), its output
    captured as text."""
    args = [os.fspath(a) for a in args]
    env = dict(os.environ if env is None else env)
    with _lock, tempfile.TemporaryDirectory(prefix="cli-") as d:
        server = _server(env)
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        request = {"args": args, "cwd": None if cwd is None else os.fspath(cwd), "env": env, "stdout": out,
                   "stderr": err}
        try:
            done = _request(server, request, timeout)
        except BaseException:
            # an answer left unread would be taken for the next run's: this server is not used again
            _discard(server)
            raise
        stdout, stderr = _text(Path(out).read_bytes()), _text(Path(err).read_bytes())
    cmd = [sys.executable, "-m", "analyze.cli", *args]
    if done is None:
        raise subprocess.TimeoutExpired(cmd, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(cmd, done["returncode"], stdout, stderr)


def _request(server: subprocess.Popen, request: dict, timeout: float | None) -> dict | None:
    """The run's exit status as the server answers it; None when it ran past ``timeout`` (then killed)."""
    server.stdin.write((json.dumps(request) + "\n").encode())
    server.stdin.flush()
    deadline = None if timeout is None else time.monotonic() + timeout
    pid = _answer(server, None)["pid"]
    done = _answer(server, None if deadline is None else deadline - time.monotonic())
    if done is None:
        os.kill(pid, signal.SIGKILL)
        _answer(server, None)
    return done


def _discard(server: subprocess.Popen) -> None:
    for key, s in list(_servers.items()):
        if s is server:
            del _servers[key]
    server.kill()
    server.wait()


def _text(data: bytes) -> str:
    """As subprocess.run(text=True) decodes: the locale's encoding, strict, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


@atexit.register
def _stop() -> None:
    for server in _servers.values():
        if server.poll() is None:
            server.stdin.close()
            server.wait(timeout=10)
