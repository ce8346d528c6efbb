"""Structured notes and error types: code decides on codes and classes, the text is for people."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import analyze
from analyze import notes as N
from analyze.errors import NoCudaActivity, NvtxOnly
from analyze.notes import Note
from fixtures.synth import TraceSpec, write_trace

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def test_note_text_json_and_pickle():
    n = Note(N.ZERO_LENGTH_OPS, "4 GPU ops have zero duration (counted, add no time)", 4)
    assert str(n) == "4 GPU ops have zero duration (counted, add no time)"
    about = n.about_input("r1.sqlite")
    assert str(about) == "r1.sqlite: 4 GPU ops have zero duration (counted, add no time)"
    assert about.to_dict() == {"code": "zero_length_ops", "count": 4, "input": "r1.sqlite", "rank": None,
                               "message": "4 GPU ops have zero duration (counted, add no time)"}
    assert N.text_of(about.to_dict()) == str(about) and N.text_of("plain, schema 1") == "plain, schema 1"
    assert pickle.loads(pickle.dumps(about)) == about          # crosses process pools and Dask
    assert N.has([n], N.ZERO_LENGTH_OPS) and not N.has([n, "text"], N.CHUNKED)
    with pytest.raises(ValueError, match="unknown note code"):
        Note("zero length", "x")


def test_notes_of_several_reports_name_their_input(tmp_path):
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=2, one_file=False, zero_length_kernels=2, unclosed_range=True), tmp_path)
    from analyze.views.analysis_notes import CODES

    def of_reports(notes):       # the views' notes (and missing ranks) are about the whole analysis, not one report
        return [n for n in notes if n.code not in CODES and n.code != N.MISSING_RANKS]

    one = analyze.load(str(paths[0]))
    both = analyze.load([str(p) for p in paths])
    assert one.notes and all(n.input is None for n in one.notes)
    assert [n.code for n in one.notes if n.code in CODES] == ["skew_skipped"]        # one rank
    assert [n.message for n in one.notes if n.code == N.MISSING_RANKS] == [
        "the rank marks say TP world 2; no input holds rank 1: every per-rank figure is of the 1 rank given"]
    assert not [n for n in both.notes if n.code == N.MISSING_RANKS]
    assert [n.input for n in of_reports(both.notes)] == [str(p) for p in paths for n in of_reports(one.notes)]
    assert [n.code for n in of_reports(both.notes)] == [n.code for n in of_reports(one.notes)] * 2


def test_chunked_note_counts_the_chunks(tmp_path):
    paths, _ = write_trace(TraceSpec(ranks=2, cycles=3), tmp_path)
    whole = analyze.load(str(paths[0]), memory_budget=None)
    chunked = analyze.load(str(paths[0]), memory_budget=1)
    assert not N.has(whole.notes, N.CHUNKED)
    note = next(n for n in chunked.notes if n.code == N.CHUNKED)
    assert note.count >= 1 and f"analysed in {note.count} time-ordered chunk" in note.message


def test_nvtx_only_is_its_own_error_type():
    with pytest.raises(NvtxOnly, match="NVTX only") as info:
        analyze.load(str(REAL / "cpu2022_shim.sqlite"))
    assert isinstance(info.value, NoCudaActivity) and info.value.exit_code == 7
    with pytest.raises(NvtxOnly):
        analyze.load(str(REAL / "cpu2022_shim.sqlite"), memory_budget=1)
