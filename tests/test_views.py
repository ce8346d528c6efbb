"""The views layer: each derived table computed once per analysis, by one function; the terminal,
HTML and file renderers show the views' numbers and derive no table themselves."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import views
from analyze.render import html, outputs, text
from analyze.views.registry import view
from helpers import shared_loads

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"


@pytest.fixture(scope="module")
def a():
    return shared_loads.load(str(REAL / "h200_shim_4rank_single.sqlite"))


def test_every_view_is_computed_once(a, monkeypatch):
    calls = {}
    for name, fn in list(views.VIEWS.items()):
        def counted(analysis, _fn=fn, _name=name, **params):
            calls[_name] = calls.get(_name, 0) + 1
            return _fn(analysis, **params)
        monkeypatch.setitem(views.VIEWS, name, counted)
    fresh = analyze.load(str(REAL / "h200_shim_4rank_single.sqlite"))
    text.render(fresh)
    html.tables(fresh)
    outputs.tables(fresh)
    outputs.to_json_dict(fresh)
    text.render(fresh)
    assert calls and all(n == 1 for n in calls.values()), calls
    assert views.get(fresh, "top_kernels", top=5) is views.get(fresh, "top_kernels", top=5)
    assert views.get(fresh, "top_kernels", top=2) is not views.get(fresh, "top_kernels", top=5)


def test_registry_refuses_unknown_and_twice_registered_views(a):
    with pytest.raises(KeyError, match="no view 'nope'"):
        views.get(a, "nope")
    with pytest.raises(ValueError, match="registered twice"):
        view("phase_by_rank")(lambda analysis: None)


def test_phase_by_rank_adds_up_to_busy(a):
    t = views.get(a, "phase_by_rank")
    ranks = [int(r) for r in a.ranks["rank"]]
    assert list(t.index) == a.phase_names + ["other", "busy"] and list(t.columns) == ranks + ["share"]
    busy = a.totals.set_index("rank")["busy_ns"]
    for r in ranks:
        assert int(t.loc[t.index != "busy", r].sum()) == int(busy[r]) == int(t.at["busy", r])
        for p in a.phase_names + ["other"]:
            want = a.phases[(a.phases["rank"] == r) & (a.phases["phase"] == p)]["exclusive_ns"]
            assert int(t.at[p, r]) == int(want.iloc[0])
    assert t["share"].iloc[:-1].sum() == pytest.approx(1.0) and t.at["busy", "share"] == 1.0


def test_top_kernels_are_the_biggest_of_each_phase(a):
    top = views.get(a, "top_kernels", top=3)
    totals = a.kernels.groupby(["phase", "name"])["total_ns"].sum()
    for phase, g in top.groupby("phase", sort=False):
        assert len(g) <= 3 and list(g["total_ns"]) == sorted(g["total_ns"], reverse=True)
        mine = totals.loc[phase].sort_values(ascending=False)
        assert list(g["total_ns"]) == list(mine.iloc[:3])
        assert (g["share"] <= 1).all() and g["share"].iloc[0] == pytest.approx(mine.iloc[0] / mine.sum())
    assert list(dict.fromkeys(top["phase"])) == [p for p in a.phase_names + ["other"] if p in set(top["phase"])]


def test_renderers_show_the_views_numbers(a):
    t = views.get(a, "phase_by_rank")
    shown = html.tables(a)["phases"].set_index("phase")
    for r in a.ranks["rank"]:
        np.testing.assert_allclose(shown[f"rank {r}"].to_numpy(), t[int(r)].to_numpy() / 1e6)
    report = text.render(a)
    lines = report.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Exclusive GPU time per phase"))
    verify = next(line for line in lines[at:] if line.startswith("verify "))
    assert verify.split()[1] == f"{t.at['verify', int(a.ranks['rank'].iloc[0])] / 1e6:,.3f}"
    files = outputs.tables(a)
    for name in views.FILE_VIEWS:
        pd.testing.assert_frame_equal(files[name], views.get(a, name))
    across = views.get(a, "phase_across_ranks")
    assert list(html.tables(a)["cross_rank"]["phase"]) == list(across["phase"])


@pytest.mark.parametrize("module", ["text.py", "html.py", "outputs.py"])
def test_table_renderers_derive_no_tables(module):
    """text, html and outputs format views: no groupby, pivot or aggregation of their own."""
    tree = ast.parse((ROOT / "analyze" / "render" / module).read_text())
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not used & {"groupby", "pivot", "pivot_table", "agg", "aggregate"}, module


def _nvtx_sum_by_texts(ranges: pd.DataFrame) -> pd.DataFrame:
    """nvtx_range_summary as it was written before it grouped by codes: the texts themselves."""
    cols = ["range", "style", "instances", "total_ns", "mean_ns", "median_ns", "min_ns", "max_ns"]
    names = ranges["domain"].astype(str) + ":" + ranges["name"].astype(str)
    frame = pd.DataFrame({"range": names, "style": ranges["style"], "d": ranges["end_ns"] - ranges["start_ns"]})
    out = frame.groupby(["range", "style"], sort=False)["d"].agg(
        instances="size", total_ns="sum", mean_ns="mean", median_ns="median", min_ns="min", max_ns="max").reset_index()
    return out.sort_values(["total_ns", "range"], ascending=[False, True], kind="stable")[cols].reset_index(drop=True)


def test_nvtx_range_summary_groups_as_the_texts_did():
    """Grouped by codes: the same rows, order and dtypes as grouping by the ``domain:name`` texts,
    with ties in total time (kept in first-seen order), two (domain, name) pairs that spell one
    text (one row, as before), a missing style (its rows left out, as before) and many rows."""
    from analyze.views.nvtx import nvtx_range_summary

    rng = np.random.default_rng(7)
    n = 5000
    domains = np.array(["", "sglang", "a:b", "a"], dtype=object)
    names = np.array(["draft", "verify", "c", "b:c", "decode_cycle"], dtype=object)
    start = rng.integers(0, 10**9, n)
    ranges = pd.DataFrame({
        "domain": pd.Series(domains[rng.integers(0, len(domains), n)], dtype=object),
        "name": pd.Series(names[rng.integers(0, len(names), n)], dtype=object),
        "style": pd.Series(np.array(["PushPop", "StartEnd", None], dtype=object)[rng.choice(3, n, p=[0.6, 0.39, 0.01])],
                           dtype=object),
        "start_ns": start, "end_ns": start + rng.integers(0, 4, n) * 1000,      # few durations: ties
    })
    ours = nvtx_range_summary(ranges)
    pd.testing.assert_frame_equal(ours, _nvtx_sum_by_texts(ranges))
    assert "a:b:c" in set(ours["range"]) and ours["style"].notna().all() and len(ours) > 10
    # with the analysis' full_name column (what a loaded analysis has): the same
    labelled = ranges.assign(full_name=ranges["domain"] + ":" + ranges["name"])
    pd.testing.assert_frame_equal(nvtx_range_summary(labelled), ours)
    tied = ranges.assign(end_ns=ranges["start_ns"] + 5)
    pd.testing.assert_frame_equal(nvtx_range_summary(tied), _nvtx_sum_by_texts(tied))
    # one name under two styles with equal totals: their first-seen order (not the styles' codes)
    crafted = pd.DataFrame({"domain": ["", "", "", ""], "name": ["x", "y", "y", "x"],
                            "style": ["StartEnd", "PushPop", "StartEnd", "StartEnd"],
                            "start_ns": [0, 0, 0, 0], "end_ns": [9, 4, 4, 9]})
    got = nvtx_range_summary(crafted)
    assert list(zip(got["range"], got["style"])) == [(":x", "StartEnd"), (":y", "PushPop"), (":y", "StartEnd")]
    pd.testing.assert_frame_equal(got, _nvtx_sum_by_texts(crafted))


def test_csv_and_parquet_write_every_table_of_the_json(tmp_path):
    """--csv/--parquet: a file for each table the JSON holds (inputs, cycle_distribution and notes
    were missing), with the JSON's rows."""
    import json

    a = shared_loads.load(str(REAL / "h200_4proc_eager.sqlite"))
    doc = outputs.to_json_dict(a)
    listed = {k for k, v in doc.items() if isinstance(v, list) and k not in ("phase_names", "stragglers")}
    csv_names = {n[:-4] for n in outputs.write_csv(a, tmp_path / "csv")}
    pq_names = {n[:-8] for n in outputs.write_parquet(a, tmp_path / "pq")}
    assert csv_names == pq_names == listed
    notes = pd.read_csv(tmp_path / "csv" / "notes.csv")
    assert list(notes["code"]) == [n["code"] for n in doc["notes"]] and len(notes) >= 1
    dist = pd.read_parquet(tmp_path / "pq" / "cycle_distribution.parquet")
    pd.testing.assert_frame_equal(dist, pd.DataFrame(doc["cycle_distribution"]), check_dtype=False)
    inputs = pd.read_csv(tmp_path / "csv" / "inputs.csv")
    assert list(inputs["path"]) == [i["path"] for i in doc["inputs"]]


def test_a_file_position_is_one_view_s():
    from analyze.views.registry import view

    with pytest.raises(ValueError, match="file position 3 is 'nvtx_sum'"):
        view("another_table", file=3)(lambda a: None)
