"""The live log survives a server's stop (issue 43, "nothing lost"): SGLang's server answers Ctrl-C by killing its
schedulers with SIGKILL (``kill_process_tree``), so no exit hook runs in them, and the open log file (up to
``SPECPROF_TIMING_FILE_S`` of cycles) was left an unreadable ``.parquet.tmp`` (a real server, 2026-12-06,
recipes/sglang_server_clock.sh: the whole log lost). SIGINT and SIGTERM now complete the file first, then take their
course. Each case runs in a fresh interpreter: the timing mode on, rows handed to its sink, then the signal; the
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

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import os, sys, time
sys.path[:0] = [sys.argv[2], os.path.join(sys.argv[2], "tests")]
os.environ.update(SPECPROF_TIMING="1", SPECPROF_TIMING_DIR=sys.argv[1], SPECPROF_TIMING_FILE_S="3600")
from nvtx_annotate import live
from test_live_timing import _rows
lv = live.enable(events=None)
rows = _rows(30)
for r in rows:
    lv.sink.add(r)
time.sleep(1.6)                      # the sink's thread drains them into the log's buffer (not yet written)
print("ready", flush=True)
try:
    time.sleep(30)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    os._exit(7)                      # as a SIGKILL right after: no exit hook
os._exit(3)
"""


def run_child(tmp_path, sig, hooked=True):
    code = CHILD if hooked else CHILD.replace("from nvtx_annotate import live\n",
                                              "from nvtx_annotate import live\nlive.hook_stop_signals = lambda: []\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(REPO)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


@pytest.mark.parametrize("sig, rc", [(signal.SIGINT, 7), (signal.SIGTERM, -signal.SIGTERM)])
def test_a_stop_signal_completes_the_log_before_it_takes_its_course(tmp_path, sig, rc):
    code, out, err = run_child(tmp_path, sig)
    assert code == rc, err
    assert ("interrupted" in out) == (sig == signal.SIGINT)        # SIGINT still raises KeyboardInterrupt
    files = sorted(tmp_path.glob("*.parquet"))
    assert not list(tmp_path.glob("*.tmp")) and len(files) == 1
    t = pq.read_table(files[0])
    assert t.num_rows == 30 and t.column("cycle").to_pylist() == list(range(1, 31))


def test_without_the_hook_the_killed_process_leaves_an_unreadable_file(tmp_path):
    """The case the hook is for: the same child without it loses every row (buffered, or in a file without its
    footer: at most a ``.parquet.tmp`` nothing can read)."""
    code, _, err = run_child(tmp_path, signal.SIGINT, hooked=False)
    assert code == 7, err
    assert not list(tmp_path.glob("*.parquet")) and len(list(tmp_path.glob("*.parquet.tmp"))) <= 1


def test_an_ignored_signal_stays_ignored_and_other_threads_hook_nothing():
    from nvtx_annotate import live

    code = ("import signal, threading, sys; sys.path.insert(0, sys.argv[1]);"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN);"
            "from nvtx_annotate import live; print(live.hook_stop_signals());"
            "r = []; t = threading.Thread(target=lambda: r.append(live.hook_stop_signals())); t.start(); t.join();"
            "print(r[0]); print(signal.getsignal(signal.SIGTERM) is signal.SIG_IGN)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == ["['SIGINT']", "[]", "True"]
    assert live.STOP_WAIT_S <= 5
