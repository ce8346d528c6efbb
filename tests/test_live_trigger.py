"""The live trigger (nvtx_annotate/live/trigger.py, docs/live_trigger.md): the pure decision with
known numbers, the statistics, the metrics reader, and end to end against the stand-in SGLang
server (tests/helpers/fake_sglang_server.py) with a log directory written by the real LogWriter."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvtx_annotate import serve
from nvtx_annotate.live import trigger as T
from nvtx_annotate.live.events import ROW_FIELDS
from nvtx_annotate.live.log import LogWriter

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "helpers" / "fake_sglang_server.py"
TH = T.Thresholds(cycle_change=0.15, acceptance_change=0.15, window_cycles=200, baseline_cycles=1000, cooldown_s=600)
BASE = T.Stats(cycles=1000, cycle_s=0.010, accept=1.5, accept_cycles=1000)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def win(cycle_s=0.010, accept=1.5, cycles=200):
    return T.Stats(cycles=cycles, cycle_s=cycle_s, accept=accept, accept_cycles=cycles)


# ------------------------------------------------------------------ the decision

def test_cycle_time_up_20_percent_triggers_at_15_not_10():
    d = T.decide(BASE, win(cycle_s=0.012), TH, now=1000.0)
    assert d.trigger and d.reason == "moved"
    cyc, acc = d.changes
    assert cyc.metric == "cycle_time" and cyc.moved and cyc.baseline == 0.010 and cyc.window == 0.012
    assert cyc.change == pytest.approx(0.20) and cyc.threshold == 0.15
    assert acc.metric == "acceptance" and not acc.moved and acc.change == pytest.approx(0.0)
    line = T.describe(d)
    assert line == ("TRIGGER: cycle time 10.000 ms -> 12.000 ms (+20.0%, threshold 15%, MOVED); "
                    "acceptance 1.500 -> 1.500 (+0.0%, threshold 15%) over 200 cycles (baseline 1000 cycles)")
    d = T.decide(BASE, win(cycle_s=0.011), TH, now=1000.0)
    assert not d.trigger and d.reason == "within" and d.changes[0].change == pytest.approx(0.10)
    assert not any(c.moved for c in d.changes)
    # either way: a cycle 20% faster moved too
    assert T.decide(BASE, win(cycle_s=0.008), TH, now=1000.0).trigger


def test_acceptance_drop_triggers():
    d = T.decide(BASE, win(accept=1.2), TH, now=5.0)
    assert d.trigger and [c.metric for c in d.moved] == ["acceptance"]
    assert d.moved[0].change == pytest.approx(-0.20) and d.moved[0].window == 1.2
    assert "acceptance 1.500 -> 1.200 (-20.0%, threshold 15%, MOVED)" in T.describe(d)
    assert not T.decide(BASE, win(accept=1.4), TH, now=5.0).trigger  # -6.7%
    # a check set to 0 is off
    off = T.Thresholds(cycle_change=0.15, acceptance_change=0, window_cycles=200, baseline_cycles=1000)
    d = T.decide(BASE, win(accept=0.5), off, now=5.0)
    assert not d.trigger and [c.metric for c in d.changes] == ["cycle_time"]


def test_cooldown_is_respected():
    d = T.decide(BASE, win(cycle_s=0.013), TH, now=1000.0, last_trigger=900.0)
    assert not d.trigger and d.reason == "cooldown" and d.cooldown_left_s == pytest.approx(500.0)
    assert d.moved[0].metric == "cycle_time"
    assert "(500 s of cooldown left)" in T.describe(d)
    assert T.decide(BASE, win(cycle_s=0.013), TH, now=1500.0, last_trigger=900.0).trigger  # 600 s later
    # nothing moved: "within", not "cooldown"
    assert T.decide(BASE, win(), TH, now=1000.0, last_trigger=900.0).reason == "within"


def test_too_few_cycles_decide_nothing():
    for base, window in ((None, win(cycle_s=0.02)), (BASE, None),
                         (T.Stats(999, 0.010, 1.5, 999), win(cycle_s=0.02)),
                         (BASE, win(cycle_s=0.02, cycles=199))):
        d = T.decide(base, window, TH, now=0.0)
        assert not d.trigger and d.reason == "too_few_cycles" and d.changes == ()
    assert T.describe(T.decide(BASE, win(cycles=199), TH, 0.0)) == (
        "waiting: baseline 1000 cycles, window 199 cycles (too few cycles to decide)")
    # stats without values compare nothing
    d = T.decide(T.Stats(1000, None, None, 0), win(), TH, 0.0)
    assert not d.trigger and d.reason == "no_data"


def test_decision_is_structured_data():
    d = T.decide(BASE, win(cycle_s=0.012, accept=1.0), TH, now=1.0)
    j = json.loads(json.dumps(d.to_json()))
    assert j["trigger"] is True and j["reason"] == "moved"
    assert [(c["metric"], c["moved"]) for c in j["changes"]] == [("cycle_time", True), ("acceptance", True)]
    assert j["baseline"] == {"cycles": 1000, "cycle_s": 0.010, "accept": 1.5, "accept_cycles": 1000}
    assert j["window"]["cycle_s"] == 0.012


# ------------------------------------------------------------------ statistics and history

def test_window_stats_median_and_mean_acceptance():
    s = T.window_stats([T.Sample(1, 0.010, 1.0, 1), T.Sample(1, 0.030, None, 0), T.Sample(1, 0.012, 2.0, 1),
                        T.Sample(1, 0.011, 3.0, 1)])
    assert s == T.Stats(cycles=4, cycle_s=pytest.approx(0.0115), accept=pytest.approx(2.0), accept_cycles=3)
    # metrics samples: the count-weighted median of scrape means, the weighted mean of acceptance
    s = T.window_stats([T.Sample(30, 0.010, 1.0, 30), T.Sample(10, 0.020, 2.0, 10)])
    assert s.cycles == 40 and s.cycle_s == 0.010 and s.accept == pytest.approx(1.25)


def cycles(n, cycle_ms, accept=1.5):
    return [T.Sample(1, cycle_ms / 1e3, accept, 1) for _ in range(n)]


def test_history_fixed_baseline_and_window():
    h = T.History(baseline_cycles=1000, window_cycles=200)
    h.add(cycles(999, 10))
    assert h.baseline().cycles == 999 and h.window() is None
    h.add(cycles(1, 10) + cycles(150, 10) + cycles(300, 12, accept=1.2))
    b, w = h.baseline(), h.window()
    assert (b.cycles, b.cycle_s, b.accept) == (1000, 0.010, 1.5)
    assert (w.cycles, w.cycle_s, w.accept) == (200, 0.012, pytest.approx(1.2))
    assert h.cycles_seen == 1450 and len(h._recent) == 200  # what the window needs, no more


def test_history_rolling_baseline_follows():
    h = T.History(baseline_cycles=100, window_cycles=20, rolling=True)
    h.add(cycles(500, 10) + cycles(100, 12))
    assert h.baseline().cycle_s == 0.012 and h.baseline().cycles == 100 and h.window().cycle_s == 0.012
    h.add(cycles(20, 15))
    b, w = h.baseline(), h.window()
    assert (b.cycles, b.cycle_s, w.cycles, w.cycle_s) == (100, 0.012, 20, 0.015)


# ------------------------------------------------------------------ metrics

def test_metrics_deltas_from_the_shims_own_exposition():
    prom = pytest.importorskip("prometheus_client")
    from nvtx_annotate.live.metrics import make_metrics

    registry = prom.CollectorRegistry()
    m0, m1 = make_metrics(0, registry=registry), None

    def row(start_ms, cycle_ms, acc, reqs):
        r = dict.fromkeys(ROW_FIELDS)
        r.update(rank=0, pid=1, cycle=1, host_start_ns=int(start_ms * 1e6), host_end_ns=int((start_ms + cycle_ms) * 1e6),
                 accepted_tokens=acc, requests=reqs)
        return r

    for i in range(4):
        m0.observe(row(100 * i, 10, 6, 4))  # 1.5 accepted per request
    first = T.parse_metrics(prom.generate_latest(registry).decode())
    assert first == {(("rank", "0"),): {"cycle_sum": pytest.approx(0.04), "cycle_n": 4.0,
                                        "accept_sum": pytest.approx(6.0), "accept_n": 4.0}}
    s = T.metric_delta(None, first[(("rank", "0"),)])
    assert (s.cycles, s.accept_cycles) == (4, 4) and s.cycle_s == pytest.approx(0.010) and s.accept == pytest.approx(1.5)
    for i in range(2):
        m0.observe(row(1000 + 100 * i, 20, 2, 4))
    second = T.parse_metrics(prom.generate_latest(registry).decode())[(("rank", "0"),)]
    s = T.metric_delta(first[(("rank", "0"),)], second)
    assert s.cycles == 2 and s.cycle_s == pytest.approx(0.020) and s.accept == pytest.approx(0.5)
    assert T.metric_delta(second, second) is None
    # a restarted worker (count went down) starts over
    assert T.metric_delta(second, {"cycle_n": 1, "cycle_sum": 0.5}).cycle_s == 0.5
    assert m1 is None


# ------------------------------------------------------------------ end to end

def write_cycles(w: LogWriter, n: int, cycle_ms: float, accepted: int, requests: int, t0_ms: float, first: int):
    for i in range(n):
        r = dict.fromkeys(ROW_FIELDS)
        start = int((t0_ms + i * (cycle_ms + 1)) * 1e6)
        r.update(rank=w.rank, pid=w.pid, cycle=first + i, host_start_ns=start, host_end_ns=start + int(cycle_ms * 1e6),
                 verify_ns=int(cycle_ms * 0.6e6), accepted_tokens=accepted, requests=requests, steps=3,
                 verified_tokens=4 * requests, batch_size=requests)
        w.add(r)
    w.close()  # the file is complete (renamed from .parquet.tmp): the trigger may read it


def test_the_log_source_reads_open_streams_as_they_grow_and_each_cycle_once(tmp_path):
    """The watcher is a batch behind the server, not a file's age: an open stream's whole batches are read as they
    come, and its rows are not read again once the file is completed as Parquet; rank 1's rows are left out."""
    w = LogWriter(str(tmp_path), rank=0, pid=11, row_group_rows=4, max_age_s=3600)
    other = LogWriter(str(tmp_path), rank=1, pid=12, row_group_rows=4, max_age_s=3600)
    src = T.LogDirSource(str(tmp_path), rank=0, log=lambda m: None)

    def add(writer, first, n):
        for i in range(n):
            r = dict.fromkeys(ROW_FIELDS)
            start = (first + i) * 10**7
            r.update(rank=writer.rank, pid=writer.pid, cycle=first + i, host_start_ns=start, host_end_ns=start + 10**6,
                     accepted_tokens=2, requests=1)
            writer.add(r)

    add(w, 0, 6)                                   # one batch of 4 written, 2 buffered
    add(other, 0, 8)
    assert [p.suffix for p in sorted(tmp_path.iterdir())] == [".arrows", ".arrows"]
    assert len(src.poll()) == 4
    assert src.poll() == []                        # nothing new
    add(w, 6, 2)                                   # the second batch (rows 4..7)
    assert len(src.poll()) == 4
    add(w, 8, 1)
    w.close()                                      # completed: 9 rows in its Parquet, 8 already taken
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".arrows", ".parquet"]
    got = src.poll()
    assert len(got) == 1 and src.poll() == []
    other.close()
    assert src.poll() == []                        # rank 1: never taken


def start_fake(tmp_path, *extra):
    port = free_port()
    log = tmp_path / "server_events.json"
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", str(port), "--startup-s", "0", "--log", str(log),
                             *extra], start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    serve.wait_ready(url, 30, alive=lambda: proc.poll() is None, poll_s=0.1)
    return proc, url, log


def wait_for(pred, timeout=30.0):
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        if pred():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("dry_run", [False, True])
def test_end_to_end_posts_once_on_a_live_log(tmp_path, dry_run):
    logs, events, err = tmp_path / "live", tmp_path / "triggers.jsonl", tmp_path / "trigger.err"
    r0 = LogWriter(str(logs), rank=0, pid=4242, row_group_rows=256)
    r1 = LogWriter(str(logs), rank=1, pid=4243, row_group_rows=256)
    # 1000 steady cycles: 10 ms, 6 accepted over 4 requests (1.5); rank 1 the same
    write_cycles(r0, 1000, 10.0, 6, 4, t0_ms=0, first=1)
    write_cycles(r1, 1000, 10.0, 6, 4, t0_ms=0, first=1)
    proc, url, server_log = start_fake(tmp_path)
    cmd = [sys.executable, "-m", "nvtx_annotate.live.trigger", "--server", url, "--log-dir", str(logs),
           "--poll-s", "0.1", "--events", str(events), "--capture-steps", "50", "--cooldown-s", "600"]
    with open(err, "w") as errf:
        trig = subprocess.Popen(cmd + (["--dry-run"] if dry_run else []), cwd=REPO, stderr=errf,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert wait_for(lambda: "waiting: baseline 1000 cycles, window 0 cycles" in err.read_text()), err.read_text()
        # rank 0 slows down by 20% (12 ms); rank 1 stays at 10 ms: only rank 0 is followed (pooled, the
        # window's median would be 11 ms, +10%, no trigger)
        write_cycles(r0, 200, 12.0, 6, 4, t0_ms=20_000, first=1001)
        write_cycles(r1, 200, 10.0, 6, 4, t0_ms=20_000, first=1001)
        assert wait_for(lambda: events.exists()), err.read_text()
        # still slow: moved, but within the cooldown, so no second POST
        write_cycles(r0, 200, 12.5, 6, 4, t0_ms=40_000, first=1201)
        assert wait_for(lambda: "moved, in cooldown" in err.read_text()), err.read_text()
    finally:
        trig.send_signal(signal.SIGINT)
        rc = trig.wait(30)
        serve.stop_process_group(proc, grace_s=10)
    text = err.read_text()
    assert rc == 130, text
    assert text.count("TRIGGER: cycle time 10.000 ms -> 12.000 ms (+20.0%, threshold 15%, MOVED); "
                      "acceptance 1.500 -> 1.500 (+0.0%, threshold 15%) over 200 cycles (baseline 1000 cycles)") == 1
    assert "moved, in cooldown: cycle time 10.000 ms -> 12.500 ms (+25.0%" in text
    posted = [e["start_profile"] for e in json.loads(server_log.read_text())["events"] if "start_profile" in e]
    lines = [json.loads(x) for x in events.read_text().splitlines()]
    assert len(lines) == 1
    ev = lines[0]
    assert ev["body"] == {"activities": ["CUDA_PROFILER"], "num_steps": 50} and ev["server"] == url
    assert ev["decision"]["baseline"] == {"cycles": 1000, "cycle_s": 0.010, "accept": 1.5, "accept_cycles": 1000}
    assert ev["decision"]["window"] == {"cycles": 200, "cycle_s": 0.012, "accept": 1.5, "accept_cycles": 200}
    assert ev["error"] is None and ev["dry_run"] is dry_run
    if dry_run:
        assert posted == [] and ev["posted"] is False and ev["response"] is None
        assert 'dry run: would POST %s/start_profile {"activities": ["CUDA_PROFILER"], "num_steps": 50}' % url in text
    else:
        assert posted == [{"activities": ["CUDA_PROFILER"], "num_steps": 50}]
        assert ev["posted"] is True and ev["response"] == "Start profiling."


class ListSource:
    def __init__(self, batches):
        self.batches = list(batches)

    def poll(self):
        return self.batches.pop(0) if self.batches else []


def test_server_errors_are_one_line_and_the_watch_goes_on(tmp_path):
    proc, url, server_log = start_fake(tmp_path, "--fail-start-profile", "1")
    lines, clock = [], [0.0]
    try:
        trig = T.Trigger(server=url, thresholds=T.Thresholds(window_cycles=200, baseline_cycles=1000, cooldown_s=600),
                         events=str(tmp_path / "ev.jsonl"), log=lines.append, clock=lambda: clock[0])
        src = ListSource([cycles(1000, 10), cycles(200, 13), cycles(200, 13), cycles(200, 13)])

        def sleep(_):
            clock[0] += 400  # each poll 400 s later: the third batch is past the 600 s cooldown

        n = T.run(src, T.History(1000, 200), trig, poll_s=1, duration_s=1500, sleep=sleep)
    finally:
        serve.stop_process_group(proc, grace_s=10)
    assert n == 2
    failed = [x for x in lines if "failed" in x]
    assert failed == [f"POST {url}/start_profile failed: HTTP 500 Internal Server Error: Internal Server Error "
                      "(still watching; next capture possible after the 600 s cooldown)"]
    assert [x.split(":")[0] for x in lines] == ["waiting", "TRIGGER", "POST " + url.split(":")[0], "moved, in cooldown",
                                                "TRIGGER", "POST " + url.split(":")[0]]
    assert lines[-1] == f'POST {url}/start_profile {{"activities": ["CUDA_PROFILER"], "num_steps": 50}}: Start profiling.'
    ev = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert [(e["posted"], e["error"]) for e in ev] == [(False, "HTTP 500 Internal Server Error: Internal Server Error"),
                                                       (True, None)]
    # an unreachable server: one line too
    dead = T.Trigger(server=f"http://127.0.0.1:{free_port()}", thresholds=T.Thresholds(), log=lines.append)
    dead.fire(T.decide(BASE, win(cycle_s=0.02), T.Thresholds(), 0.0), 0.0)
    assert lines[-1].startswith(f"POST {dead.server}/start_profile failed: [Errno 111] Connection refused")


def test_cli_refuses_bad_options(capsys):
    with pytest.raises(SystemExit) as e:
        T.main(["--server", "http://x:1"])
    assert e.value.code == 2 and "--log-dir" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        T.main(["--server", "http://x:1", "--log-dir", "d", "--cycle-change", "0", "--acceptance-change", "0"])
    assert "nothing would ever trigger" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        T.main(["--server", "http://x:1", "--log-dir", "d", "--rank", "two"])
    assert "--rank" in capsys.readouterr().err


def test_the_docs_show_what_the_code_prints_and_parses():
    doc = (REPO / "docs" / "live_trigger.md").read_text()
    d = T.decide(BASE, win(cycle_s=0.012), TH, now=0.0)
    assert "specprof-trigger: " + T.describe(d) in doc
    assert "specprof-trigger: " + T.describe(T.decide(BASE, win(cycles=0), TH, 0.0)) in doc
    # every option of the parser is in the table, and the table names no other
    opts = {s for a in T.build_parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    import re
    table = set(re.findall(r"^\| `(--[a-z-]+)", doc, re.M)) | set(re.findall(r"/ `(--[a-z-]+)", doc))
    assert table == opts
    assert "live_trigger.md" in (REPO / "docs" / "live.md").read_text()


@pytest.mark.parametrize("sig, rc, ignored", [(signal.SIGINT, 130, False), (signal.SIGINT, 130, True),
                                              (signal.SIGTERM, 143, False)],
                         ids=["SIGINT", "SIGINT-inherited-ignored", "SIGTERM"])
def test_a_signal_stops_the_watcher_between_polls(tmp_path, sig, rc, ignored):
    """SIGINT (Ctrl-C) or SIGTERM end the watcher between two polls with its summary line, never inside a
    read; also where SIGINT came in ignored (a command started in the background of a script)."""
    err = tmp_path / "trigger.err"
    (tmp_path / "live").mkdir()
    cmd = [sys.executable, "-m", "nvtx_annotate.live.trigger", "--server", "http://127.0.0.1:9", "--log-dir",
           str(tmp_path / "live"), "--poll-s", "0.1"]
    pre = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignored else None
    with open(err, "w") as errf:
        proc = subprocess.Popen(cmd, cwd=REPO, stderr=errf, env={**os.environ, "PYTHONPATH": str(REPO)},
                                preexec_fn=pre)
    try:
        assert wait_for(lambda: "watching log directory" in err.read_text()), err.read_text()
        proc.send_signal(sig)
        assert proc.wait(30) == rc
    finally:
        if proc.poll() is None:
            proc.kill()
    assert err.read_text().rstrip().endswith("stopped (0 trigger(s))")
