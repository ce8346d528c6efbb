"""--perfetto: the analyzed timeline as a Perfetto protobuf trace.

The trace processor itself (a binary the `perfetto` package downloads on first use) cannot be fetched
on these machines, so the file is checked against Perfetto's own schema: parsed with the official
`perfetto_trace_pb2.Trace` message shipped in the `perfetto` package, every byte a known field (the
parse, with unknown fields discarded, serializes back to the same bytes), slices rebuilt per track
the way the trace processor does (begin/end on one track, properly nested, in time order) and their
totals compared with the analysis: phase slices = exclusive time per rank and phase, to the ns;
wait/transfer slices = the skew table; one cycle slice per decode cycle; the tokens counter. Where
a trace_processor_shell binary is available (``SPECPROF_TRACE_PROCESSOR=/path``, or perfetto's
cache), the same totals are read back with SQL from the real trace processor."""
from __future__ import annotations

import glob
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze.timeline import cycles as cycles_mod
from analyze import cli
from analyze.render import perfetto
from analyze.timeline import collectives as coll_mod
from helpers import shared_loads
from fixtures.synth import TraceSpec, write_trace

pb2 = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TE = pb2.TrackEvent


def decode(data: bytes):
    """(tracks {uuid: (name, parent uuid, pid)}, slices DataFrame, counters DataFrame) rebuilt from
    the packets as the trace processor would, asserting the structure on the way."""
    trace = pb2.Trace.FromString(data)
    clean = pb2.Trace.FromString(data)
    clean.DiscardUnknownFields()
    assert clean.SerializeToString() == data, "fields outside Perfetto's schema"
    tracks, open_, slices, counters = {}, defaultdict(list), [], []
    last_ts = -1
    seqs = {p.trusted_packet_sequence_id for p in trace.packet}
    assert seqs == {1}
    assert trace.packet[0].sequence_flags == 1          # incremental state cleared on the first packet
    for p in trace.packet:
        which = p.WhichOneof("data")
        if which == "track_descriptor":
            d = p.track_descriptor
            assert d.uuid not in tracks and d.uuid != 0
            assert (not d.HasField("parent_uuid")) or d.parent_uuid in tracks     # parents come first
            tracks[d.uuid] = (d.name, d.parent_uuid if d.HasField("parent_uuid") else None,
                              d.process.pid if d.HasField("process") else None, d.HasField("counter"))
            continue
        assert which == "track_event"
        assert p.HasField("timestamp") and p.timestamp >= last_ts, "packets out of time order"
        last_ts = p.timestamp
        e = p.track_event
        assert e.track_uuid in tracks
        if e.type == TE.TYPE_SLICE_BEGIN:
            assert not tracks[e.track_uuid][3]
            open_[e.track_uuid].append((p.timestamp, e.name, {a.name: a for a in e.debug_annotations}))
            assert len(open_[e.track_uuid]) == 1, "slices on one track overlap"
        elif e.type == TE.TYPE_SLICE_END:
            ts, name, args = open_[e.track_uuid].pop()
            assert p.timestamp > ts
            slices.append((e.track_uuid, name, ts, p.timestamp - ts, args))
        else:
            assert e.type == TE.TYPE_COUNTER and tracks[e.track_uuid][3]
            counters.append((e.track_uuid, p.timestamp, e.counter_value))
    assert not any(open_.values()), "slices never closed"

    def rank_of(uuid):
        while tracks[uuid][1] is not None:
            uuid = tracks[uuid][1]
        name = tracks[uuid][0]
        assert name.startswith("rank ") and tracks[uuid][2] == int(name.split()[1]) + 1
        return int(name.split()[1])

    def kind(uuid):
        return tracks[uuid][0].rstrip("0123456789 ").strip()

    s = pd.DataFrame([(rank_of(t), kind(t), n, ts, d, a) for t, n, ts, d, a in slices],
                     columns=["rank", "track", "name", "ts", "dur", "args"])
    c = pd.DataFrame([(rank_of(t), kind(t), ts, v) for t, ts, v in counters], columns=["rank", "track", "ts", "value"])
    return tracks, s, c


def check_against(a, data: bytes) -> pd.DataFrame:
    _, s, c = decode(data)
    phases = s[s["track"] == "phases"].groupby(["rank", "name"])["dur"].sum()
    want = a.phases.set_index(["rank", "phase"])["exclusive_ns"]
    want = want[want > 0]
    assert phases.sort_index().to_dict() == {k: int(v) for k, v in want.sort_index().items()}
    busy = s[s["track"] == "phases"].groupby("rank")["dur"].sum()
    assert busy.to_dict() == a.totals.set_index("rank")["busy_ns"].astype(int).to_dict()
    cyc = s[s["track"] == "decode cycles"]
    measured = cycles_mod.with_gpu(a.cycles)      # cycles nsys lost the GPU data of have no slice
    if measured is not None and len(measured):
        assert cyc.groupby("rank").size().to_dict() == measured.groupby("rank").size().to_dict()
        # each slice is the cycle's GPU period, to the ns
        assert cyc.groupby("rank")["dur"].sum().to_dict() == \
            measured.groupby("rank")["gpu_period_ns"].sum().astype(int).to_dict()
    else:
        assert cyc.empty
    if len(a.collectives):
        sk = coll_mod.skew_summary(a.collectives).set_index("rank")
        ar = s[s["track"] == "all-reduce"].groupby(["rank", "name"])["dur"].sum()
        for r in sk.index:
            assert ar.get((r, "wait"), 0) == sk.loc[r, "wait_ns"]
            assert ar.get((r, "transfer"), 0) == sk.loc[r, "transfer_ns"]
    tok = measured.dropna(subset=["tokens"]) if measured is not None and len(measured) else a.cycles.iloc[0:0]
    if len(tok):
        got = c[c["track"] == "tokens per cycle"].groupby("rank")["value"].sum()
        assert got.to_dict() == tok.groupby("rank")["tokens"].sum().astype(int).to_dict()
    return s


@pytest.mark.parametrize("name", ["h200_4proc_eager", "h200_shim_graphs_node", "sglang_graphs"])
def test_real_traces_hold_the_same_phase_totals(name):
    a = shared_loads.load(REAL / f"{name}.sqlite")
    s = check_against(a, perfetto.perfetto_bytes(a))
    assert set(s["track"]) >= {"phases", "decode cycles"}


def test_synthetic_8_ranks_with_collectives_and_a_straggler(tmp_path):
    paths, truth = write_trace(TraceSpec(ranks=8, cycles=5, straggler={5: 80_000}, overlap=True), tmp_path)
    a = analyze.load(paths)
    assert len(a.collectives)
    s = check_against(a, perfetto.perfetto_bytes(a))
    ar = s[s["track"] == "all-reduce"]
    assert set(ar["name"]) == {"wait", "transfer"}
    # the straggler waits least: others wait for it
    wait = ar[ar["name"] == "wait"].groupby("rank")["dur"].sum()
    assert int(wait.idxmin()) == 5
    # a cycle slice carries its number and tokens
    first = s[(s["track"] == "decode cycles") & (s["rank"] == 0)].iloc[0]
    assert first["name"] == "cycle 0" and first["args"]["cycle"].int_value == 0
    assert first["args"]["tokens"].int_value == int(a.cycles[a.cycles["rank"] == 0]["tokens"].iloc[0])


def test_phase_segments_are_disjoint_and_owned_by_the_first_listed_phase():
    ops = pd.DataFrame({"rank": [0, 0, 0, 0], "phase": ["verify", "draft", "other", "verify"],
                        "start_ns": [0, 5, 8, 30], "end_ns": [10, 20, 40, 35]})
    seg = perfetto.phase_segments(ops, ["draft", "verify"])
    assert seg[["phase", "start_ns", "end_ns"]].values.tolist() == [
        ["verify", 0, 5], ["draft", 5, 20], ["other", 20, 30], ["verify", 30, 35], ["other", 35, 40]]


def test_overlapping_slices_go_to_a_second_lane():
    lane = perfetto.lanes(np.array([0, 5, 10, 12]), np.array([10, 8, 20, 13]))
    assert lane.tolist() == [0, 1, 0, 1]


def test_cli_writes_it_atomically_and_lists_it(tmp_path, capsys):
    out = tmp_path / "run.pftrace"
    assert cli.main([str(REAL / "h200_4proc_eager.sqlite"), "--perfetto", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.rstrip().splitlines()[-1] == f"  {out}"
    assert "wrote:" in text
    check_against(shared_loads.load(REAL / "h200_4proc_eager.sqlite"), out.read_bytes())
    assert [p.name for p in tmp_path.iterdir()] == ["run.pftrace"]       # no temporary left


def _trace_processor_shell() -> str | None:
    env = os.environ.get("SPECPROF_TRACE_PROCESSOR")
    if env and os.path.isfile(env):
        return env
    cached = sorted(glob.glob(os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*")))
    return next((c for c in cached if not c.endswith(".tmp") and os.access(c, os.X_OK)), None)


@pytest.mark.skipif(_trace_processor_shell() is None,
                    reason="no trace_processor_shell binary (it is downloaded on first use; offline here)")
def test_trace_processor_reads_the_same_phase_totals(tmp_path):
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig

    a = shared_loads.load(REAL / "h200_4proc_eager.sqlite")
    path = perfetto.write_perfetto(a, tmp_path / "t.pftrace")
    tp = TraceProcessor(trace=str(path), config=TraceProcessorConfig(bin_path=_trace_processor_shell()))
    q = tp.query("""
        select p.name as proc, s.name as phase, sum(s.dur) as dur
        from slice s join track t on s.track_id = t.id
        join track pt on pt.id = t.parent_id
        join process_track ptt on ptt.id = pt.id join process p using (upid)
        where t.name = 'phases' group by 1, 2""").as_pandas_dataframe()
    got = {(int(r.proc.split()[1]), r.phase): int(r.dur) for r in q.itertuples()}
    want = a.phases.set_index(["rank", "phase"])["exclusive_ns"]
    assert got == {k: int(v) for k, v in want.items() if v > 0}


def test_chunked_analysis_writes_the_phases_track_from_its_spilled_ops(tmp_path, capsys):
    """A report analysed in chunks keeps no per-op table: the phases track is cut from its op store
    (the spilled ops, a rank at a time), the same bytes as the whole analysis'."""
    whole, chunked = tmp_path / "w.pftrace", tmp_path / "c.pftrace"
    report = str(REAL / "h200_4proc_eager.sqlite")
    assert cli.main([report, "--perfetto", str(whole), "-q"]) == 0
    assert cli.main([report, "--memory-budget", "1MB", "--perfetto", str(chunked), "-q"]) == 0
    assert "no phases track" not in capsys.readouterr().err
    _, s, _ = decode(chunked.read_bytes())
    assert "phases" in set(s["track"]) and "decode cycles" in set(s["track"])
    assert chunked.read_bytes() == whole.read_bytes()
