"""The decode cycle is the headline: the steady-state breakdown per rank (views/decode.py) and where it
shows (terminal first screen, HTML first screen, JSON contract).

Known answers on a cycle table built by hand; on the bundled real traces and a synthetic 8-rank
trace, the components add up to the cycle period per rank. The period split itself comes from the
cycle table (timeline/cycles.py): every cycle's split adds up to its GPU period, to the ns, and equals
what tests/helpers/period_split.py (an independent plain-Python reference over the per-op table)
computes for the same cycles."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.render import html, outputs, text
from analyze.timeline import cycles as cycles_mod
from analyze.views import decode
from helpers import shared_loads
from fixtures.synth import TraceSpec, write_trace
from helpers.period_split import period_split

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PHASES = ["draft", "verify", "draft_extend", "allreduce", "prefill"]


def hand_table() -> pd.DataFrame:
    """Two ranks, four cycles each; rank 0's cycle 0 is warm-up (first), cycle 3 an outlier."""
    rows = []
    # rank 0: (draft, verify, draft_extend, allreduce, prefill, other, idle)
    r0 = [(90, 300, 10, 50, 0, 5, 545), (100, 400, 20, 60, 0, 10, 410), (120, 420, 20, 60, 0, 10, 370),
          (100, 400, 20, 60, 0, 10, 9410)]
    r1 = [(95, 300, 10, 50, 0, 5, 540), (100, 410, 20, 40, 0, 10, 420), (100, 390, 20, 80, 0, 10, 400),
          (100, 400, 20, 60, 0, 10, 410)]
    warm0 = ["first", None, None, "outlier"]
    warm1 = ["first", None, None, None]
    for rank, data, warm in ((0, r0, warm0), (1, r1, warm1)):
        start = 0
        for k, (d, v, de, ar, pf, o, idle) in enumerate(data):
            period = d + v + de + ar + pf + o + idle
            rows.append(dict(rank=rank, cycle=k, start_ns=start, end_ns=start + period - idle,
                             period_draft_ns=d, period_verify_ns=v, period_draft_extend_ns=de,
                             period_allreduce_ns=ar, period_prefill_ns=pf, period_other_ns=o, period_idle_ns=idle,
                             warmup=warm[k] is not None, warmup_reason=warm[k],
                             accepted_tokens=6 if rank == 0 else pd.NA, requests=4 if rank == 0 else pd.NA,
                             tokens=10 if rank == 0 else pd.NA))
            start += period
    out = pd.DataFrame(rows)
    out["tokens"] = out["tokens"].astype("Int64")
    return out


def test_breakdown_known_answers():
    bd = decode.decode_breakdown(hand_table(), PHASES)
    assert list(bd.columns) == ["rank", "component", "per_cycle_ns", "median_ns", "share"]
    r0 = bd[bd["rank"] == 0].set_index("component")
    # rank 0 steady cycles: 1 and 2 (0 first, 3 outlier); period 1000 each
    assert r0.loc["draft", "per_cycle_ns"] == 110 and r0.loc["draft", "median_ns"] == 110
    assert r0.loc["verify", "per_cycle_ns"] == 410 and r0.loc["verify", "share"] == pytest.approx(0.41)
    assert r0.loc["gpu_idle", "per_cycle_ns"] == 390 and r0.loc["gpu_idle", "share"] == pytest.approx(0.39)
    assert r0.loc["prefill", "per_cycle_ns"] == 0
    assert list(r0.index) == PHASES + ["other", "gpu_idle"]
    r1 = bd[bd["rank"] == 1].set_index("component")
    assert r1.loc["allreduce", "per_cycle_ns"] == 60 and r1.loc["allreduce", "median_ns"] == 60   # 40, 80, 60
    assert r1.loc["verify", "median_ns"] == 400
    for rank, g in bd.groupby("rank"):
        assert g["share"].sum() == pytest.approx(1.0, abs=1e-12)
    assert r1["per_cycle_ns"].sum() == pytest.approx(1000.0)


def test_summary_tokens_and_warmup_known_answers():
    sm = decode.decode_summary(hand_table(), pd.DataFrame({"rank": [0, 1], "busy_ns": [10_000, 5_000]}), PHASES)
    s0, s1 = sm.set_index("rank").loc[0], sm.set_index("rank").loc[1]
    assert (s0["cycles"], s0["steady_cycles"], s0["warmup_cycles"]) == (4, 2, 2)
    assert s0["warmup_reasons"] == {"first": 1, "outlier": 1}
    assert s0["period_mean_ns"] == 1000 and s0["busy_per_cycle_ns"] == 610
    assert s0["tokens_per_cycle"] == 10
    assert s0["tokens_per_s"] == pytest.approx(10 * 1e9 / 1000)
    assert s0["gpu_ms_per_token"] == pytest.approx(610 / 10 / 1e6)
    # rank 1 has no accept marks: the lowest rank's tokens, its own cycle time
    assert s1["tokens_from_rank"] == 0 and s1["tokens_per_cycle"] == 10
    assert s1["gpu_ms_per_token"] == pytest.approx(s1["busy_per_cycle_ns"] / 10 / 1e6)
    # outside the cycles: busy minus the busy part of every period (warm-up included)
    busy_in = hand_table().groupby("rank").apply(
        lambda g: (g[[f"period_{p}_ns" for p in PHASES + ["other"]]].to_numpy().sum()), include_groups=False)
    assert s0["outside_cycles_busy_ns"] == 10_000 - busy_in[0]
    assert s0["warmup_busy_ns"] == (455 + 590)


def test_warmup_as_reason_text_and_absent():
    t = hand_table().drop(columns=["warmup_reason"])
    t["warmup"] = np.where(t["warmup"], "first", None)
    assert decode.warmup_flags(t)[0].tolist() == hand_table()["warmup"].tolist()
    # no flags at all (a hand-made table, an older result): the same rules give them (timeline.cycles):
    # each rank's first cycle is warm-up; without a period column no outlier can be told
    no = hand_table().drop(columns=["warmup", "warmup_reason"])
    assert decode.warmup_flags(no)[1].tolist() == ["first", None, None, None] * 2
    assert len(decode.steady_cycles(no)) == 6
    # with the GPU period: rank 0's cycle 3 (10,000 ns against a median of 1,000) is an outlier
    comps = [c for c in no.columns if c.startswith("period_")]
    no["gpu_period_ns"] = no[comps].sum(axis=1)
    assert decode.warmup_flags(no)[1].tolist() == ["first", None, None, "outlier", "first", None, None, None]
    assert decode.steady_cycles(no)[["rank", "cycle"]].values.tolist() == [[0, 1], [0, 2], [1, 1], [1, 2], [1, 3]]


def test_headline_known_answer():
    t = hand_table()
    bd = decode.decode_breakdown(t, PHASES)
    sm = decode.decode_summary(t, pd.DataFrame({"rank": [0, 1], "busy_ns": [10_000, 5_000]}), PHASES)
    ranks = pd.DataFrame({"rank": [0, 1], "world": [2, 2]})
    line = decode.headline(bd, sm, ranks)
    # pooled over ranks: verify (410 + 400) / 2 of a 1000 ns period, idle (390 + 410) / 2, ...; outside:
    # rank 0 busy 10,000 - (455 + 590 + 630 + 590) in its periods = 7,735 ns
    assert line.startswith("Verify is 40% of the decode cycle; the GPU is idle 40% of it; draft 10%, allreduce 6%, "
                           "draft_extend 2%, other 1%; a cycle takes 0.001 ms (mean of 2 ranks)")
    # rank 0: first + outlier, rank 1: first; the outlier said apart from the warm-up
    assert "1 warm-up cycle per rank left out; 1 outlier cycle (a period over 5x the median of its batch size) " \
        "over all ranks left out" in line
    assert line.endswith("; 0.008 ms of GPU work outside decode cycles (load, capture, prefill) on the busiest rank.")
    # one rank, no all-reduce: said, not shown as a finding
    one = t[t["rank"] == 0].assign(period_allreduce_ns=0, period_idle_ns=t.loc[t["rank"] == 0, "period_idle_ns"] + 60)
    bd1 = decode.decode_breakdown(one, PHASES)
    line1 = decode.headline(bd1, decode.decode_summary(one, pd.DataFrame({"rank": [0], "busy_ns": [9000]}), PHASES),
                            pd.DataFrame({"rank": [0], "world": [1]}))
    assert "no all-reduce (one rank, TP 1)" in line1 and "allreduce 0" not in line1


def test_no_split_no_breakdown_and_the_report_says_why():
    a = shared_loads.load(REAL / "h200_shim_graphs_node.sqlite")
    bare = a.cycles.drop(columns=[c for c in a.cycles.columns if c.startswith("period_") and c != "period_ns"])
    assert decode.decode_breakdown(bare, a.phase_names).empty
    import copy
    b = copy.copy(a)
    b.cycles = bare
    assert "needs the cycle table's period split" in text.render(b, width=120)


# ---------------------------------------------------------------------------------------------
# real and synthetic traces: the components add up to the period


def gpu_periods(cycles: pd.DataFrame) -> pd.Series:
    """Each cycle's GPU period from the table's own window columns: to the next cycle's first op on
    the rank, the last cycle to its window end."""
    c = cycles.sort_values(["rank", "start_ns"])
    nxt = c.groupby("rank")["start_ns"].shift(-1)
    return (nxt.where(nxt.notna(), c["end_ns"]) - c["start_ns"]).astype("int64").reindex(cycles.index)


REAL_TRACES = ["h200_shim_graphs_node", "h200_4proc_eager", "sglang_server", "sglang_graphs", "h200_shim_4rank_single"]


@pytest.fixture(scope="module", params=REAL_TRACES)
def real(request):
    return request.param, shared_loads.load(REAL / f"{request.param}.sqlite")


def test_every_cycle_split_adds_up_to_its_period(real):
    name, a = real
    comps = decode.components(a.phase_names)
    c = cycles_mod.with_gpu(a.cycles)          # the cycles nsys recorded GPU work of
    assert len(c) > 0, name
    split = c[[decode.component_column(x) for x in comps]].to_numpy(dtype="int64").sum(axis=1)
    assert (split == c["gpu_period_ns"].to_numpy()).all(), name
    assert (c["gpu_period_ns"] == gpu_periods(c)).all(), name
    assert (c[[decode.component_column(x) for x in comps]].to_numpy() >= 0).all()


def test_period_split_equals_the_plain_reference(real):
    """The pipeline's streamed per-period unions against loops over cycles and a Python interval
    union (tests/helpers/period_split.py) on the per-op table: every column, every cycle, to the ns."""
    name, a = real
    c = cycles_mod.with_gpu(a.cycles)
    bare = c.drop(columns=[x for x in c.columns if x.startswith("period_") and x != "period_ns"]
                  + ["gpu_period_ns", "warmup", "warmup_reason"], errors="ignore")
    ref = period_split(a.gpu_ops, bare, a.phase_names)
    cols = [decode.component_column(x) for x in decode.components(a.phase_names)] + ["gpu_period_ns"]
    got, want = c[cols].to_numpy(dtype="int64"), ref[cols].to_numpy(dtype="int64")
    bad = np.flatnonzero((got != want).any(axis=1))
    assert not len(bad), (name, c.iloc[bad[:3]][["rank", "cycle"]].to_dict("records"), got[bad[:3]], want[bad[:3]])


def test_breakdown_adds_up_to_the_mean_period_per_rank(real):
    name, a = real
    bd = decode.decode_breakdown(a.cycles, a.phase_names)
    steady = decode.steady_cycles(a.cycles)
    assert steady["warmup_reason"].isna().all()            # no_gpu_ops cycles are warm-up: never steady
    period = steady["gpu_period_ns"].astype("int64")
    for rank, g in bd.groupby("rank"):
        mine = period[steady["rank"] == rank]
        assert g["per_cycle_ns"].sum() == pytest.approx(float(mine.mean()), rel=1e-12), (name, rank)
        assert g["share"].sum() == pytest.approx(1.0, abs=1e-12)
    # outside + inside the periods = every busy nanosecond of the rank
    oc = decode.outside_cycles(a.cycles, a.phases, a.totals, a.phase_names).groupby("rank")["busy_ns"].sum()
    assert oc.to_dict() == a.totals.set_index("rank")["outside_cycles_busy_ns"].to_dict()


def test_synthetic_trace_periods_match_the_generator(tmp_path):
    paths, truth = write_trace(TraceSpec(ranks=4, cycles=8, straggler={2: 50_000}, jitter=0), tmp_path)
    a = (analyze.load(paths))
    comps = decode.components(a.phase_names)
    for rt in truth["ranks"]:
        mine = a.cycles[a.cycles["rank"] == rt["rank"]].sort_values("start_ns")
        starts = [c["start_ns"] for c in rt["cycles"]]
        ends = [c["end_ns"] for c in rt["cycles"]]
        want = [b - s for s, b in zip(starts, starts[1:])] + [ends[-1] - starts[-1]]
        got = mine[[decode.component_column(c) for c in comps]].to_numpy(dtype="int64").sum(axis=1).tolist()
        assert got == want
        # no GPU work between one cycle's window and the next here: the period's phase split is the
        # generator's exclusive split of the window, and the rest of the period is idle
        for row, cyc in zip(mine.itertuples(), rt["cycles"]):
            for p in a.phase_names + ["other"]:
                assert getattr(row, f"period_{p}_ns") == cyc["phase_ns"].get(p, 0), (rt["rank"], row.cycle, p)
    bd = decode.decode_breakdown(a.cycles, a.phase_names)
    verify = bd[bd["component"] == "verify"].set_index("rank")["per_cycle_ns"]
    assert int(verify.idxmax()) == 2                            # the injected straggler's verify is longest
    kept = decode.steady_cycles(a.cycles)
    kept = set(kept.loc[kept["rank"] == 2, "cycle"])              # by the table's own warm-up flags
    truth2 = [c for k, c in enumerate(truth["ranks"][2]["cycles"]) if k in kept]
    assert verify[2] == np.mean([c["phase_ns"]["verify"] for c in truth2])


# ---------------------------------------------------------------------------------------------
# where it shows


@pytest.mark.parametrize("width", [80, 120, 200])
def test_terminal_first_screen_is_the_steady_state_breakdown(real, width):
    name, a = real
    lines = text.render(a, width=width).splitlines()
    head = lines[:25]
    assert any(ln.startswith("Steady-state decode cycle per rank") for ln in head), (name, head)
    assert any(ln.startswith("component") for ln in head)
    assert any(ln.startswith("verify ") for ln in head) and any(ln.startswith("GPU idle") for ln in head)
    sentence = " ".join(lines[:12])
    assert "of the decode cycle" in sentence
    # setup time is its own line, right after the table and before the whole-trace tables
    outside = next(i for i, ln in enumerate(lines) if ln.startswith("Outside decode cycles"))
    whole = next(i for i, ln in enumerate(lines) if ln.startswith("Whole trace"))
    assert outside < whole and outside < 40
    assert max(map(len, lines)) <= width


def test_terminal_table_values_are_the_view(real):
    name, a = real
    if a.ranks.shape[0] != 1:
        pytest.skip(f"{name}: several ranks (the test reads a one-rank table's layout)")
    lines = text.render(a, width=200).splitlines()
    bd = decode.decode_breakdown(a.cycles, a.phase_names).set_index("component")
    row = next(ln for ln in lines if ln.startswith("verify "))
    unit = 1e6 if "(ms per cycle" in " ".join(lines[:20]) else 1e3
    mean = float(row.split()[1].replace(",", ""))
    assert mean == pytest.approx(bd.loc["verify", "per_cycle_ns"] / unit, abs=0.051 if unit == 1e3 else 0.0006)
    assert ("allreduce" in " ".join(ln.split()[0] for ln in lines[:25] if ln)) == (not decode.no_allreduce(
        decode.decode_breakdown(a.cycles, a.phase_names), a.ranks))


def test_json_contract(real, tmp_path):
    name, a = real
    path = tmp_path / "r.json"
    outputs.write_json(a, path)
    data = json.loads(path.read_text())
    rows = data["decode_breakdown"]
    assert rows and set(rows[0]) == {"rank", "component", "per_cycle_ns", "median_ns", "share"}
    comps = {r["component"] for r in rows}
    assert comps == set(a.phase_names) | {"other", "gpu_idle"}
    for rank in {r["rank"] for r in rows}:
        assert sum(r["share"] for r in rows if r["rank"] == rank) == pytest.approx(1.0, abs=1e-9)
    assert all("outside_cycles_busy_ns" in t for t in data["totals"])
    assert data["headline"] and "decode cycle" in data["headline"]
    assert {r["rank"] for r in data["decode_summary"]} == {r["rank"] for r in rows}
    assert isinstance(data["decode_summary"][0]["warmup_reasons"], dict)


def test_csv_and_parquet_hold_the_breakdown(tmp_path):
    a = shared_loads.load(REAL / "h200_shim_graphs_node.sqlite")
    outputs.write_csv(a, tmp_path / "csv")
    got = pd.read_csv(tmp_path / "csv" / "decode_breakdown.csv")
    want = decode.decode_breakdown(a.cycles, a.phase_names)
    assert got["per_cycle_ns"].tolist() == pytest.approx(want["per_cycle_ns"].tolist())
    summ = pd.read_csv(tmp_path / "csv" / "decode_summary.csv")
    assert json.loads(summ["warmup_reasons"][0]) == {"first": 1}
    outputs.write_parquet(a, tmp_path / "pq")
    assert pd.read_parquet(tmp_path / "pq" / "decode_breakdown.parquet")["component"].tolist() == want["component"].tolist()


def test_html_first_section_is_the_decode_breakdown(real):
    name, a = real
    page = html.render_html(a)
    body = page[page.index("<body>"):]
    first_section = body.index('<section id="')
    assert body[first_section:].startswith('<section id="decode">')
    decode_part = body[first_section: body.index('<section id="phases">')]
    assert 'class="callout headline"' in decode_part and 'id="fig-decode"' in decode_part
    assert "Outside decode cycles" in decode_part


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (apt-get install -y chromium)")
def test_html_first_screen_in_headless_chromium(tmp_path):
    """The page's first screen (1280x1000) shows the stacked decode bars: phase colours cover a fair
    part of it, and `other` grey (the whole-trace set-up) does not dominate."""
    from PIL import Image

    from analyze.render import plots

    a = shared_loads.load(REAL / "h200_shim_graphs_node.sqlite")
    page = tmp_path / "r.html"
    html.write_html(a, page)
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1280,1000", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    img = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)

    def share(hex_color: str, tol: int = 12) -> float:
        rgb = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)])
        return float((np.abs(img - rgb).max(axis=1) <= tol).mean())

    assert share(plots.PALETTE["verify"]) > 0.01 and share(plots.PALETTE["draft"]) > 0.01
    assert share(plots.PALETTE["other"]) < 0.05


@pytest.mark.parametrize("dtype", [object, "str"])
def test_reason_counts_in_first_appearance_order(dtype):
    """The summary's warm-up reasons: steady cycles (no reason, None or NaN) left out, each reason
    counted, in the order the reasons first appear (the JSON keeps it)."""
    from analyze.views.decode import _reason_counts

    reasons = pd.Series([None, "outlier", np.nan, "first", "outlier", None, "truncated"], dtype=dtype)
    got = _reason_counts(reasons)
    assert got == {"outlier": 2, "first": 1, "truncated": 1}
    assert list(got) == ["outlier", "first", "truncated"]
    assert _reason_counts(reasons.iloc[:1]) == {} and _reason_counts(np.array([], dtype=object)) == {}


def test_outside_cycles_line_gives_the_range_over_ranks_and_the_busiest_rank():
    """The bundled 4-rank trace: its ranks' set-up work differs by a few microseconds, so the line
    gives the range and the rank with the most (the tiled SGLang trace, every rank alike, gives one
    figure: tests/test_bench.py)."""
    from analyze.views import registry as views

    a = shared_loads.load(REAL / "h200_4proc_eager.sqlite")
    line = " ".join(text.render(a, width=200).split("Outside decode cycles: ", 1)[1].split("\n")[:2])
    per_rank = views.get(a, "decode_summary").set_index("rank")["outside_cycles_busy_ns"]
    lo, hi = per_rank.min() / 1e6, per_rank.max() / 1e6
    assert lo != hi
    assert line.startswith(f"{lo:.3f} to {hi:.3f} ms of GPU work per rank")
    assert f"most on rank {int(per_rank.idxmax())}: " in line


def test_cycles_whose_gpu_data_was_lost_are_not_called_warm_up():
    """sglang_graphs: 1 warm-up cycle and 49 whose CUDA data nsys cut off at the end; the headline
    called all 50 'warm-up'."""
    from pathlib import Path

    import analyze
    from analyze import views

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_graphs.sqlite"
    if not path.exists():
        pytest.skip("fixture not unpacked")
    text = views.get(analyze.load(str(path)), "headline")
    assert "1 warm-up cycle left out; 49 cycles whose GPU data was lost (cut off at the end of the capture) left " \
           "out" in text
    assert "50 warm-up" not in text
