"""The server of tests/helpers/cli_process.py: imports what every analyze-trace command imports, then for each
request (a JSON line on stdin: args, cwd, env, stdout and stderr files) forks a process that runs
``python -m analyze.cli ARGS`` as that fresh process would, and answers on stdout with a JSON line: the process id
once forked, its exit status (a signal's as -N) once it ended."""
import json
import os
import sys
import traceback

from analyze.processes import single_threaded_blas

single_threaded_blas()          # what analyze-trace's main sets before NumPy loads, here before the imports below

import numpy  # noqa: E402,F401
import pandas  # noqa: E402,F401
import pyarrow  # noqa: E402,F401
import pyarrow.parquet  # noqa: E402,F401

import analyze.cli  # noqa: E402


def _answer(out, **what) -> None:
    out.write((json.dumps(what) + "\n").encode())
    out.flush()


def _command(request: dict) -> None:
    """In the forked process: the request's file descriptors, directory, environment and arguments, then the
    command as ``python -m analyze.cli`` runs it (console_main: main, the streams flushed, the exit hooks run,
    os._exit); never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        if request["cwd"] is not None:
            os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [analyze.cli.__file__, *request["args"]]
        analyze.cli.console_main()
    except SystemExit as exc:           # argparse's --help and usage errors, as the interpreter ends on them
        code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:               # noqa: BLE001 - what the interpreter would print before it ends with 1
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def serve() -> None:
    requests, out = sys.stdin.buffer, sys.stdout.buffer
    for line in iter(requests.readline, b""):
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _command(request)
        _answer(out, pid=pid)
        _, status = os.waitpid(pid, 0)
        _answer(out, returncode=os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    serve()
