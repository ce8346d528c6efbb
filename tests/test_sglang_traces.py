"""Real SGLang 0.5.17 EAGLE-3 runs on an H200, recorded through profile-trace by
recipes/sglang_h200.sh (tiny random-weight Llama target + 1-layer EAGLE-3 draft, TP 1):

* ``sglang_server``: ``python -m sglang.launch_server`` with CUDA graphs, driven by
  ``profile-trace --drive --capture cudaprofilerapi``: exactly SGLang's /start_profile window, which
  held the whole load (8 requests x 32 tokens); ``sglang_server.load.json`` is what SGLang reported.
* ``sglang_graphs``: ``sglang.Engine`` with CUDA graphs, everything captured (load, graph capture,
  prefill); nsys lost the CUDA data of the last cycles (the scheduler is SIGKILLed at shutdown).
* ``sglang_eager`` / ``sglang_vocab64``: ``sglang.Engine`` without CUDA graphs; vocab64 has a
  64-token vocabulary, so random weights accept some draft tokens.

The numbers nsys defines are checked against ``nsys stats`` in tests/test_nsys_equality.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nvtx_annotate import protocol
from analyze.read import report
from analyze.timeline import cycles
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _load(name):
    path = REAL / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} absent")
    return shared_loads.load(path)


@pytest.fixture(scope="module")
def server():
    return _load("sglang_server")


def test_server_every_decode_cycle_has_draft_verify_and_draft_extend(server):
    """CUDA graphs on: draft, verify and draft_extend are graph replays with no NVTX inside them,
    yet every decode cycle of the window gets GPU time in all three."""
    cyc = server.cycles
    assert len(cyc) == 32
    for col in ("draft_ns", "verify_ns", "draft_extend_ns"):
        assert (cyc[col] > 0).all(), col
    phases = server.phases.set_index("phase")["exclusive_ns"]
    assert phases["verify"] > phases["draft_extend"] > 0 and phases["draft"] > 0


def test_server_tokens_per_cycle_equal_what_sglang_reported(server):
    """The whole load lies inside the captured window: over the decode cycles, the requests
    counted by the shim's accept marks equal SGLang's verify steps (``spec_verify_ct``), the
    accepted draft tokens SGLang's correct drafts, and with one prefill token per request the tokens
    equal SGLang's completion tokens. The last cycle ran for requests the previous result had
    finished (overlap scheduling): SGLang discards it, the mark says reqs=0."""
    load = json.loads((REAL / "sglang_server.load.json").read_text())["totals"]
    cyc = server.cycles
    assert int(cyc["requests"].sum()) == load["spec_verify_ct"] == 248
    assert int(cyc["accepted_tokens"].sum()) == load["spec_num_correct_drafts"]
    assert int(cyc["tokens"].sum()) + load["succeeded"] == load["completion_tokens"] == 256
    assert cyc["requests"].tolist() == [8] * 31 + [0]


def test_server_rank_mark_inside_the_capture_window(server):
    """The rank mark is emitted at GroupCoordinator init, before the window opened; the shim emits
    it again when SGLang starts profiling, so the rank comes from the mark, not process order."""
    assert server.ranks["source"].tolist() == ["mark"]


def test_prefill_batches_are_not_decode_cycles():
    """SGLang's v2 worker runs prefill (extend) batches through forward_batch_generation too: the
    shim pushes `prefill` for them, so they are not counted as decode cycles."""
    for name in ("sglang_server", "sglang_graphs"):
        path = REAL / f"{name}.sqlite"
        if not path.exists():
            pytest.skip("fixture absent")
        ranges = report.read_report(str(path)).ranges
        names = ranges["name"].value_counts()
        assert names.get("prefill", 0) == 2, name
        assert names.get("decode_cycle", 0) > 30


def test_accept_marks_carry_their_cycle_number():
    """v2 resolves accept lengths on the scheduler side after the cycle's range closed; every mark
    names its cycle (cycle=K), numbered like the decode_cycle ranges' payloads."""
    path = REAL / "sglang_vocab64.sqlite"
    if not path.exists():
        pytest.skip("fixture absent")
    tables = report.read_report(str(path))
    marks = [protocol.parse_accept_mark(t) for t in tables.marks["text"].astype(str)]
    marks = [m for m in marks if m is not None]
    assert len(marks) == 64 and all(m.cycle is not None for m in marks)
    assert sorted(m.cycle for m in marks) == list(range(1, 65))
    assert sum(m.accepted for m in marks) == 32  # accepted draft tokens over both rounds (random weights, 64 tokens)


def test_vocab64_accepts_draft_tokens_and_eager_finds_every_phase():
    vocab, eager = _load("sglang_vocab64"), _load("sglang_eager")
    for res in (vocab, eager):
        cyc = res.cycles
        # nsys lost the CUDA data after the cycle holding the last recorded op (the scheduler is
        # SIGKILLed at shutdown): that cycle is cut short, the later ones have no GPU ops at all
        full = cyc[cyc["draft_ns"] > 0].iloc[:-1]
        assert len(full) >= 38
        assert (full["verify_ns"] > 0).all() and (full["draft_extend_ns"] > 0).all()
    # the accepted tokens of the cycles nsys recorded GPU work of; the cycles after them (no_gpu_ops
    # rows) keep their accept marks: all 32 accepted tokens of the run are in the table
    acc = cycles.with_gpu(vocab.cycles)["accepted_tokens"]
    assert int(acc.sum()) == 22 and int((acc > 0).sum()) >= 10
    assert int(vocab.cycles["accepted_tokens"].sum()) == 32
    assert (vocab.cycles["tokens"] == vocab.cycles["accepted_tokens"] + vocab.cycles["requests"]).all()


def test_tp1_has_no_allreduce_time():
    """TP 1: no all-reduce runs at all (no kernel, no range), in any of the real SGLang traces."""
    for name in ("sglang_server", "sglang_graphs", "sglang_eager"):
        res = _load(name)
        ph = res.phases.set_index("phase")
        assert int(ph.loc["allreduce", "exclusive_ns"]) == 0 and int(ph.loc["allreduce", "instances"]) == 0
