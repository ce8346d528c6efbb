"""The live log survives a server's stop (issue 43, "nothing lost"): SGLang's server answers Ctrl-C by killing its
schedulers with SIGKILL (``kill_process_tree``), so no exit hook runs in them, and the open log file (up to
``SPECPROF_TIMING_FILE_S`` of cycles) was left an unreadable ``.parquet.tmp`` (a real server, 2026-12-06,
recipes/sglang_server_clock.sh: the whole log lost). The open file is now an Arrow stream written every
``SPECPROF_TIMING_FLUSH_S`` (what a SIGKILL leaves is read to its last whole batch). SIGINT (Ctrl-C reaches the whole group) now completes the file
first, then takes its
course (SIGTERM is left alone: a Python handler would make it wait for the main thread to run Python again). Each
case runs in a fresh interpreter: the timing mode on, rows handed to its sink, then the signal; the
child then leaves with ``os._exit`` (as SIGKILL would, no exit hook) or by the signal itself."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from helpers import cli_process

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, signal, sys, time
# as a process started from a terminal: pytest-xdist's workers ignore SIGINT, and a child inherits that (as a
# background job of a non-interactive shell does: `server &` in a script never sees Ctrl-C)
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = [sys.argv[2], os.path.join(sys.argv[2], "tests")]
os.environ.update(SPECPROF_TIMING="1", SPECPROF_TIMING_DIR=sys.argv[1], SPECPROF_TIMING_FILE_S="3600",
                  SPECPROF_TIMING_FLUSH_S=sys.argv[3])
from nvtx_annotate import live
from test_live_timing import _rows
lv = live.enable(events=None)
rows = _rows(30)
for r in rows:
    lv.sink.add(r)
time.sleep(float(sys.argv[4]))       # the sink's thread drains them into the log's buffer (written after FLUSH_S)
try:
    print("ready", flush=True)       # inside: the signal may come as soon as the parent reads it
    time.sleep(30)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    os._exit(7)                      # as a SIGKILL right after: no exit hook
os._exit(3)
"""


def run_child(tmp_path, sig, hooked=True, flush_s=3600, wait_s=1.6):
    code = CHILD if hooked else CHILD.replace("from nvtx_annotate import live\n",
                                              "from nvtx_annotate import live\nlive.hook_stop_signals = lambda: []\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(REPO), str(flush_s), str(wait_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_ctrl_c_completes_the_log_before_it_takes_its_course(tmp_path):
    code, out, err = run_child(tmp_path, signal.SIGINT)
    assert code == 7, err
    assert "interrupted" in out                                     # SIGINT still raises KeyboardInterrupt
    files = sorted(tmp_path.glob("*.parquet"))
    assert not list(tmp_path.glob("*.tmp")) and len(files) == 1
    t = pq.read_table(files[0])
    assert t.num_rows == 30 and t.column("cycle").to_pylist() == list(range(1, 31))


def test_without_the_hook_the_killed_process_loses_the_rows_not_yet_written(tmp_path):
    """The case the hook is for: the same child without it, its rows drained but not yet written (a flush an hour
    away), loses every one of them."""
    code, _, err = run_child(tmp_path, signal.SIGINT, hooked=False)
    assert code == 7, err
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob("*.arrows"))


def test_a_sigkilled_process_leaves_its_written_batches_readable(tmp_path):
    """``kill PID`` or ``docker stop`` reaches the server's main process only, which then SIGKILLs its schedulers:
    no hook runs in them. What the log wrote (a batch every FLUSH_S) stays readable from the open stream:
    analyze-trace reads its 30 cycles and says the file was not completed."""
    import json

    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(REPO), "1", "3.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.kill()
    proc.communicate(timeout=30)
    assert not list(tmp_path.glob("*.parquet")) and len(list(tmp_path.glob("*.arrows"))) == 1
    out = cli_process.run([str(tmp_path), "--json", "-"], timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert len(doc["cycles"]) == 30
    note = [n for n in doc["notes"] if n["code"] == "live_log_open_files"]
    assert len(note) == 1 and note[0]["count"] == 1 and "30 cycles read" in note[0]["message"]
    assert "0 of them ending inside a batch" in note[0]["message"]     # killed between two writes


def test_an_ignored_signal_stays_ignored_and_other_threads_hook_nothing():
    from nvtx_annotate import live

    code = ("import signal, threading, sys; sys.path.insert(0, sys.argv[1]);"
            "signal.signal(signal.SIGINT, signal.default_int_handler);"
            "from nvtx_annotate import live; print(live.hook_stop_signals());"
            "r = []; t = threading.Thread(target=lambda: r.append(live.hook_stop_signals())); t.start(); t.join();"
            "print(r[0]); signal.signal(signal.SIGINT, signal.SIG_IGN); print(live.hook_stop_signals());"
            "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN, signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == ["['SIGINT']", "[]", "[]", "True True"]
    assert live.STOP_WAIT_S <= 5


def test_sigterm_keeps_its_default_course(tmp_path):
    """Not hooked: the process ends by SIGTERM at once, as without the shim (its open file is lost, as before)."""
    code, out, err = run_child(tmp_path, signal.SIGTERM)
    assert code == -signal.SIGTERM and "interrupted" not in out, err
    assert not list(tmp_path.glob("*.parquet"))


def test_a_second_signal_inside_the_handler_goes_straight_on(monkeypatch):
    """A second Ctrl-C while the first waits for the sink (its lock may be held by this very thread): no second
    wait, the signal's course at once."""
    from types import SimpleNamespace

    from nvtx_annotate import live

    calls = []
    fake = SimpleNamespace(closed=False, sink=SimpleNamespace(complete_soon=lambda w: calls.append(w)))
    monkeypatch.setattr(live, "_live", fake)
    handler = live._stop_handler(lambda signum, frame: "previous")
    assert handler(signal.SIGINT, None) == "previous" and calls == [live.STOP_WAIT_S]
    monkeypatch.setattr(live, "_in_stop", [True])
    assert handler(signal.SIGINT, None) == "previous" and calls == [live.STOP_WAIT_S]


def test_a_row_added_while_a_drain_runs_is_in_the_file_complete_soon_completes(tmp_path):
    """The flag is taken before the rows: a row that came after a drain took its rows (here: while its metrics
    published) goes into the file the next drain completes, and complete_soon says so (before: the running drain
    completed the file without it and said it was done)."""
    import threading

    from nvtx_annotate.live.log import LogWriter
    from nvtx_annotate.live.sink import Sink
    from test_live_timing import _rows

    rows = _rows(2)
    in_publish, release = threading.Event(), threading.Event()

    class Metrics:
        first = True

        def observe_many(self, batch):
            pass

        def publish(self):
            if Metrics.first:
                Metrics.first = False
                in_publish.set()
                release.wait(5)

        def count_drops(self, counters):
            pass

    log = LogWriter(str(tmp_path), 0, 1, None, 1000, 1 << 30, 10, max_age_s=3600)
    sink = Sink(lambda: (log, Metrics()), interval_s=0.05)
    sink.add(rows[0])
    assert in_publish.wait(5)           # the first drain took row 1 and is publishing
    sink.add(rows[1])
    threading.Timer(0.2, release.set).start()
    assert sink.complete_soon(5) is True
    files = sorted(tmp_path.glob("*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).column("cycle").to_pylist() == [1, 2]
    sink.close()


def test_complete_soon_without_a_thread_leaves_nothing_pending():
    from nvtx_annotate.live.sink import Sink

    sink = Sink(lambda: (None, None), threaded=False)
    assert sink.complete_soon(1) is False and sink._complete_now is False
