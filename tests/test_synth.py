"""The synthetic trace generator (fixtures/synth.py): layout like real exports, truth consistent with
the files it wrote and with its own spec, deterministic, and (when nsys is installed) equal to what
`nsys stats` computes from the file."""
from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import subprocess
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from fixtures.synth import TraceSpec, main, table_columns, write_trace

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "public-traces"
REEXPORT_2022 = PUBLIC / "amir-ghz_DynamicViT__nsys_profile__reexport_2022.4.sqlite"
ODD = dict(start_end_ranges=True, unclosed_range=True, missing_runtime=2, zero_length_kernels=1,
           negative_globaltid=True, invalid_utf8=True, overlap=True, unranged_kernels=2)
OP_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
             "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")


def _db(path):
    con = sqlite3.connect(str(path))
    con.text_factory = bytes
    return con


def _tables(con):
    return {r[0].decode() for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _info(con, table):
    return [(r[1].decode(), r[2].decode(), r[3], r[5]) for r in con.execute(f"PRAGMA table_info({table})")]


def _ops(con):
    """{globalPid: [(start, end)]} over all GPU-op tables present."""
    out = defaultdict(list)
    for t in OP_TABLES:
        if t in _tables(con):
            for gp, s, e in con.execute(f"SELECT globalPid, start, end FROM {t}"):
                out[gp].append((s, e))
    return out


def _union(iv):
    tot, cs, ce = 0, None, None
    for s, e in sorted(iv):
        if ce is None or s > ce:
            tot += (ce - cs) if ce is not None else 0
            cs, ce = s, e
        else:
            ce = max(ce, e)
    return tot + ((ce - cs) if ce is not None else 0)


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    cache = {}

    def make(**kw):
        key = json.dumps(kw, sort_keys=True)
        if key not in cache:
            out = tmp_path_factory.mktemp("synth")
            cache[key] = write_trace(TraceSpec(**kw), out)
        return cache[key]
    return make


# ---------------------------------------------------------------- layout
@pytest.mark.skipif(not (REAL / "h200_4proc_eager.sqlite").exists(), reason="real fixtures absent")
def test_tables_and_columns_match_real_2025_3_export(gen):
    real = {n: _db(REAL / n) for n in ("h200_4proc_eager.sqlite", "h200_1proc_graphs_graphlevel.sqlite")}
    checked = set()
    for kw in (dict(ranks=2, cycles=2, cuda_graph_mode="node", **ODD), dict(ranks=2, cycles=2, cuda_graph_mode="graph")):
        paths, _ = gen(**kw)
        con = _db(paths[0])
        for t in sorted(_tables(con)):
            ref = next((c for c in real.values() if t in _tables(c)), None)
            assert ref is not None, f"{t} is not a table of the real exports"
            assert _info(con, t) == _info(ref, t), t
            assert [c for c, *_ in _info(con, t)] == table_columns(t, "2025.3")
            checked.add(t)
    assert {"StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "PROCESSES", "ThreadNames", "TARGET_INFO_GPU",
            "TARGET_INFO_CUDA_DEVICE", "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT", "META_DATA_CAPTURE",
            *OP_TABLES} <= checked


def test_metadata_like_nsys_2025_3(gen):
    paths, _ = gen(ranks=2, cycles=2, cuda_graph_mode="node")
    con = _db(paths[0])
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
    assert meta[b"EXPORT_SCHEMA_VERSION"] == b"3.20.3" and meta[b"EXPORT_PRODUCT_VERSION"] == b"2025.3.2.0"
    cap = dict(con.execute("SELECT name, value FROM META_DATA_CAPTURE"))
    assert cap[b"PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == b"Node"
    cap = dict(_db(gen(ranks=2, cycles=2, cuda_graph_mode="graph")[0][0]).execute("SELECT * FROM META_DATA_CAPTURE"))
    assert cap[b"PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE"] == b"Graph"
    types = dict(con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"))
    assert types[59] == b"NvtxPushPopRange" and types[75] == b"NvtxDomainCreate"
    names = {r[0] for r in con.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId")}
    assert {b"cudaLaunchKernel_v7000", b"cudaGraphLaunch_v10000", b"cudaMemcpyAsync_v3020",
            b"cudaMemsetAsync_v3020", b"cudaStreamSynchronize_v3020"} <= names
    # domain create rows: name in text, id in domainId; registered names via textId
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType=75 AND text='sglang' AND domainId=1").fetchone()[0] == 2
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE textId IS NOT NULL").fetchone()[0] > 0
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType=59 AND text IS NOT NULL").fetchone()[0] > 0
    gpus = con.execute("SELECT id, name FROM TARGET_INFO_GPU").fetchall()
    assert gpus == [(0, b"NVIDIA H200"), (1, b"NVIDIA H200")]


def test_schema_2022_4_layout(gen):
    paths, truth = gen(ranks=2, cycles=2, schema="2022.4", cuda_graph_mode="node")
    con = _db(paths[0])
    tables = _tables(con)
    assert "EXPORT_META_DATA" in tables
    assert not tables & {"META_DATA_EXPORT", "META_DATA_CAPTURE", "TARGET_INFO_CUDA_DEVICE",
                         "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"}
    assert dict(con.execute("SELECT name, value FROM EXPORT_META_DATA"))[b"EXPORT_SCHEMA_VERSION"] == b"3.0.0"
    kcols = [c for c, *_ in _info(con, "CUPTI_ACTIVITY_KIND_KERNEL")]
    assert "greenContextId" not in kcols and kcols[:5] == ["start", "end", "deviceId", "contextId", "streamId"]
    assert "binaryData" not in [c for c, *_ in _info(con, "NVTX_EVENTS")]
    assert "copyCount" not in [c for c, *_ in _info(con, "CUPTI_ACTIVITY_KIND_MEMCPY")]
    if REEXPORT_2022.exists():  # the tables a real 2022.4 export of an empty capture has
        ref = _db(REEXPORT_2022)
        for t in ("StringIds", "PROCESSES", "ThreadNames", "TARGET_INFO_GPU", "TARGET_INFO_SESSION_START_TIME",
                  "EXPORT_META_DATA"):
            assert [c for c, *_ in _info(con, t)] == [c for c, *_ in _info(ref, t)], t
    with pytest.raises(ValueError):
        write_trace(TraceSpec(schema="2022.4", cuda_graph_mode="graph"), paths[0].parent / "x")
    assert sum(r["counts"]["kernel"] for r in truth["ranks"]) == \
        con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]


# ---------------------------------------------------------------- truth vs the files and the spec
@pytest.mark.parametrize("kw", [dict(ranks=3, cycles=3), dict(ranks=2, cycles=2, cuda_graph_mode="node", **ODD),
                                dict(ranks=2, cycles=2, cuda_graph_mode="graph", overlap=True),
                                dict(ranks=4, cycles=2, one_file=False, straggler={1: 80_000}, **ODD)])
def test_truth_totals_agree_with_file(gen, kw):
    paths, truth = gen(**kw)
    by_pid = {}
    for p in paths:
        con = _db(p)
        for gp, ivs in _ops(con).items():
            by_pid[gp] = (ivs, con)
    for rt in truth["ranks"]:
        ivs, con = by_pid[rt["global_pid"]]
        assert _union(ivs) == rt["busy_ns"]
        n, kns = con.execute("SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid=?",
                             (rt["global_pid"],)).fetchone()
        assert (n, kns) == (rt["counts"]["kernel"], rt["kernel_ns"])
        start, end = min(s for s, _ in ivs), max(e for _, e in ivs)
        assert (start + rt["offset_ns"], end + rt["offset_ns"]) == (rt["window_start_ns"], rt["window_end_ns"])
        assert rt["idle_ns"] == end - start - rt["busy_ns"]
        excl = sum(p["exclusive_ns"] for p in rt["phases"].values())
        assert excl == rt["exclusive_attributed_ns"] and excl + rt["unattributed_ns"] == rt["busy_ns"]
        for p in rt["phases"].values():
            assert p["exclusive_ns"] <= p["busy_ns"] and p["kernel_ns"] >= 0
        assert sum(k["total_ns"] for k in rt["kernels"]) == rt["kernel_ns"]
        assert sum(k["instances"] for k in rt["kernels"]) == rt["counts"]["kernel"]
        pid_mask = rt["global_pid"] & ~0xFFFFFF
        assert pid_mask == rt["global_pid"] and (rt["main_global_tid"] >> 24) & 0xFFFFFF == rt["pid"]
        utc = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        assert utc == rt["utc_epoch_ns"]


def test_cycles_sum_to_cycle_gpu_time_and_match_marks(gen):
    paths, truth = gen(ranks=3, cycles=4, overlap=True)
    con = _db(paths[0])
    marks = defaultdict(list)
    for gt, text in con.execute("SELECT globalTid, text FROM NVTX_EVENTS WHERE eventType=34 ORDER BY start"):
        if text.startswith(b"accept_len="):
            marks[gt].append(int(text.split(b"=")[1]))
    for rt in truth["ranks"]:
        assert [c["accepted_tokens"] for c in rt["cycles"]] == marks[rt["main_global_tid"]]
        for c in rt["cycles"]:
            assert sum(c["phase_ns"].values()) + c["gap_ns"] == c["duration_ns"] == c["end_ns"] - c["start_ns"]
            assert c["draft_ns"] + c["verify_ns"] + c["allreduce_ns"] + c["other_ns"] + c["gap_ns"] == c["duration_ns"]
            assert c["draft_ns"] > 0 and c["verify_ns"] > 0 and c["allreduce_ns"] > 0
        spans = [(c["start_ns"], c["end_ns"]) for c in rt["cycles"]]
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_nvtx_projection_counts_follow_the_spec(gen):
    R, C, K, L = 3, 4, 2, 3
    _, truth = gen(ranks=R, cycles=C, draft_steps=K, verify_layers=L)
    rows = {(r["range"], r["style"]): r for r in truth["nvtx_projection"]}
    inst = {k[0]: v["instances"] for k, v in rows.items()}
    assert inst["sglang:decode_cycle"] == inst[":decode_cycle"] == C * R
    assert inst["sglang:verify"] == inst[":verify"] == inst["sglang:draft_extend"] == C * R
    assert inst["sglang:draft_step"] == inst[":draft_step"] == C * R * K
    assert inst["sglang:allreduce"] == inst[":allreduce"] == C * R * L
    assert inst["sglang:draft"] == 2 * C * R and inst[":draft"] == C * R  # + the second thread's `draft`
    ops = {k[0]: v["gpu_ops"] for k, v in rows.items()}
    assert ops["sglang:verify"] == C * R * L * 6  # 4 kernels, 1 allreduce, 1 mlp per layer
    assert ops["sglang:allreduce"] == C * R * L
    assert ops["sglang:draft_step"] == C * R * K * 3
    assert ops[":draft"] == C * R * (K * 3 + 1)  # + the memset
    assert ops["sglang:decode_cycle"] == C * R * (1 + K * 3 + L * 6 + 2 + 1)  # + D2H copy
    assert all(r["style"] == "PushPop" for r in truth["nvtx_projection"])
    assert [r["total_projected_ns"] for r in truth["nvtx_projection"]] == \
        sorted((r["total_projected_ns"] for r in truth["nvtx_projection"]), reverse=True)
    # no range without GPU ops, and graph-level launches are not GPU ops for nsys
    _, tg = gen(ranks=2, cycles=2, cuda_graph_mode="graph")
    names = {r["range"] for r in tg["nvtx_projection"]}
    assert "sglang:verify" not in names and "sglang:draft_extend" in names and "sglang:decode_cycle" in names


def test_collectives_end_together_and_straggler_is_found(gen):
    offs = [0, 7_000_000, -3_000_000, 12_345_678]
    errs = [0, 400_000, -250_000, 900_000]
    paths, truth = gen(ranks=4, cycles=3, one_file=False, clock_offsets_ns=offs, utc_error_ns=errs,
                       straggler={2: {"cycle": 1, "phase": "verify", "delay_ns": 500_000}})
    assert [p.name for p in paths] == [f"report_rank{r}.sqlite" for r in range(4)]
    ends = {}
    for rt, p in zip(truth["ranks"], paths):
        assert rt["offset_ns"] == rt["align_to_rank0_add_ns"] == offs[0] - offs[rt["rank"]]
        con = _db(p)
        ends[rt["rank"]] = [e + rt["offset_ns"] for (e,) in con.execute(
            "SELECT k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
            "WHERE s.value LIKE 'ncclDevKernel_AllReduce%' ORDER BY k.start")]
        utc = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        assert utc == truth["true_utc_start_ns"] - offs[rt["rank"]] + errs[rt["rank"]]
    n = 3 * 4
    assert all(len(v) == n for v in ends.values()) and len(truth["collectives"]) == n
    for c in truth["collectives"]:
        assert {e[c["collective"]] for e in ends.values()} == {c["ranks"][0]["end_ns"]}
        for r in c["ranks"]:
            d = r["end_ns"] - r["start_ns"]
            assert r["wait_ns"] + r["transfer_ns"] == d and r["wait_ns"] == min(r["arrival_lag_ns"], d)
            assert r["file_end_ns"] + truth["ranks"][r["rank"]]["offset_ns"] == r["end_ns"]
    late = truth["collectives"][4]  # cycle 1, layer 0: right after the stretched verify kernel
    assert (late["cycle"], late["layer"]) == (1, 0)
    assert late["last_arrival_ranks"] == [2] and late["late_phase"] == "verify"
    assert all(r["wait_ns"] > 400_000 for r in late["ranks"] if r["rank"] != 2)
    assert truth["ranks"][2]["stragglers_injected"] == [dict(cycle=1, phase="verify", delay_ns=500_000,
                                                             gpu_t=truth["ranks"][2]["stragglers_injected"][0]["gpu_t"])]
    assert all(c["late_phase"] is None for c in truth["collectives"] if c["collective"] != 4)


def test_graph_modes(gen):
    _, tn = gen(ranks=2, cycles=2, cuda_graph_mode="node")
    paths, _ = gen(ranks=2, cycles=2, cuda_graph_mode="node")
    con = _db(paths[0])
    rows = con.execute("SELECT k.globalPid, k.correlationId, count(*), s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                       "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
                       "AND r.globalTid - (r.globalTid & 16777215) = k.globalPid JOIN StringIds s ON s.id = r.nameId "
                       "WHERE k.graphNodeId IS NOT NULL GROUP BY 1, 2").fetchall()
    assert len(rows) == 2 * 2 * 2 and all(name == b"cudaGraphLaunch_v10000" and n > 1 for *_, n, name in rows)
    for rt in tn["ranks"]:
        assert rt["phases"]["allreduce"]["instances"] == 0  # no NVTX allreduce range in graphs...
        assert rt["phases"]["allreduce"]["exclusive_ns"] > 0  # ...the kernel-name rule finds them
    assert len(tn["collectives"]) == 2 * 4
    paths, tg = gen(ranks=2, cycles=2, cuda_graph_mode="graph")
    con = _db(paths[0])
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE").fetchone()[0] == 2 * 2 * 2
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL").fetchone()[0] == 0
    assert tg["collectives"] == [] and tg["collectives_hidden"] == 2 * 4
    assert all(rt["counts"]["graph"] == 4 and rt["phases"]["allreduce"]["busy_ns"] == 0 for rt in tg["ranks"])


def test_odd_cases_are_in_the_file(gen):
    paths, truth = gen(ranks=2, cycles=2, cuda_graph_mode="node", **ODD)
    con = _db(paths[0])
    neg = con.execute("SELECT count(*), min(globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid < 0").fetchone()
    assert neg[0] > 0 and (neg[1] + (1 << 64)) >> 56 == 0x80
    values = [v for (v,) in con.execute("SELECT value FROM StringIds")]
    bad = [v for v in values if not _utf8(v)]
    assert len(bad) == 1
    assert con.execute("SELECT count(*) FROM StringIds WHERE typeof(value) != 'text'").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType=59 AND end IS NULL").fetchone()[0] == 2
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType=60 AND rangeId IS NOT NULL").fetchone()[0] == 2 * 2 + 2
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE endGlobalTid IS NOT NULL").fetchone()[0] == 2
    orphans = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
        "r.correlationId = k.correlationId AND (r.globalTid & -16777216) = k.globalPid WHERE r.start IS NULL").fetchone()[0]
    assert orphans == 2 * 2
    assert con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start = end").fetchone()[0] == 2 * 1
    corr = Counter(c for _, c in con.execute("SELECT DISTINCT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    assert sum(n > 1 for n in corr.values()) > 10  # correlation ids restart per process
    streams = {s for (s,) in con.execute("SELECT DISTINCT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert streams == {7, 14, 21}
    for rt in truth["ranks"]:
        assert any(k["phase"] == "other" and k["name"].startswith("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT")
                   for k in rt["kernels"])  # the draft_extend GEMM whose runtime row is gone


def _utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_overlap_first_listed_phase_wins(gen):
    _, t = gen(ranks=2, cycles=2, overlap=True, second_thread_ranges=False)
    _, t0 = gen(ranks=2, cycles=2, overlap=False, second_thread_ranges=False)
    for rt, r0 in zip(t["ranks"], t0["ranks"]):
        ph = rt["phases"]
        assert ph["draft"]["exclusive_ns"] == ph["draft"]["busy_ns"]  # draft is listed first: never loses
        assert ph["verify"]["exclusive_ns"] < ph["verify"]["busy_ns"]
        assert sum(p["busy_ns"] for p in ph.values()) > rt["busy_ns"]
        assert sum(p["busy_ns"] for p in r0["phases"].values()) - r0["phases"]["verify"]["busy_ns"] \
            + r0["phases"]["verify"]["exclusive_ns"] == r0["busy_ns"] - r0["unattributed_ns"]


def test_deterministic_and_seeded(tmp_path):
    spec = dict(ranks=2, cycles=3, cuda_graph_mode="node", **ODD)
    dumps, truths = [], []
    for i, seed in enumerate((5, 5, 6)):
        paths, truth = write_trace(TraceSpec(seed=seed, **spec), tmp_path / str(i))
        con = _db(paths[0])
        dumps.append([(name, sql, con.execute(f"SELECT * FROM {name.decode()}").fetchall())
                      for name, sql in con.execute("SELECT name, sql FROM sqlite_master ORDER BY name")])
        truth.pop("generation_s")
        truths.append(json.dumps(truth, sort_keys=True))
    assert dumps[0] == dumps[1] and truths[0] == truths[1]
    assert dumps[0] != dumps[2] and truths[0] != truths[2]


def test_per_rank_split_has_the_same_events(gen):
    kw = dict(ranks=3, cycles=2, cuda_graph_mode="node", second_thread_ranges=True, start_end_ranges=True)
    one_paths, one = gen(**kw)
    per_paths, per = gen(one_file=False, **kw)
    assert len(one_paths) == 1 and len(per_paths) == 3

    def events(paths, truth):
        out = Counter()
        shift = {r["pid"]: r["file_time_shift_ns"] for r in truth["ranks"]}
        for p in paths:
            con = _db(p)
            for t, who in (("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                           ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                           ("NVTX_EVENTS", "globalTid")):
                for g, s, e, c in con.execute(f"SELECT {who}, start, end, "
                                              f"{'correlationId' if 'CUPTI' in t else 'eventType'} FROM {t}"):
                    sh = shift[(g >> 24) & 0xFFFFFF]
                    out[(t, g, s - sh, None if e is None else e - sh, c)] += 1
        return out
    assert events(one_paths, one) == events(per_paths, per)
    assert any(r["file_time_shift_ns"] for r in per["ranks"])
    for a, b in zip(one["ranks"], per["ranks"]):
        for f in ("busy_ns", "kernel_ns", "unattributed_ns", "phases", "kernels", "counts"):
            assert a[f] == b[f], f
        assert [c["duration_ns"] for c in a["cycles"]] == [c["duration_ns"] for c in b["cycles"]]
    assert one["nvtx_projection"] == per["nvtx_projection"]


# ---------------------------------------------------------------- scale mode and CLI
@pytest.mark.parametrize("one_file", [True, False])
def test_scale_mode_totals(tmp_path, one_file):
    paths, truth = write_trace(TraceSpec(ranks=3, total_kernels=20_003, one_file=one_file, seed=1), tmp_path)
    assert truth["mode"] == "scale" and len(paths) == (1 if one_file else 3)
    kernels = 0
    for p in paths:
        con = _db(p)
        ops = _ops(con)
        for rt in truth["ranks"]:
            if rt["global_pid"] not in ops:
                continue
            n, kns = con.execute("SELECT count(*), sum(end-start) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE globalPid=?",
                                 (rt["global_pid"],)).fetchone()
            assert (n, kns) == (rt["counts"]["kernel"], rt["kernel_ns"])
            assert _union(ops[rt["global_pid"]]) == rt["busy_ns"]
            assert sum(rt["exclusive_ns"].values()) + rt["unattributed_ns"] == rt["busy_ns"]
            kernels += n
        nv = con.execute("SELECT count(*) FROM NVTX_EVENTS").fetchone()[0]
        rtc = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        mine = [rt for rt in truth["ranks"] if rt["file"] == p.name]
        assert nv == sum(rt["counts"]["nvtx"] for rt in mine) and rtc == sum(rt["counts"]["runtime"] for rt in mine)
    assert kernels == 20_003 == sum(rt["counts"]["kernel"] for rt in truth["ranks"])


def test_cli_writes_files_and_truth(tmp_path, capsys):
    assert main(["--ranks", "2", "--kernels", "5000", "-o", str(tmp_path), "--per-rank"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report_rank0.sqlite", "report_rank1.sqlite", "truth.json"]
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert sum(r["counts"]["kernel"] for r in truth["ranks"]) == 5000
    assert "wrote 2 file(s)" in capsys.readouterr().out


# ---------------------------------------------------------------- nsys itself
@pytest.mark.nsys
@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not on PATH")
def test_nsys_projection_equals_truth(gen, tmp_path):
    """nsys 2022.4's `nvtxgpuproj` (a per-range trace) summed per (range, style) equals the truth rows."""
    paths, truth = gen(ranks=3, cycles=3, schema="2022.4", cuda_graph_mode="node", **ODD)
    proc = subprocess.run(["nsys", "stats", "-q", "-r", "nvtxgpuproj", "-f", "csv", "-o", str(tmp_path / "o"),
                           str(paths[0])], capture_output=True, text=True, timeout=300)
    out = tmp_path / "o_nvtxgpuproj.csv"
    if not out.exists():  # newer nsys names the report nvtx_gpu_proj_trace
        proc = subprocess.run(["nsys", "stats", "-q", "-r", "nvtx_gpu_proj_trace", "-f", "csv", "-o",
                               str(tmp_path / "o"), str(paths[0])], capture_output=True, text=True, timeout=300)
        out = tmp_path / "o_nvtx_gpu_proj_trace.csv"
    if not out.exists():
        pytest.skip(f"nsys stats produced nothing: {proc.stderr[-500:]}")
    agg = {}
    with open(out, newline="") as f:
        for row in csv.DictReader(f):
            name = row["Name"] if ":" in row["Name"] else ":" + row["Name"]  # 2022.4 prints the default domain bare
            a = agg.setdefault((name, row["Style"]), [0, 0, 0, 0])
            a[0] += 1
            a[1] += int(row["Projected Duration (ns)"])
            a[2] += int(row["Orig Duration (ns)"])
            a[3] += int(row["NumGPUOps"])
    expected = {(r["range"], r["style"]): [r["instances"], r["total_projected_ns"], r["total_range_ns"], r["gpu_ops"]]
                for r in truth["nvtx_projection"]}
    assert agg == expected
