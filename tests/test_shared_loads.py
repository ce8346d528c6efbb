"""The shared loads of real exports (tests/helpers/shared_loads.py): what a test gets equals a fresh analysis, is
its own to change, and is analysed fresh while analyze is patched."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import views
from analyze.results import Analysis
from analyze.run import api
from analyze.tools import sides
from helpers import frames, shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
SMALL = REAL / "h200_4proc_eager.sqlite"
pytestmark = pytest.mark.skipif(not SMALL.exists(), reason="fixtures not unpacked")

FRAMES = [name for name, kind in Analysis.__annotations__.items() if "DataFrame" in str(kind)]


def _same(a, b):
    for name in FRAMES:
        x, y = getattr(a, name), getattr(b, name)
        if x is None or y is None:
            assert x is None and y is None, name
        else:
            frames.assert_frame_equal(x, y, obj=name)
    assert a.notes == b.notes and a.phase_names == b.phase_names and a.inputs == b.inputs


def test_a_shared_load_is_the_fresh_analysis():
    assert len(FRAMES) >= 10
    _same(shared_loads.load(SMALL), analyze.load(str(SMALL)))
    _same(shared_loads.api_load(SMALL), api.load(str(SMALL)))
    shared, fresh = shared_loads.load_side(SMALL), sides.load_side(SMALL)
    assert shared.label == fresh.label == str(SMALL) and shared.spec_config == fresh.spec_config
    for name in ("cycles", "kernels", "ranges", "gpu_ops"):
        frames.assert_frame_equal(getattr(shared, name), getattr(fresh, name), obj=name)
    # the views' notes are analyze.load's alone: the two kinds are kept apart
    assert len(shared_loads.load(SMALL).notes) > len(shared_loads.api_load(SMALL).notes)
    # a live timing log's directory
    log = REAL / "sglang_live_h100_e2_on"
    shared, fresh = shared_loads.load_side(log), sides.load_side(log)
    assert shared.live and fresh.live and shared.label == fresh.label
    frames.assert_frame_equal(shared.cycles, fresh.cycles)
    _same(shared_loads.load(log), analyze.load(str(log)))


def test_what_one_test_changes_the_next_does_not_see():
    a = shared_loads.load(SMALL)
    want = analyze.load(str(SMALL))
    a.cycles["added"] = 1
    a.cycles.loc[a.cycles.index[0], "rank"] = 99
    del a.kernels[a.kernels.columns[0]]
    a.notes.clear()
    a.phase_names.append("x")
    a.view_cache["x"] = 1
    with pytest.raises(ValueError, match="read-only"):
        a.gpu_ops["start_ns"].to_numpy()[0] = -1
    b = shared_loads.load(SMALL)
    assert b is not a and "added" not in b.cycles and "x" not in b.view_cache
    _same(b, want)
    # a frame held twice (the op store reads gpu_ops) is one frame in each copy
    frames.assert_frame_equal(views.get(b, "decode_per_batch"), views.get(want, "decode_per_batch"))


def test_while_analyze_is_patched_a_load_is_fresh_and_not_kept(monkeypatch):
    shared_loads.api_load(SMALL)             # kept
    calls = []
    real = api.load

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)
    monkeypatch.setattr(api, "load", counted)
    assert shared_loads.patched() == ["analyze.run.api.load"]
    before = dict(shared_loads.STATS)
    shared_loads.api_load(SMALL)
    assert calls == [(str(SMALL),)] and shared_loads.STATS["fresh"] == before["fresh"] + 1
    monkeypatch.undo()
    assert shared_loads.patched() == []
    shared_loads.api_load(SMALL)
    assert len(calls) == 1 and shared_loads.STATS["hits"] == before["hits"] + 1


def test_a_patched_view_registry_or_environment_is_seen(monkeypatch):
    monkeypatch.setitem(views.VIEWS, "decode_per_batch", lambda analysis, **kw: None)
    assert set(shared_loads.patched()) == {"analyze.views[VIEWS].decode_per_batch",
                                           "analyze.views.registry[VIEWS].decode_per_batch"}
    monkeypatch.undo()
    monkeypatch.setenv("SPECPROF_READ_THREADS", "1")     # the reader's knob: another key, analysed under it
    shared_loads.api_load(SMALL)
    assert any(k[:2] == ("api.load", str(SMALL)) and ("SPECPROF_READ_THREADS", "1") in k[3]
               for k in shared_loads._STORE)


def test_an_analysis_leaves_analyze_as_it_was(tmp_path):
    """What analyze sets on itself while it runs (a cache filled in place is not compared) must be in
    shared_loads.RUNTIME_STATE: else every shared load after it would be analysed fresh."""
    from analyze.cli import main

    assert shared_loads.patched() == []
    analyze.load(str(SMALL))
    assert main([str(SMALL), "-q", "--json", str(tmp_path / "r.json")]) == 0
    assert main(["whatif", str(REAL / "h200_moe_steps3.sqlite"), "--boot", "2", "-q"]) == 0
    assert main(["advise", str(SMALL)]) == 0
    assert shared_loads.patched() == []
    assert np.array_equal(shared_loads.api_load(SMALL).ranks["rank"], api.load(str(SMALL)).ranks["rank"])


def test_a_path_as_a_path_or_as_text_is_the_fresh_analysis_of_it():
    """Tests pass a Path as often as a str (``analyze.load(REAL / name)``): the same analysis either way."""
    _same(shared_loads.load(SMALL), analyze.load(SMALL))
    _same(shared_loads.load(str(SMALL)), analyze.load(SMALL))
    assert shared_loads.load(SMALL).inputs[0]["path"] == str(SMALL)
    assert list(shared_loads.load(SMALL).ranks["pid"]) == [1155, 1156, 1157, 1158]


def test_cells_that_are_objects_are_each_copys_own():
    """A column of mutable cells (lists, dicts) is copied cell by cell: a list changed in one copy is not in the
    next; the real clock profile's column of parsed clock marks equals the fresh one's."""
    frame = pd.DataFrame({"n": [1, 2], "lens": [[1, 2], [3]], "name": ["a", "b"], "d": [{"k": 1}, None]})
    held = {"frame": frame, "lens": frame["lens"]}
    first = shared_loads._shared("test_cells", SMALL, lambda: held)
    first["frame"].loc[0, "lens"].append(99)
    first["frame"].loc[0, "d"]["k"] = 2
    first["lens"].iloc[1].clear()
    second = shared_loads._shared("test_cells", SMALL, lambda: pytest.fail("analysed again"))
    assert second["frame"]["lens"].tolist() == [[1, 2], [3]] and second["frame"]["d"].iloc[0] == {"k": 1}
    assert second["lens"].tolist() == [[1, 2], [3]] and frame["lens"].tolist() == [[1, 2], [3]]
    assert second["frame"]["name"].tolist() == ["a", "b"] and second["frame"]["n"].tolist() == [1, 2]
    clock = REAL / "sglang_h100_v3_l32_s3_clock.sqlite"
    if clock.exists():
        shared, fresh = shared_loads.api_load(clock), api.load(str(clock))
        assert len(shared.ranks["clock"].iloc[0]) == 12
        assert shared.ranks["clock"].tolist() == fresh.ranks["clock"].tolist()
        assert shared_loads.load_side(clock).clock == sides.load_side(clock).clock


def test_a_path_outside_the_fixtures_is_analysed_at_each_call(tmp_path):
    """A test's own copy may be rewritten between two loads (within the file system's clock tick, at the same
    size): it is never shared."""
    import shutil

    copy = tmp_path / "copy.sqlite"
    shutil.copy(SMALL, copy)
    assert not shared_loads.shareable(copy) and shared_loads.shareable(SMALL)
    before = dict(shared_loads.STATS)
    a = shared_loads.load(copy)
    assert list(a.ranks["rank"]) == [0, 1, 2, 3] and a.inputs[0]["path"] == str(copy)
    shutil.copy(REAL / "h200_1proc_graphs_graphlevel.sqlite", copy)
    b = shared_loads.load(copy)
    assert list(b.ranks["rank"]) == [0] and len(b.gpu_ops[b.gpu_ops["kind"] == "graph"]) == 80
    assert shared_loads.STATS["unshared"] >= before["unshared"] + 2
    assert shared_loads.STATS["misses"] == before["misses"] and shared_loads.STATS["hits"] == before["hits"]


def test_a_patched_protocol_pattern_is_seen(monkeypatch):
    """analyze parses the shim's marks with nvtx_annotate.protocol's patterns: a patch of one is a patch of the
    analysis."""
    from nvtx_annotate import protocol

    monkeypatch.setattr(protocol, "CLOCK_PREFIX", "no clock")
    assert shared_loads.patched() == ["nvtx_annotate.protocol.CLOCK_PREFIX"]
