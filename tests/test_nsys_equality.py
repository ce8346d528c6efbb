"""Where nsys defines a figure, ours equals what `nsys stats` printed for the same real file."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import analyze
from helpers import cli_process, shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TRACES = ["h200_4proc_eager", "h200_1proc_graphs_graphlevel",
          # real SGLang 0.5.17 EAGLE-3 on an H200 (recipes/sglang_h200.sh)
          "sglang_server", "sglang_graphs", "sglang_eager", "sglang_vocab64"]


@pytest.fixture(scope="module", params=TRACES)
def traced(request):
    name = request.param
    return name, shared_loads.load(REAL / f"{name}.sqlite")


def test_nvtx_projection_equals_nsys_stats(traced):
    name, result = traced
    ref = pd.read_csv(REAL / f"{name}.stats_nvtx_gpu_proj_sum.csv")
    ours = result.nvtx_projection.set_index(["range", "style"])
    assert len(ours) == len(ref)
    for row in ref.itertuples(index=False):
        mine = ours.loc[(row.Range, row.Style)]
        assert int(mine.total_projected_ns) == row[2], row.Range       # Total Proj Time (ns)
        assert int(mine.total_range_ns) == row[3], row.Range           # Total Range Time (ns)
        assert int(mine.instances) == row[4], row.Range                # Range Instances
        assert int(mine.gpu_ops) == row[10], row.Range                 # Total GPU Ops


def test_kernel_totals_equal_cuda_gpu_kern_sum(traced):
    name, result = traced
    ref = pd.read_csv(REAL / f"{name}.stats_cuda_gpu_kern_sum.csv")
    kernels = result.gpu_ops[result.gpu_ops["kind"] == "kernel"]
    ours = kernels.groupby("name")["duration_ns"].agg(["sum", "size", "min", "max"])
    assert len(ours) == len(ref)
    for row in ref.itertuples(index=False):
        got = ours.loc[row.Name]
        assert (int(got["sum"]), int(got["size"])) == (row[1], row[2]), row.Name
        assert (int(got["min"]), int(got["max"])) == (row[5], row[6]), row.Name
    # the per-rank kernel table adds up to the same totals
    per_rank = result.kernels.groupby("name")[["total_ns", "instances"]].sum()
    for row in ref.itertuples(index=False):
        assert int(per_rank.loc[row.Name, "total_ns"]) == row[1]
    assert int(result.totals["kernel_ns"].sum()) == int(ref["Total Time (ns)"].sum())


def test_nvtx_range_summary_equals_nvtx_sum(traced):
    from analyze.views.summary import nvtx_range_summary

    name, result = traced
    ref = pd.read_csv(REAL / f"{name}.stats_nvtx_sum.csv")
    ours = nvtx_range_summary(result.ranges).set_index(["range", "style"])
    assert len(ours) == len(ref)
    for row in ref.itertuples(index=False):
        got = ours.loc[(row.Range, row.Style)]
        assert (int(got.total_ns), int(got.instances), int(got.min_ns), int(got.max_ns)) == \
            (row[1], row[2], row[5], row[6]), row.Range
        assert float(got.median_ns) == row[4]


def test_invariant_exclusive_plus_unattributed_is_busy(traced):
    _, result = traced
    named = result.phases[result.phases["phase"] != "other"]
    per_rank = named.groupby("rank")["exclusive_ns"].sum()
    totals = result.totals.set_index("rank")
    for rank, row in totals.iterrows():
        assert per_rank[rank] == row["exclusive_attributed_ns"]
        assert per_rank[rank] + row["unattributed_ns"] == row["busy_ns"]
        assert row["busy_ns"] <= row["window_end_ns"] - row["window_start_ns"]
        assert row["idle_ns"] == row["window_end_ns"] - row["window_start_ns"] - row["busy_ns"]


def test_four_process_trace_has_four_ranks_from_marks():
    result = shared_loads.load(REAL / "h200_4proc_eager.sqlite")
    assert list(result.ranks["rank"]) == [0, 1, 2, 3]
    assert set(result.ranks["source"]) == {"mark"}
    assert list(result.ranks["pid"]) == [1155, 1156, 1157, 1158]
    # marks say rank=R for pid 1155+R in this capture
    ph = result.phases.set_index(["rank", "phase"])
    for rank in range(4):
        # 12 decode cycles per process: one outermost draft and verify range each
        assert ph.loc[(rank, "draft"), "instances"] == 12
        assert ph.loc[(rank, "verify"), "instances"] == 12
        # verify encloses allreduce, so its inclusive busy exceeds its exclusive time
        assert ph.loc[(rank, "verify"), "busy_ns"] > ph.loc[(rank, "verify"), "exclusive_ns"]
    assert len(result.cycles) == 48


def test_graph_level_trace_reports_graph_launches_as_gpu_work():
    result = shared_loads.load(REAL / "h200_1proc_graphs_graphlevel.sqlite")
    graphs = result.gpu_ops[result.gpu_ops["kind"] == "graph"]
    assert len(graphs) == 80       # rows of CUPTI_ACTIVITY_KIND_GRAPH_TRACE
    note = next(n for n in result.notes if n.code == "graph_level_trace")
    assert note.count == 80 and "graph level" in note.message
    # graph launches sit inside draft and verify ranges, so those phases own GPU time
    ph = result.phases.set_index("phase")
    assert ph.loc["verify", "exclusive_ns"] > 0 and ph.loc["draft", "exclusive_ns"] > 0


def test_cli_json_has_required_keys_and_matches_api(tmp_path):
    out = tmp_path / "r.json"
    proc = cli_process.run([str(REAL / "h200_4proc_eager.sqlite"), "--json", str(out), "-q"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["schema"] == 2
    # notes are objects: a code code may test, the count, the readable message
    report_note = {"code": "shared_correlation_ids", "count": 2714, "input": None, "rank": None,
                   "message": "2714 correlation ids occur in several processes: ops joined to calls per process"}
    assert data["notes"][0] == report_note
    # the report's own notes, then the views' notes about the whole analysis (no collective kernel here)
    assert [n["code"] for n in data["notes"]] == ["shared_correlation_ids", "skew_skipped"]
    assert data["inputs"][0]["notes"] == [report_note]
    for key in ("inputs", "ranks", "phases", "kernels", "totals", "nvtx_projection", "cycles", "collectives"):
        assert key in data
    for row in data["phases"]:
        assert {"rank", "phase", "instances", "cpu_ns", "projected_ns", "busy_ns", "exclusive_ns",
                "kernel_ns"} <= set(row)
    assert {"rank", "pid", "device_ids", "source"} <= set(data["ranks"][0])
    assert {"rank", "kernel_ns", "busy_ns", "exclusive_attributed_ns", "unattributed_ns"} <= set(data["totals"][0])
    assert {"range", "style", "instances", "total_projected_ns", "total_range_ns", "gpu_ops"} <= \
        set(data["nvtx_projection"][0])
    api = shared_loads.load(REAL / "h200_4proc_eager.sqlite")
    from analyze.render import outputs

    for name, frame in outputs.tables(api).items():
        rows = data[name]
        assert len(rows) == len(frame), name
        assert rows == outputs.records(frame), name      # the API's DataFrames, value for value


def test_streamed_json_equals_the_json_dict(tmp_path, monkeypatch):
    """write_json streams the tables a slice of rows at a time (slices of 7 rows here): the file
    parses to exactly to_json_dict; records() gives the plain values of every dtype."""
    import math

    import numpy as np

    from analyze.render import outputs

    result = analyze.load(REAL / "h200_shim_4rank_single.sqlite")
    monkeypatch.setattr(outputs, "JSON_RECORDS_PER_WRITE", 7)
    outputs.write_json(result, tmp_path / "r.json")
    data = json.loads((tmp_path / "r.json").read_text())
    want = json.loads(json.dumps(outputs.to_json_dict(result), default=outputs._plain))
    assert data == want and list(data) == list(want)
    assert len(data["cycles"]) > 7 and len(data["kernels"]) > 7      # several slices each
    odd = pd.DataFrame({"i": np.array([1, 2], dtype="int64"), "f": [1.5, math.nan], "b": [True, False],
                        "o": pd.Series(["x", None], dtype=object), "n": pd.array([3, None], dtype="Int64"),
                        "c": pd.Categorical(["a", "b"]), "s": pd.Series(["p", None], dtype="str")})
    assert outputs.records(odd) == [{"i": 1, "f": 1.5, "b": True, "o": "x", "n": 3, "c": "a", "s": "p"},
                                    {"i": 2, "f": None, "b": False, "o": None, "n": None, "c": "b", "s": None}]
    assert [type(v) for v in outputs.records(odd)[0].values()] == [int, float, bool, str, int, str, str]


def test_csv_and_parquet_hold_the_same_tables(tmp_path):
    from analyze.render import outputs

    result = shared_loads.load(REAL / "h200_1proc_graphs_graphlevel.sqlite")
    outputs.write_csv(result, tmp_path / "csv")
    outputs.write_parquet(result, tmp_path / "pq")
    for name in ("phases", "totals", "nvtx_projection", "kernels"):
        c = pd.read_csv(tmp_path / "csv" / f"{name}.csv")
        p = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
        assert len(c) == len(p) == len(outputs.tables(result)[name])
        assert list(c.columns) == list(p.columns)
    assert not list((tmp_path / "csv").glob("*.tmp*"))


def test_parquet_in_row_groups_equals_one_piece(tmp_path, monkeypatch):
    """write_parquet writes row groups of PARQUET_ROWS_PER_GROUP rows (7 here): every table reads
    back equal to pandas' own to_parquet of the same frame, empty tables included."""
    from analyze.render import outputs

    result = analyze.load(REAL / "h200_shim_4rank_single.sqlite")
    monkeypatch.setattr(outputs, "PARQUET_ROWS_PER_GROUP", 7)
    outputs.write_parquet(result, tmp_path / "pq")
    for name, frame in outputs.tables(result).items():
        text = {c: frame[c].map(lambda v: None if v is None else json.dumps(v) if isinstance(v, (dict, list)) else str(v))
                for c in frame.columns if frame[c].dtype == object}
        frame.assign(**text).to_parquet(tmp_path / f"{name}.whole.parquet", index=False)
        got = pd.read_parquet(tmp_path / "pq" / f"{name}.parquet")
        pd.testing.assert_frame_equal(got, pd.read_parquet(tmp_path / f"{name}.whole.parquet"), obj=name)
    import pyarrow.parquet as pq
    n_cycles = len(outputs.tables(result)["cycles"])
    assert pq.ParquetFile(tmp_path / "pq" / "cycles.parquet").num_row_groups == -(-n_cycles // 7) > 1


def test_default_run_without_arguments_uses_bundled_trace():
    proc = cli_process.run([])
    assert proc.returncode == 0, proc.stderr
    assert "h200_4proc_eager.sqlite" in proc.stdout
    assert "Exclusive GPU time per phase" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120


def test_nvtx_projection_in_slices_equals_nsys_stats(traced, monkeypatch):
    """The summary grouped a few ranges at a time (projection.SUMMARY_SLICE) is the same table."""
    from analyze.project import projection

    name, result = traced
    monkeypatch.setattr(projection, "SUMMARY_SLICE", 3)
    sliced = analyze.load(REAL / f"{name}.sqlite")
    pd.testing.assert_frame_equal(sliced.nvtx_projection, result.nvtx_projection)
    assert len(sliced.nvtx_projection) == len(pd.read_csv(REAL / f"{name}.stats_nvtx_gpu_proj_sum.csv"))
