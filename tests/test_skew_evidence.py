"""A straggler is named only on evidence that survives the warm-up; the wait heatmap's colour scale is
not set by one outlier; when the skew table is left out, a note says why."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import cli
from analyze.render import plots, text
from analyze.timeline import collectives as coll_mod
from analyze.views import skew
from fixtures.synth import TraceSpec, write_trace

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _trace(tmp_path, cycle):
    paths, truth = write_trace(TraceSpec(ranks=4, cycles=5, straggler={2: {"cycle": cycle, "phase": "verify",
                                                                            "delay_ns": 500_000}}), tmp_path)
    return analyze.load(paths)


def test_one_late_first_collective_names_no_straggler(tmp_path):
    """Rank 3 starts last (the generator staggers the ranks' start), so it arrives last in the first
    all-reduce: the old rule named it beside the real straggler, rank 2."""
    a = _trace(tmp_path, cycle=2)
    assert coll_mod.stragglers(a.collectives) == [2, 3]            # every collective counted
    assert skew.stragglers(a) == [2]                                # steady-state evidence only
    table = skew.skew_table(a).set_index("rank")
    assert table.loc[3, "times_late"] == 0 and table.loc[2, "times_late"] == 1
    assert table["wait_ns"].sum() == a.collectives["wait_ns"].sum()          # wait still sums everything
    notes = skew.skew_notes(a)
    assert [n.code for n in notes] == ["straggler_warmup_only"] and "rank(s) 3" in notes[0].message
    out = text.render(a, width=120)
    assert "straggler rank(s): 2 (last to arrive in 1 significantly skewed collective(s) after warm-up)" in out


def test_a_delay_only_in_warmup_names_nobody(tmp_path):
    a = _trace(tmp_path, cycle=0)
    assert 2 in coll_mod.stragglers(a.collectives)
    assert skew.stragglers(a) == []
    assert "straggler rank(s)" not in text.render(a, width=120)


def test_without_cycles_the_first_collective_is_not_evidence():
    rows = []
    for c in range(6):
        for r in range(4):
            late = (c == 0 and r == 3) or (c == 4 and r == 1)
            start = 1_000 * c + (50_000 if late else 0)
            rows.append(dict(collective=c, rank=r, start_ns=start, end_ns=start + 100))
    coll = pd.DataFrame(rows)
    coll["arrival_lag_ns"] = coll.groupby("collective")["start_ns"].transform("max") - coll["start_ns"]
    coll["wait_ns"] = np.minimum(coll["arrival_lag_ns"], 100)
    coll["transfer_ns"] = 100 - coll["wait_ns"]
    coll["last_arrival"] = coll["arrival_lag_ns"] == 0
    coll["phase"] = "verify"
    mask = skew.evidence_mask(coll, pd.DataFrame())
    assert mask.tolist() == [c != 0 for c in coll["collective"]]
    assert coll_mod.stragglers(coll, mask) == [1]
    assert sorted(coll_mod.stragglers(coll)) == [1, 3]


def test_heatmap_scale_is_not_set_by_one_outlier(tmp_path):
    a = _trace(tmp_path, cycle=2)
    coll = a.collectives.copy()
    big = coll["wait_ns"].max() * 100
    coll.loc[(coll["collective"] == 5) & (coll["rank"] == 0), "wait_ns"] = big
    b = analyze.Analysis(**{**a.__dict__, "collectives": coll})
    fig = plots.allreduce_heatmap(b)
    vmax = fig.axes[0].images[0].get_clim()[1]
    grid = coll.pivot_table(index="rank", columns="collective", values="wait_ns", aggfunc="sum").to_numpy()
    unit = 1e3 if "(µs)" in fig.axes[1].get_ylabel() else 1e6
    second = np.sort(grid.ravel())[-2]              # 1% of the cells is less than one: the outlier alone goes
    assert vmax == pytest.approx(second / unit) and vmax < big / unit / 10
    assert fig.axes[0].get_title(loc="left").endswith("collectives); colour scale without the top 1 cell")
    assert plots.heatmap_scale(np.zeros((2, 3))) == (1.0, 0)


def test_skew_table_left_out_says_why(tmp_path, capsys):
    out = tmp_path / "one.json"
    assert cli.main([str(REAL / "h200_shim_graphs_node.sqlite"), "--json", str(out)]) == 0
    report = capsys.readouterr().out
    assert "note: no all-reduce skew table: one rank (TP 1)" in report
    assert any(n["code"] == "skew_skipped" for n in json.loads(out.read_text())["notes"])
    # four ranks whose all-reduce ran over gloo (host round trip): no collective kernel to match
    assert cli.main([str(REAL / "h200_4proc_eager.sqlite"), "-q", "--json", str(out)]) == 0
    note = next(n for n in json.loads(out.read_text())["notes"] if n["code"] == "skew_skipped")
    assert "no GPU op of the 4 ranks matched the allreduce phase's kernel patterns" in note["message"]


def test_graph_level_hint_whole_and_in_chunks(tmp_path, monkeypatch):
    """Two ranks whose all-reduce kernels hide inside CUDA graphs traced at graph level: the note says why
    there is no skew table and how to profile, also for a report analysed in chunks (no per-op table:
    the graph launches are found in its op store)."""
    from fixtures.synth import TraceSpec, write_trace

    from analyze.run import api
    from analyze.views import skew

    paths, _ = write_trace(TraceSpec(ranks=2, cycles=4, cuda_graph_mode="graph"), tmp_path)
    hint = "traced at graph level, where kernels inside a replay are invisible: profile with --cuda-graph-trace=node"
    whole = analyze.load(paths)
    assert whole.collectives.empty and hint in skew.skew_notes(whole)[0].message
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 5)
    chunked = analyze.load(paths, memory_budget=1)
    assert chunked.gpu_ops.empty and hint in skew.skew_notes(chunked)[0].message
    plain, _ = write_trace(TraceSpec(ranks=2, cycles=4, cuda_graph_mode="node"), tmp_path / "node")
    node = analyze.load(plain)             # traced per node: the all-reduce kernels seen, a skew table
    assert len(node.collectives) == 32 and not any(hint in n.message for n in skew.skew_notes(node))
