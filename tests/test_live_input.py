"""A live timing log (the shim's SPECPROF_TIMING=1 mode, issue 43) as an input of analyze-trace
(analyze/run/live.py): logs are written by the shim's own timer (nvtx_annotate/live/events.Timer, stub
CUDA events with known device times, a host clock set by hand) and log writer, then read by the
report, whatif (with --calibrate-live), advise and diff; every figure checked against the values
written."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import notes as N
from analyze import views
from analyze.tools import sides
from helpers import cli_process
from nvtx_annotate import protocol as P
from nvtx_annotate.live import events as E
from nvtx_annotate.live.log import LogWriter

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the shim's timer on stub events
class Gpu:
    """A device clock: a stub event takes its time when recorded."""

    def __init__(self):
        self.now = 0

    def events(self):
        gpu = self

        class Ev:
            t = None

            def record(self):
                self.t = gpu.now

            def query(self):
                return True

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e6      # ms, as torch

        return Ev, lambda: False


class Clock:
    """The host clock: the next value of a list per call (the timer reads it at a cycle's start and end and
    at each phase's entry and exit)."""

    def __init__(self):
        self.values: list[int] = []

    def __call__(self):
        return self.values.pop(0)


def cycle_values(n, start=1_000_000_000, seed=0, steps=3, verify=400_000, reqs=None):
    """n cycles of known values: host start/end, GPU ns per phase, accepted tokens, requests."""
    rng = np.random.default_rng(seed)
    out, t = [], start
    for i in range(n):
        dur = int(800_000 + rng.integers(0, 100_000))
        gap = int(50_000 + rng.integers(0, 50_000))
        out.append({"start": t, "end": t + dur, "draft": 100_000 * (steps - 1) + int(rng.integers(0, 5_000)),
                    "verify": verify + int(rng.integers(0, 5_000)), "allreduce": 20_000 + int(rng.integers(0, 500)),
                    "draft_extend": 150_000 + int(rng.integers(0, 5_000)), "accepted": int(rng.integers(0, steps + 1)),
                    "requests": 1 if reqs is None else int(reqs[i % len(reqs)])})
        t += dur + gap
    return out


def timed_rows(values, rank, pid, steps, sample_every=1):
    """The rows the shim's timer resolves from ``values`` (its real code path, stub events)."""
    gpu, clock, rows = Gpu(), Clock(), []
    t = E.Timer(rows.append, events=gpu.events(), clock=clock, accept_lag=0, sample_every=sample_every)
    t.rank, t.spec = rank, P.SpecConfig("EAGLE", steps, 1, steps + 1, 2, True, 8)
    for k, v in enumerate(values, start=1):
        # the cycle's start, each phase's entry and exit (draft, verify, all-reduce in it, draft_extend:
        # 8 readings, evenly between; none in a cycle the sampling leaves untimed), its end
        step = (v["end"] - v["start"]) // 9
        inside = [v["start"] + step * i for i in range(1, 9)] if k % sample_every == 0 else []
        clock.values += [v["start"]] + inside + [v["end"]]
        t.push(P.DECODE_CYCLE, k)
        gpu.now += 10_000
        t.push(P.DRAFT)
        gpu.now += v["draft"]
        t.pop()
        t.push(P.VERIFY)
        gpu.now += v["verify"] - v["allreduce"]
        t.push(P.ALLREDUCE)
        gpu.now += v["allreduce"]
        t.pop()
        t.pop()
        t.push(P.DRAFT_EXTEND)
        gpu.now += v["draft_extend"]
        t.pop()
        t.accept(v["accepted"], v["requests"], None, lengths=v.get("lens"))
        if "steps" in v:                # adaptive speculation: the worker's step count of this cycle
            t.cycle_steps(v["steps"])
        t.pop()
    t.poll()
    assert len(rows) == len(values)
    return [dict(r, pid=pid) for r in rows]


def write_log(directory, rank, pid, steps, values, sample_every=1):
    w = LogWriter(str(directory), rank, pid, spec_config=P.SpecConfig("EAGLE", steps, 1, steps + 1, 2, True, 8),
                  row_group_rows=16)
    for r in timed_rows(values, rank, pid, steps, sample_every):
        w.add(r)
    w.close()
    return values


def steady_by_hand(values):
    """The steady cycles of one process by hand: all but the first (no outlier in these values)."""
    return values[1:]


def periods(values):
    """Host start to next start; the last cycle: its own duration."""
    return [b["start"] - a["start"] for a, b in zip(values, values[1:])] + [values[-1]["end"] - values[-1]["start"]]


def tps_by_hand(values):
    per = periods(values)[1:]
    tok = [v["accepted"] + v["requests"] for v in values[1:]]
    return sum(tok) * 1e9 / sum(per)


@pytest.fixture()
def two_ranks(tmp_path):
    d = tmp_path / "live"
    vals = {0: write_log(d, 0, 100, 3, cycle_values(30, seed=1)),
            1: write_log(d, 1, 101, 3, cycle_values(30, seed=2))}
    return d, vals


def cli(*args, cwd=ROOT):
    return cli_process.run([*map(str, args)], cwd=cwd)


def whatif_json(tmp_path, *args):
    """``analyze-trace whatif ARGS --boot 0 --json OUT``: (the process, OUT read), the run asserted to pass."""
    out = tmp_path / "w.json"
    proc = cli("whatif", *args, "--boot", "0", "--json", out)
    assert proc.returncode == 0, proc.stderr
    return proc, json.loads(out.read_text())


# ------------------------------------------------------------------ the cycle table
def test_cycle_table_holds_the_logged_values(two_ranks):
    d, vals = two_ranks
    a = analyze.load(d)
    c = a.cycles
    assert a.phase_names == ["draft", "verify", "draft_extend", "allreduce"]
    assert len(a.kernels) == 0 and len(a.phases) == 0 and len(a.gpu_ops) == 0 and len(a.collectives) == 0
    assert "gpu_period_ns" not in c.columns
    # flags derived once over the whole log by the one rule (timeline.cycles.with_flags): each rank's
    # (each process's) first cycle is warm-up
    assert c.groupby("rank")["warmup_reason"].first().tolist() == ["first", "first"]
    for rank, v in vals.items():
        r = c[c["rank"] == rank].reset_index(drop=True)
        assert r["cycle"].tolist() == list(range(len(v)))
        assert r["shim_cycle"].tolist() == list(range(1, len(v) + 1))
        assert r["start_ns"].tolist() == [x["start"] for x in v] == r["cpu_start_ns"].tolist()
        assert r["end_ns"].tolist() == [x["end"] for x in v]
        assert r["period_ns"].tolist() == periods(v)
        for p in ("draft", "verify", "draft_extend", "allreduce"):
            assert r[f"{p}_ns"].tolist() == [x[p] for x in v], p
        busy = [x["draft"] + x["verify"] + x["draft_extend"] for x in v]     # the all-reduce is inside verify
        assert r["busy_ns"].tolist() == busy
        assert r["period_idle_ns"].tolist() == [p - b for p, b in zip(periods(v), busy)]
        assert (r["period_allreduce_ns"] == 0).all() and r["other_ns"].isna().all() and r["gap_ns"].isna().all()
        assert r["accepted_tokens"].tolist() == [x["accepted"] for x in v]
        assert r["tokens"].tolist() == [x["accepted"] + x["requests"] for x in v]
        assert r["steps"].tolist() == [3] * len(v)
    assert sides.spec_config_of(a.ranks).steps == 3 and set(a.ranks["source"]) == {"live_log"}
    codes = [n.code for n in a.notes]
    assert N.LIVE_LOG_NO_KERNELS in codes and N.LIVE_LOG_NESTED_ALLREDUCE in codes
    assert [n.count for n in a.notes if n.code == N.LIVE_LOG_NO_PERIOD] == [2]      # one last cycle per process


def test_headline_tokens_per_s_is_tokens_over_periods_of_the_steady_cycles(two_ranks):
    d, vals = two_ranks
    a = analyze.load(d)
    sm = views.get(a, "decode_summary").set_index("rank")
    for rank, v in vals.items():
        assert sm.loc[rank, "steady_cycles"] == len(v) - 1
        assert sm.loc[rank, "tokens_per_s"] == pytest.approx(tps_by_hand(v), rel=1e-12)
    head = views.get(a, "headline")
    assert f"{tps_by_hand(vals[0]):,.0f} tokens/s" in head
    assert "outside the timed phases" in head and "no kernel tables" in head and "GPU is idle" not in head
    bd = views.get(a, "decode_breakdown").set_index(["rank", "component"])
    v = vals[0][1:]
    assert bd.loc[(0, "verify"), "per_cycle_ns"] == pytest.approx(np.mean([x["verify"] for x in v]))
    assert sides.live_tokens_per_s(a.cycles)["tokens_per_s"] == pytest.approx(tps_by_hand(vals[0]), rel=1e-12)


def test_cli_report_text_json_html(two_ranks, tmp_path):
    d, vals = two_ranks
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    proc = cli(d, "--json", out, "--html", page)
    assert proc.returncode == 0, proc.stderr
    assert "specprof live timing log, schema 1, 2 file(s)" in proc.stdout
    assert "Kernels, exclusive phase times, NVTX ranges and collectives: absent" in proc.stdout
    assert f"{tps_by_hand(vals[0]):,.0f} tokens/s" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if "live_log" in line.split()]
    assert len(rows) == 2 and all(r[2] == "-" for r in rows), rows     # the log names no device: "-", not None
    data = json.loads(out.read_text())
    assert {n["code"] for n in data["notes"]} >= {N.LIVE_LOG_NO_KERNELS, N.LIVE_LOG_NESTED_ALLREDUCE}
    assert [r["verify_ns"] for r in data["cycles"] if r["rank"] == 0] == [x["verify"] for x in vals[0]]
    html = page.read_text()
    assert "Kernel-level tables" in html and "absent: a live timing log" in html
    # a JSON result of a live log is a side of diff/whatif that knows it is one
    assert sides.load_side(out).live
    proc = cli(d, "--perfetto", tmp_path / "t.pftrace", "-q")          # no GPU timeline: refused, one line
    assert proc.returncode == 10 and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t.pftrace").exists()


def test_a_parquet_file_that_is_not_a_live_log_is_refused_with_one_line(tmp_path):
    other = tmp_path / "other.parquet"
    pd.DataFrame({"rank": [0], "cycle": [1]}).to_parquet(other)
    proc = cli(other)
    assert proc.returncode == 12, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a specprof timing log" in lines[0] and "other.parquet" in lines[0]
    proc = cli(tmp_path)                   # a directory of it: the same
    assert proc.returncode == 12 and len(proc.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ whatif
def test_whatif_models_a_live_log_from_its_phase_times(two_ranks):
    from analyze.tools.whatif import model as W

    d, vals = two_ranks
    a = analyze.load(d)
    r = W.whatif(a, range(1, 6), n_boot=0)
    prof = r["profiles"][0]
    assert prof["steps"] == 3 and prof["live"]
    assert prof["steps_source"].startswith("SGLang's --speculative-num-steps")
    steady = [x for v in vals.values() for x in v[1:]]
    assert prof["draft_ns"] == pytest.approx(np.mean([x["draft"] for x in steady]))
    assert prof["draft_step_ns"] == pytest.approx(prof["draft_ns"] / 2)     # SGLang: 3 steps, 2 draft forwards
    assert prof["draft_step_source"] == "draft GPU time / draft forwards"
    # the same host times on both ranks' clocks? No: the model's cycle is the mean over ranks per cycle
    per = np.mean([np.mean(periods(v)[1:]) for v in vals.values()])
    assert prof["cycle_ns"] == pytest.approx(per)
    assert any("a live timing log: kernel tables absent" in n for n in r["notes"])
    assert any("no calibration needed: a live timing log" in x for x in r["assumptions"])
    assert r["baseline"]["source"] == "estimated" and "without draft and draft_extend" in r["baseline"]["method"]


def _synth_profile(tmp_path, k=3):
    from fixtures.synth import TraceSpec, write_trace

    accept = [0, 1, 2, 3] * 10
    paths, _ = write_trace(TraceSpec(ranks=1, cycles=len(accept), draft_steps=k, jitter=0, second_thread_ranges=False,
                                     accept_lengths=[[min(a, k) for a in accept]]), tmp_path / "profile")
    return paths[0]


def test_whatif_calibrates_from_a_live_log(tmp_path):
    prof = _synth_profile(tmp_path)
    log = tmp_path / "live"
    v1 = write_log(log, 0, 300, 3, cycle_values(24, seed=3, reqs=[1, 1, 2]))
    write_log(log, 1, 301, 3, cycle_values(24, seed=4, reqs=[1, 1, 2]))
    proc, data = whatif_json(tmp_path, prof, "--calibrate-live", log, "--steps", "1..5")
    expect = tps_by_hand(v1)                       # rank 0's steady cycles, every batch size
    cal = data["calibration"]
    assert cal["steps"] == 3 and cal["tokens_per_s"] == pytest.approx(expect, rel=1e-12)
    assert cal["source"]["kind"] == "live_log" and cal["source"]["rank"] == 0 and cal["source"]["cycles"] == 23
    row3 = [r for r in data["predictions"] if r["steps"] == 3][0]
    assert row3["tokens_per_s"] == pytest.approx(expect)
    assert "from the live log" in proc.stdout and "Calibrated to" in proc.stdout
    # --batch 1: only the cycles of one request (steady among them: the first left out)
    ones = [x for x in v1 if x["requests"] == 1]
    per = {id(x): p for x, p in zip(v1, periods(v1))}
    want = sum(x["accepted"] + 1 for x in ones[1:]) * 1e9 / sum(per[id(x)] for x in ones[1:])
    from analyze.tools.whatif.command import live_calibration

    k, x, source = live_calibration(log, [sides.load_side(prof)], None, None, 1)   # what --batch 1 asks for
    assert (k, source["batch"], source["cycles"]) == (3, 1, len(ones) - 1)
    assert x == pytest.approx(want, rel=1e-12)
    # a log of another step count cannot calibrate this profile: one line, exit 12
    other = tmp_path / "live2"
    write_log(other, 0, 400, 2, cycle_values(10, seed=5, steps=2))
    proc = cli("whatif", prof, "--calibrate-live", other, "--boot", "0")
    assert proc.returncode == 12 and len(proc.stderr.strip().splitlines()) == 1
    assert "no steady cycle at 3 draft steps" in proc.stderr and "step counts: 2" in proc.stderr
    proc = cli("whatif", prof, "--calibrate-live", log, "--calibrate-tps", "100")
    assert proc.returncode == 10


def test_whatif_on_a_live_log_of_two_step_counts_fits_them_and_shows_the_measured(tmp_path):
    log = tmp_path / "adaptive"
    v2 = write_log(log, 0, 500, 2, cycle_values(30, seed=6, steps=2, verify=300_000))
    v4 = write_log(log, 0, 501, 4, cycle_values(30, start=5_000_000_000, seed=7, steps=4, verify=340_000))
    proc, data = whatif_json(tmp_path, log, "--steps", "1..6")
    assert sorted(p["steps"] for p in data["profiles"]) == [2, 4]
    pred = {r["steps"]: r for r in data["predictions"]}
    assert pred[2]["measured_tokens_per_s"] == pytest.approx(tps_by_hand(v2), rel=1e-12)
    assert pred[4]["measured_tokens_per_s"] == pytest.approx(tps_by_hand(v4), rel=1e-12)
    assert pred[3]["measured_tokens_per_s"] is None
    assert any(n.startswith("measured: tokens/s of the live timing log") for n in data["notes"])
    assert "measured tok/s" in proc.stdout


# ------------------------------------------------------------------ advise, diff
def test_advise_on_a_live_log_uses_no_kernel_rule(two_ranks):
    from analyze import findings as F
    from analyze.tools.advise.model import advise

    d, _ = two_ranks
    adv = advise(analyze.load(d))
    checks = {c.rule: c for c in adv.checks}
    for rule in (F.ALLREDUCE, F.HOST_BOUND, F.STRAGGLER):
        assert checks[rule].status == F.NOT_APPLICABLE and "live timing log" in checks[rule].reason
    assert not {f.rule for f in adv.findings} & {F.ALLREDUCE, F.HOST_BOUND, F.STRAGGLER}
    kernel_keys = {"kinds", "launch_gaps_per_cycle", "graph_ops_share", "message_sizes"}
    assert not any(kernel_keys & set(f.evidence) for f in adv.findings)
    proc = cli("advise", d)
    assert proc.returncode == 0, proc.stderr
    assert "(a live timing log: no kernel tables" in proc.stdout


def test_diff_of_two_live_logs_reports_the_verify_delta(tmp_path):
    from analyze.tools.diff.model import diff_results

    before, after = tmp_path / "before", tmp_path / "after"
    vals = cycle_values(25, seed=8)
    write_log(before, 0, 600, 3, vals)
    write_log(after, 0, 601, 3, [dict(x, verify=x["verify"] + 50_000) for x in vals])
    d = diff_results(sides.load_side(before), sides.load_side(after), n_boot=50)
    row = d["summary"].set_index(["rank", "figure"]).loc[("all", "verify_ns")]
    assert row["delta"] == pytest.approx(50_000) and bool(row["significant"])
    assert any("a live timing log: kernel tables absent" in n for n in d["notes"])
    proc = cli("diff", before, after, "--boot", "50")
    assert proc.returncode == 0, proc.stderr
    assert "kernel tables absent" in proc.stdout


def test_the_log_holds_each_phases_host_time_and_the_compare_recipe_shows_it(tmp_path):
    """``<phase>_host_ns``: the host time between the phase's entry and exit, from the timer's own clock
    readings (here 8 between a cycle's start and end, evenly spaced: draft 1 step, verify 3, the
    all-reduce in it 1, draft_extend 1)."""
    import importlib.util

    from analyze.run import live

    values = cycle_values(6)
    write_log(tmp_path, 0, 11, 3, values)
    raw, _ = live.read_raw([tmp_path])
    steps = [(v["end"] - v["start"]) // 9 for v in values]
    assert raw["draft_host_ns"].tolist() == steps
    assert raw["verify_host_ns"].tolist() == [3 * s for s in steps]
    assert raw["allreduce_host_ns"].tolist() == steps
    spec = importlib.util.spec_from_file_location("live_compare", ROOT / "recipes" / "live_compare.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    host = mod.host_summary(str(tmp_path))
    assert host.loc[1, "verify_host_ns"] == round(float(np.median([3 * s for s in steps])) / 1e3, 1)


def test_a_sampled_log_takes_phases_from_its_timed_cycles_and_the_rest_from_every_cycle(tmp_path):
    """SPECPROF_TIMING_SAMPLE=3: events in cycles 3, 6, ... only. Every cycle is logged and stays a steady
    cycle (the timed ones pay the events' cost, the others do not): tokens/s, periods and acceptance are
    every cycle's; the phases and "outside the timed phases" the timed cycles' split, carried onto the mean
    period of every cycle (timeline/cycles.sampled_scale). The report (text, JSON, HTML, plots), whatif, --per-batch, advise and diff run on it."""
    d = tmp_path / "live"
    v = write_log(d, 0, 100, 3, cycle_values(30, seed=3), sample_every=3)
    a = analyze.load(d)
    c = a.cycles
    assert len(c) == 30 and c["timed"].tolist() == [k % 3 == 0 for k in range(1, 31)]
    untimed = ~c["timed"]
    assert c.loc[untimed, "verify_ns"].isna().all() and c.loc[~untimed, "verify_ns"].notna().all()
    assert c.loc[untimed, "period_idle_ns"].isna().all() and c.loc[~untimed, "period_idle_ns"].notna().all()
    assert c["warmup_reason"].tolist()[:3] == ["first", None, None]
    per = periods(v)
    sm = views.get(a, "decode_summary").set_index("rank")
    assert sm.loc[0, "steady_cycles"] == 29
    assert sm.loc[0, "tokens_per_s"] == pytest.approx(tps_by_hand(v), rel=1e-12)
    assert sm.loc[0, "period_mean_ns"] == pytest.approx(np.mean(per[1:]))
    timed = [x for k, x in enumerate(v, start=1) if k % 3 == 0]
    bd = views.get(a, "decode_breakdown").set_index(["rank", "component"])
    # the timed cycles' split carried onto the mean period of every steady cycle (their own is longer:
    # they pay the events), so each component keeps its share of the timed cycles
    scale = np.mean(per[1:]) / np.mean([p for k, p in enumerate(per, start=1) if k % 3 == 0])
    assert scale != pytest.approx(1.0)
    assert bd.loc[(0, "verify"), "per_cycle_ns"] == pytest.approx(np.mean([x["verify"] for x in timed]) * scale)
    assert bd.loc[0, "per_cycle_ns"].sum() == pytest.approx(np.mean(per[1:]))       # adds up to the mean period
    # the summary's busy time per cycle is the breakdown's timed phases (the same carried-over split)
    busy = bd.loc[0, "per_cycle_ns"].drop(labels=["gpu_idle"], errors="ignore").sum()
    assert sm.loc[0, "busy_per_cycle_ns"] == pytest.approx(busy)
    assert bd.loc[0, "share"].sum() == pytest.approx(1.0)
    dist = views.get(a, "cycle_distribution").set_index("figure")
    assert dist.loc["verify", "cycles"] == 10 and dist.loc["cycle period", "cycles"] == 30
    assert [n.count for n in a.notes if n.code == N.LIVE_LOG_SAMPLED] == [20]
    out = tmp_path / "out"
    proc = cli(d, "--json", tmp_path / "r.json", "--html", tmp_path / "r.html", "--plots", out)
    assert proc.returncode == 0, proc.stderr
    assert "the shim timed 10 of 30 cycles" in " ".join(proc.stdout.split())
    assert list(out.glob("*.png"))
    from analyze.cli import main

    for args in (("whatif", d, "--steps", "1..4", "--boot", "20"), ("whatif", d, "--per-batch", "--boot", "20"), ("advise", d),
                 ("diff", d, d)):
        assert main([str(x) for x in args]) == 0, args
    # whatif's overhead is the mean period less the timed phases' means: at the logged 3 steps it gives back
    # every cycle's tokens/s (the rounds' tail aside)
    side = sides.load_side(str(d))
    from analyze.tools.whatif import model as W
    r = W.whatif(side, range(1, 5), n_boot=0)
    pred = r["predictions"].set_index("steps")
    assert pred.loc[3, "tokens_per_s"] == pytest.approx(tps_by_hand(v), rel=0.02)


def test_one_adaptive_process_switching_step_counts_is_fitted_per_step_count(tmp_path):
    """One process under --speculative-adaptive: 30 cycles at 2 steps, then 30 at 4 (each row carries its
    cycle's step count): whatif shows both as profiled, each with its own measured tokens/s."""
    a = [dict(x, steps=2) for x in cycle_values(30, seed=8, steps=2, verify=300_000)]
    b = [dict(x, steps=4) for x in cycle_values(30, start=a[-1]["end"] + 60_000, seed=9, steps=4, verify=340_000)]
    log = tmp_path / "adaptive1"
    write_log(log, 0, 700, 2, a + b)
    proc, data = whatif_json(tmp_path, log, "--steps", "1..6")
    assert sorted(p["steps"] for p in data["profiles"]) == [2, 4]
    pred = {r["steps"]: r for r in data["predictions"]}
    # every cycle at 4 steps is steady (the process's first cycle is at 2): tokens over their periods
    tok = sum(x["accepted"] + x["requests"] for x in b)
    assert pred[4]["measured_tokens_per_s"] == pytest.approx(tok * 1e9 / sum(periods(b)), rel=1e-12)


def _sampled_two_batches(tmp_path, sample_every=17, n=340):
    """One process at batch 1 then batch 16 (n cycles each), events in one cycle of ``sample_every``."""
    one = cycle_values(n, seed=11, verify=400_000)
    sixteen = [dict(x, requests=16, verify=x["verify"] + 300_000)
               for x in cycle_values(n, start=one[-1]["end"] + 60_000, seed=12, verify=400_000)]
    d = tmp_path / f"s{sample_every}"
    write_log(d, 0, 900, 3, one + sixteen, sample_every=sample_every)
    return d


def test_a_sampled_log_of_two_batch_sizes_gives_the_full_logs_model(tmp_path):
    """The review's case: batches 1 and 16 (the recipe's default), one cycle in 17 timed. whatif fits verify
    over the timed cycles only (a fit through the untimed cycles' nulls gave NaN and 4x the tokens/s):
    its prediction at the logged 3 steps is the full log's within 3%, per batch size, and advise gives no
    finding the full log does not."""
    full = _sampled_two_batches(tmp_path, 1)
    part = _sampled_two_batches(tmp_path, 17)
    from analyze.tools.whatif import model as W

    for batch in (1, 16):
        p = {}
        for name, d in (("full", full), ("part", part)):
            r = W.whatif(sides.load_side(str(d)), range(1, 5), n_boot=50, batch=batch)
            pred = r["predictions"].set_index("steps")
            assert np.isfinite(pred["tokens_per_s"]).all() and np.isfinite(pred["tokens_per_s_lo"]).all()
            p[name] = pred.loc[3, "tokens_per_s"]
        assert p["part"] == pytest.approx(p["full"], rel=0.03), batch
    from analyze.tools.advise.model import advise

    codes = lambda d: sorted(f.rule for f in advise(analyze.load(d)).findings)   # noqa: E731
    assert codes(part) == codes(full)


def test_no_timed_cycle_is_refused_and_the_report_still_draws(tmp_path):
    """A log none of whose steady cycles carries CUDA-event times (10 cycles, one in 17 timed: none; or
    SPECPROF_TIMING_EVENTS=0): whatif refuses with one line (a cycle of pure overhead would make draft
    steps free); the report, HTML and plots still come out."""
    d = tmp_path / "none"
    write_log(d, 0, 100, 3, cycle_values(10, seed=4), sample_every=17)
    w = cli("whatif", d, "--steps", "1..4")
    assert w.returncode != 0 and "no phase times in its steady cycles" in w.stderr
    proc = cli(d, "--html", tmp_path / "r.html", "--plots", tmp_path / "plots")
    assert proc.returncode == 0, proc.stderr


def test_zero_step_cycles_of_adaptive_mode_are_left_out_with_a_note(tmp_path):
    """SGLang's default adaptive config runs 0 steps at batch 8 and up (one token verified, no draft: not
    speculation off): those cycles are left out of whatif's model, said in a note; the rest is fitted."""
    a = [dict(x, steps=3) for x in cycle_values(30, seed=13)]
    z = [dict(x, steps=0) for x in cycle_values(20, start=a[-1]["end"] + 60_000, seed=14)]
    d = tmp_path / "ada0"
    write_log(d, 0, 800, 3, a + z)
    proc, data = whatif_json(tmp_path, d, "--steps", "1..4")
    assert [p["steps"] for p in data["profiles"]] == [3]
    assert any("20 cycles at 0 draft steps" in n for n in data["notes"])


def test_diff_of_sampled_logs_resamples_each_figure_over_its_own_cycles(tmp_path):
    """Two sampled logs of one distribution (different seeds): the phase CIs come from the timed cycles
    alone (filling the untimed with the mean narrowed them ~4x and called noise significant)."""
    from analyze.tools.diff.model import bootstrap_delta

    c = []
    for seed in (21, 22):
        d = tmp_path / f"g{seed}"
        write_log(d, 0, 100, 3, cycle_values(340, seed=seed), sample_every=17)
        c.append(sides.load_side(str(d)).cycles)
    cols = ["cycle", "period_ns", "verify_ns", "tokens"]
    t = bootstrap_delta(c[0][cols].reset_index(drop=True), c[1][cols].reset_index(drop=True),
                        time_col="period_ns").set_index("figure")
    timed = [x["verify_ns"].dropna().to_numpy(dtype="float64") for x in c]
    se = np.sqrt(sum(v.var() / len(v) for v in timed))
    assert t.loc["verify_ns", "ci_hi"] - t.loc["verify_ns", "ci_lo"] == pytest.approx(2 * 1.96 * se, rel=0.3)


def test_corrupt_log_rows_are_counted_and_never_summed():
    """clean_rows: a row without a usable id or host time (null, negative, ending before it starts) and a
    second row of one (rank, pid, cycle) are left out; negative times and counts, times longer than the
    process's whole log and a timed flag other than 0/1 are nulled; each counted (the notes say how many)."""
    from analyze.read import live_log
    from analyze.run import live

    base = {"rank": 0, "pid": 1, "host_start_ns": 0, "host_end_ns": 100, "draft_ns": 10, "verify_ns": 50,
            "draft_extend_ns": 5, "allreduce_ns": None, "accepted_tokens": 1, "requests": 1, "steps": 3,
            "timed": 1}
    rows = [dict(base, cycle=k, host_start_ns=1000 * k, host_end_ns=1000 * k + 500) for k in range(1, 9)]
    rows[1]["host_end_ns"] = rows[1]["host_start_ns"] - 1        # ends before it starts: left out
    rows[2]["rank"] = None                                        # no rank: left out
    rows[3]["cycle"] = -4                                         # negative cycle: left out
    rows.append(dict(rows[0]))                                    # a duplicate of cycle 1: left out
    rows[4]["verify_ns"] = -7                                     # nulled
    rows[5]["requests"] = -1                                      # nulled
    rows[6]["draft_ns"] = 10**12                                  # longer than the whole log: nulled
    rows[7]["timed"] = 7                                          # nulled (read as timed: the default)
    raw = pd.DataFrame(rows).astype("Int64")
    df, counts = live_log.clean_rows(raw)
    assert counts == {"rows": 3, "duplicates": 1, "values": 4}
    assert df["cycle"].tolist() == [1, 5, 6, 7, 8]
    assert df["verify_ns"].isna().sum() == 1 and df["draft_ns"].isna().sum() == 1
    frame = live_log.cycles_frame(df)
    assert (frame["period_ns"].dropna() > 0).all()
    notes = live.set_aside_notes(counts)
    assert [(n.code, n.count) for n in notes] == [(N.LIVE_LOG_BAD_ROWS, 4), (N.LIVE_LOG_BAD_VALUES, 4)]


def lens_values(n, reqs=4, steps=3, seed=5):
    """Cycles of ``reqs`` requests each with per-request accept lengths (0..steps, geometric-ish)."""
    rng = np.random.default_rng(seed)
    vals = cycle_values(n, seed=seed, steps=steps, reqs=[reqs])
    for v in vals:
        lens = [int(min(rng.geometric(0.5) - 1, steps)) for _ in range(reqs)]
        v["lens"], v["accepted"] = lens, sum(lens)
    return vals


def test_the_log_carries_each_requests_accept_length_and_whatif_reads_them_exactly(tmp_path):
    """The shim logs the per-request accept lengths (``accept_lens``, as an accept mark's lens=); whatif on the
    log then takes the exact per-request distribution (method 'lens'), not the EM deconvolution of the sums
    that a batch > 1 otherwise needs (on real SGLang at batch 16 the EM put position 2 at 0.64 where the
    lengths say 0.50)."""
    from analyze.read.live_log import live_cycles
    from analyze.run import api
    from analyze.tools import sides
    from analyze.tools.whatif import model as W

    vals = write_log(tmp_path, 0, 100, 3, lens_values(60))
    df = live_cycles(tmp_path)
    assert df["accept_lens"].tolist() == [",".join(map(str, v["lens"])) for v in vals]
    a = api.load(str(tmp_path))
    assert a.cycles["accept_lengths"].tolist() == df["accept_lens"].tolist()
    r = W.whatif(sides.as_side(a), range(1, 4), n_boot=0)
    assert r["acceptance_method"] == "lens"
    steady = [x for v in vals[1:] for x in v["lens"]]      # the first cycle is warm-up
    surv1 = sum(x >= 1 for x in steady) / len(steady)
    assert r["acceptance"].iloc[0]["survival"] == pytest.approx(surv1)
    # without the lengths (a log of an older shim): the sums, deconvolved
    old = tmp_path / "old"
    write_log(old, 0, 100, 3, [{k: v for k, v in x.items() if k != "lens"} for x in vals])
    assert W.whatif(sides.as_side(api.load(str(old))), range(1, 4), n_boot=0)["acceptance_method"] == "em"


def test_accept_lengths_that_do_not_add_up_are_nulled_and_counted(tmp_path):
    """A row whose accept_lens is not one length a request summing to its accepted tokens (damaged, or
    written by something else) is read as not logged, and counted in the bad-values note."""
    import pyarrow.parquet as pq

    from analyze import notes as N
    from analyze.read.live_log import clean_rows, read_log_file

    write_log(tmp_path, 0, 100, 3, lens_values(8))
    f = next(tmp_path.glob("*.parquet"))
    raw = read_log_file(f)
    raw.loc[1, "accept_lens"] = "9,9,9,9"          # sums to 36, not the accepted tokens
    raw.loc[2, "accept_lens"] = "1,2"              # two lengths for four requests
    raw.loc[3, "accept_lens"] = "a,b,c,d"          # not numbers
    clean, counts = clean_rows(raw)
    assert clean["accept_lens"].isna().tolist() == [False, True, True, True] + [False] * 4
    assert counts["values"] == 3
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    pq.write_table(pq.read_table(f).set_column(
        list(raw.columns).index("accept_lens"), "accept_lens",
        __import__("pyarrow").array(raw["accept_lens"].tolist(), type=__import__("pyarrow").string())),
        damaged / f.name)
    from analyze.run import api
    a = api.load(str(damaged))
    assert [n.count for n in a.notes if n.code == N.LIVE_LOG_BAD_VALUES] == [3]


def test_a_log_written_with_the_events_off_is_refused_by_whatif(tmp_path):
    """SPECPROF_TIMING_EVENTS=0 (or no CUDA): every cycle flagged timed, no phase time in any. whatif must not
    model it (a cycle of pure overhead makes draft steps free: it predicted a flat cycle and the most steps)."""
    from analyze.tools import sides
    from analyze.tools.whatif import model as W

    vals = cycle_values(30, seed=1)
    clock, rows = Clock(), []
    t = E.Timer(rows.append, events=None, clock=clock, accept_lag=0)
    t.rank, t.spec = 0, P.SpecConfig("EAGLE", 3, 1, 4, 1, True, 8)
    for k, v in enumerate(vals, start=1):
        step = (v["end"] - v["start"]) // 9
        clock.values += [v["start"]] + [v["start"] + step * i for i in range(1, 9)] + [v["end"]]
        t.push(P.DECODE_CYCLE, k)
        for ph in (P.DRAFT, P.VERIFY, P.DRAFT_EXTEND):
            t.push(ph)
            t.pop()
        t.accept(v["accepted"], v["requests"], None)
        t.pop()
    t.poll()
    assert {r["timed"] for r in rows} == {1} and {r["draft_ns"] for r in rows} == {None}
    w = LogWriter(str(tmp_path), 0, 100, spec_config=t.spec)
    for r in rows:
        w.add(dict(r, pid=100))
    w.close()
    with pytest.raises(ValueError, match="no phase times"):
        W.whatif(sides.load_side(str(tmp_path)), range(1, 6), n_boot=0)


# ------------------------------------------------------------------ open files (a process killed mid-file)
def _open_log(directory, values, rank=0, pid=100, flush_every=7):
    """A log left as a SIGKILLed process leaves it: batches of ``flush_every`` rows written to the open stream,
    never completed."""
    w = LogWriter(str(directory), rank, pid, spec_config=P.SpecConfig("EAGLE", 3, 1, 4, 2, True, 8),
                  row_group_rows=flush_every)
    for r in timed_rows(values, rank, pid, 3, 1):
        w.add(r)
    return w


def test_an_open_file_reads_as_its_completed_twin(tmp_path):
    """The stream a killed process leaves gives the cycles its complete file would (whole batches), with a note."""
    vals = cycle_values(30, seed=3)
    w = _open_log(tmp_path / "open", vals)
    assert w.buffered() == 30 % 7 and [p.suffix for p in (tmp_path / "open").iterdir()] == [".arrows"]
    done = _open_log(tmp_path / "done", vals)
    done.close()
    opened, closed = analyze.load(tmp_path / "open"), analyze.load(tmp_path / "done")
    n = 30 - 30 % 7                                    # the rows still buffered were never written
    assert len(opened.cycles) == n and len(closed.cycles) == 30
    cols = ["cycle", "start_ns", "end_ns", "draft_ns", "verify_ns", "accepted_tokens"]
    pd.testing.assert_frame_equal(opened.cycles[cols].iloc[:n - 1].reset_index(drop=True),
                                  closed.cycles[cols].iloc[:n - 1].reset_index(drop=True))
    note = [x for x in opened.notes if x.code == N.LIVE_LOG_OPEN_FILES]
    assert len(note) == 1 and note[0].count == 1 and f"{n} cycles read" in note[0].message
    assert "0 of them ending inside a batch" in note[0].message       # never closed, but between two writes
    assert not [x for x in closed.notes if x.code == N.LIVE_LOG_OPEN_FILES]


def test_a_stream_cut_inside_a_batch_keeps_the_whole_batches_before_it(tmp_path):
    from analyze.read import live_log

    _open_log(tmp_path, cycle_values(30, seed=4))
    f = next(tmp_path.glob("*.arrows"))
    whole = live_log.read_log(f)
    assert len(whole.frame) == 28 and whole.open and not whole.cut
    data = f.read_bytes()
    f.write_bytes(data[: len(data) - 100])             # the last batch's body cut short
    cut = live_log.read_log(f)
    assert len(cut.frame) == 21 and cut.cut
    assert cut.frame["cycle"].tolist() == whole.frame["cycle"].tolist()[:21]


def test_a_stream_beside_its_completed_parquet_is_not_read_twice(tmp_path):
    """Killed between the Parquet file's rename and the stream's removal: the same rows twice; the Parquet is read."""
    import shutil

    from analyze.read import live_log

    w = _open_log(tmp_path, cycle_values(14, seed=5))
    stream = next(tmp_path.glob("*.arrows"))
    shutil.copy(stream, tmp_path / "kept")
    w.close()
    shutil.move(tmp_path / "kept", stream)
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".arrows", ".parquet"]
    assert [p.suffix for p in live_log.log_files(tmp_path)] == [".parquet"]
    a = analyze.load(tmp_path)
    assert len(a.cycles) == 14 and not [x for x in a.notes if x.code == N.LIVE_LOG_OPEN_FILES]


def test_open_files_without_a_batch_or_gone_when_read_are_no_error(tmp_path, monkeypatch):
    """A process killed before its first batch leaves an empty stream (pyarrow writes the schema with the first
    batch); a stream completed while the directory is read is gone: read from its Parquet twin. Neither refuses
    the directory; only a log with no cycle at all is refused."""
    from analyze.read import live_log

    vals = cycle_values(14, seed=6)
    w = _open_log(tmp_path, vals, pid=100)
    (tmp_path / "specprof_live-r0-p101-00001.arrows").write_bytes(b"")        # killed before its first write
    a = analyze.load(tmp_path)
    assert len(a.cycles) == 14
    note = [x for x in a.notes if x.code == N.LIVE_LOG_OPEN_FILES]
    assert note[0].count == 2 and "14 cycles read" in note[0].message and "1 of them ending inside" in note[0].message
    listed = live_log.log_files(tmp_path)
    w.close()                                           # completed after the listing, before the read
    monkeypatch.setattr(live_log, "log_files", lambda p: listed)
    reads = [live_log.read_log(f) for f in listed]
    assert [(r.path.suffix, r.open, None if r.frame is None else len(r.frame)) for r in reads] == [
        (".parquet", False, 14), (".arrows", True, None)]
    (tmp_path / "specprof_live-r0-p100-00001.parquet").unlink()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "specprof_live-r0-p1-00001.arrows").write_bytes(b"")
    out = cli(tmp_path / "empty")
    assert out.returncode == 2 and "no cycle in the timing log" in out.stderr
