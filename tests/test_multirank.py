"""One report holding every rank, or one report per rank: the same per-rank figures."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import analyze
from helpers import cli_process

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PID_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": "globalPid", "CUPTI_ACTIVITY_KIND_MEMCPY": "globalPid",
              "CUPTI_ACTIVITY_KIND_MEMSET": "globalPid", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "globalPid",
              "CUPTI_ACTIVITY_KIND_RUNTIME": "globalTid", "NVTX_EVENTS": "globalTid", "OSRT_API": "globalTid",
              "PROCESSES": "globalPid", "ThreadNames": "globalTid"}


def split_by_process(src: Path, out_dir: Path) -> list[Path]:
    """Cut a multi-process export into one file per process (what `-o report_%q{RANK}` records)."""
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as c:
        pids = [r[0] for r in c.execute("SELECT DISTINCT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    paths = []
    for i, pid in enumerate(sorted(pids)):
        dst = out_dir / f"report_{i}.sqlite"
        shutil.copy(src, dst)
        dst.chmod(0o644)
        with sqlite3.connect(dst) as c:
            tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for table, col in PID_TABLES.items():
                if table not in tables:
                    continue
                c.execute(f"DELETE FROM {table} WHERE ({col} & ~16777215) != ?", (pid,))
        paths.append(dst)
    return paths


@pytest.fixture(scope="module")
def single_and_split(tmp_path_factory):
    out = tmp_path_factory.mktemp("split")
    src = REAL / "h200_4proc_eager.sqlite"
    return analyze.load(src), analyze.load(split_by_process(src, out)), out


def test_split_reports_give_the_same_ranks_and_figures(single_and_split):
    single, split, _ = single_and_split
    cols = ["rank", "pid", "device_ids", "source"]
    assert single.ranks[cols].equals(split.ranks[cols])
    assert list(split.alignment["method"]) == ["reference", "session start (UTC)", "session start (UTC)",
                                                "session start (UTC)"]
    assert (split.alignment["offset_ns"] == 0).all()      # one nsys session: one clock
    pd.testing.assert_frame_equal(single.phases, split.phases)
    pd.testing.assert_frame_equal(single.totals, split.totals)
    k1 = single.kernels.sort_values(["rank", "phase", "name"]).reset_index(drop=True)
    k2 = split.kernels.sort_values(["rank", "phase", "name"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(k1, k2)
    pd.testing.assert_frame_equal(single.cycles, split.cycles)


def test_directory_input_equals_file_list(single_and_split):
    _, split, out = single_and_split
    from_dir = analyze.load(out)
    pd.testing.assert_frame_equal(from_dir.phases, split.phases)


def test_eight_rank_report_fits_120_columns(tmp_path):
    from fixtures.synth import TraceSpec, write_trace

    paths, _ = write_trace(TraceSpec(ranks=8, cycles=4, one_file=False, straggler={5: 80_000},
                                     clock_offsets_ns=[0, 3_000_000, -2_000_000, 5_000_000, 10, -4_000_000, 25, 7],
                                     cuda_graph_mode="node"), tmp_path)
    proc = cli_process.run([str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 120
    header = next(line for line in lines if line.startswith("phase ") and "rank 7" in line)
    assert all(f"rank {r}" in header for r in range(8))
    assert "straggler rank(s): 5" in proc.stdout
    assert "Clock alignment of separate reports" in proc.stdout


def test_range_input_is_one_categorical_over_every_report(single_and_split):
    _, split, _ = single_and_split
    for inputs in (split.ranges["input"], split.gpu_ops["input"]):
        assert isinstance(inputs.dtype, pd.CategoricalDtype)
        assert list(inputs.cat.categories) == [i["path"] for i in split.inputs]
    ops_per_input = split.gpu_ops.groupby("input", observed=True)["rank"].unique()
    for inp in split.inputs:
        assert sorted(ops_per_input[inp["path"]]) == sorted(inp["ranks"])
    # each report's ranges carry its own path: the ranks of a report's ranges are that report's
    per_input = split.ranges.groupby("input", observed=True)["rank"].unique()
    for inp in split.inputs:
        assert sorted(per_input[inp["path"]]) == sorted(inp["ranks"])


def test_long_notes_are_wrapped_whole_within_120_columns(single_and_split):
    """Notes of several reports carry their path: wrapped onto indented lines, never clipped."""
    from analyze.render import text as render

    import dataclasses

    _, split, _ = single_and_split
    long = ("/very/long/path/to/a/report/of/rank/three/that/someone/recorded/on/a/busy/server/report_3.sqlite: "
            "the whole analysis would need about 12.34 GB and 8.00 GB of memory is available: analysed as "
            "under --memory-budget 4.00 GB (time-ordered chunks; the per-op table gpu_ops is not kept)")
    result = dataclasses.replace(split, notes=split.notes + [long])
    lines = render.render(result, width=120).splitlines()
    assert max(map(len, lines)) <= 120
    flat = " ".join(" ".join(line.split()) for line in lines)
    for note in result.notes:
        assert f"note: {' '.join(str(note).split())}" in flat


def test_a_directory_of_some_ranks_names_the_missing_ones(tmp_path):
    """Two of a 4-rank run's per-rank reports: 'mean of 2 ranks' held without a word that ranks 2 and 3
    were missing (JSON world 4): a missing_ranks note."""
    import shutil

    import analyze
    from analyze.notes import MISSING_RANKS

    real = Path(__file__).resolve().parents[1] / "fixtures" / "real"
    src = [real / f"h200_shim_4rank_rank{r}.sqlite" for r in (0, 1)]
    if not all(p.exists() for p in src):
        pytest.skip("fixtures not unpacked")
    for p in src:
        shutil.copy(p, tmp_path / p.name)
    a = analyze.load(str(tmp_path))
    (note,) = [n for n in a.notes if n.code == MISSING_RANKS]
    assert note.count == 2 and "ranks 2, 3" in note.message and "TP world 4" in note.message
    whole = analyze.load([str(real / f"h200_shim_4rank_rank{r}.sqlite") for r in range(4)]) \
        if all((real / f"h200_shim_4rank_rank{r}.sqlite").exists() for r in range(4)) else None
    if whole is not None:
        assert not [n for n in whole.notes if n.code == MISSING_RANKS]
