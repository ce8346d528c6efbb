"""analyze-trace advise (issue 20): every rule on a synthetic trace that triggers it and one that does
not, with the figures checked against the generator; the done-when cases (8 ranks with SIMPLE
all-reduces dominating verify, a late rank, a host-bound loop); the real SGLang server trace; the
all-reduce kinds read from kernel names; NCCL payload message sizes; the SGLang flag names against
the real 0.5.17 sources."""
from __future__ import annotations

import json
import re
import sqlite3
import struct
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import findings as F
from analyze.read import nccl_payloads as NP
from analyze.tools.advise import kinds as K
from analyze.tools.advise import settings as S
from analyze.tools.advise.model import advise
from helpers import cli_process, shared_loads

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_bf16_{}(ncclDevKernelArgsStorage<(unsigned long)4096>)"


def _trace(tmp_path, **kw):
    from fixtures.synth import TraceSpec, write_trace

    base = dict(ranks=1, cycles=24, jitter=0.0)     # 20+ steady cycles: enough for a decision (whatif.MIN_CYCLES)
    base.update(kw)
    paths, truth = write_trace(TraceSpec(**base), tmp_path)
    return analyze.load(paths), truth, paths


def _check(adv, rule):
    return next(c for c in adv.checks if c.rule == rule)


def _one(adv, rule):
    got = [f for f in adv.findings if f.rule == rule]
    assert len(got) == 1, [f.rule for f in adv.findings]
    return got[0]


# ----------------------------------------------------------------------------------- kinds from names
@pytest.mark.parametrize("name, kind, algo, proto, variant", [
    (NCCL_KERNEL.format("RING_LL"), K.NCCL, "RING", "LL", None),
    (NCCL_KERNEL.format("RING_LL128"), K.NCCL, "RING", "LL128", None),
    (NCCL_KERNEL.format("TREE_SIMPLE"), K.NCCL, "TREE", "SIMPLE", None),
    ("ncclDevKernel_AllReduce_Sum_f32_NVLS_TREE_SIMPLE", K.NCCL, "NVLS_TREE", "SIMPLE", None),
    ("ncclDevKernel_AllReduce_Sum_bf16_NVLS_SIMPLE", K.NCCL, "NVLS", "SIMPLE", None),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", K.NCCL, "RING", "LL", None),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<(unsigned long)4096>)", K.NCCL, None, None, None),
    ("void sglang::cross_device_reduce_1stage<__nv_bfloat16, (int)8>(sglang::RankData *, sglang::RankSignals, "
     "sglang::Signal *, __nv_bfloat16 *, int, int)", K.CUSTOM, None, None, "1stage"),
    ("void vllm::cross_device_reduce_2stage<float, (int)4>(...)", K.CUSTOM, None, None, "2stage"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<...>(...)", K.FUSED, None,
     None, "oneshot"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>>(int, T2, T3)", K.OTHER,
     None, None, None),
])
def test_kind_of_kernel_names(name, kind, algo, proto, variant):
    k = K.kind_of(name)
    assert (k.kind, k.algorithm, k.protocol, k.variant) == (kind, algo, proto, variant)
    assert k.label


@pytest.mark.parametrize("n", [40, 1 << 16])          # both paths of codes.factorize_objects
def test_allreduce_groups_equal_pandas_groupby(n):
    """rule_allreduce's phase groups and _kind_rows' per-kind sums (integer codes of the shared name
    objects) equal the pandas groupby they replace: no phase is ``other`` (merged with a phase
    named so), groups in first-appearance order, rows without a name left out."""
    from analyze.tools.advise import model as M

    rng = np.random.default_rng(7)
    phases = np.array(["verify", None, "draft", "other", float("nan")], dtype=object)
    names = np.array([NCCL_KERNEL.format("RING_LL"), NCCL_KERNEL.format("TREE_SIMPLE"), None,
                      "void sglang::cross_device_reduce_1stage<float, (int)8>(...)"], dtype=object)
    rows = pd.DataFrame({"transfer_ns": rng.integers(0, 10**6, n), "wait_ns": rng.integers(0, 10**6, n),
                         "duration_ns": rng.integers(0, 10**6, n),
                         "name": pd.Series(names[rng.integers(0, len(names), n)], dtype=object),
                         "phase": pd.Series(phases[rng.integers(0, len(phases), n)], dtype=object)})
    codes, labels = M._phase_groups(rows["phase"].to_numpy(dtype=object))
    want = [(p, g.index.tolist()) for p, g in rows.groupby(rows["phase"].fillna("other"), sort=False)]
    got = [(labels[c], g.index.tolist()) for c, g in rows.groupby(codes, sort=False)]
    assert got == want and [p for p, _ in got][:1] == [rows["phase"].fillna("other").iloc[0]]
    assert len(got) == 3                                   # verify, other (None, NaN and "other"), draft
    for _, idx in want:
        part = rows.loc[idx]
        ref: dict[str, list] = {}
        for name, g in part.groupby(part["name"].to_numpy(dtype=object), sort=False):
            r = ref.setdefault(K.kind_of(name).label, [0, 0, 0])
            r[0] += len(g)
            r[1] += int(g["transfer_ns"].sum())
            r[2] += int(g["duration_ns"].sum())
        kinds = M._kind_rows(part)
        assert {k["label"]: [k["count"], k["transfer_ns"], k["duration_ns"]] for k in kinds} == ref
        assert [k["transfer_ns"] for k in kinds] == sorted((v[1] for v in ref.values()), reverse=True)
        assert sum(k["count"] for k in kinds) == int(part["name"].notna().sum())


def _steady(a) -> pd.DataFrame:
    """The cycles advise reads: the cycle table's steady state (warm-up flags false)."""
    return a.cycles[~a.cycles["warmup"].astype(bool)]


# ----------------------------------------------------------------------------------- verify_dominated
def test_verify_dominated_triggers_with_the_step_count_of_whatif(tmp_path):
    a, _, _ = _trace(tmp_path, verify_layers=8)
    adv = advise(a)
    f = _one(adv, F.VERIFY_DOMINATED)
    steady = _steady(a)
    assert len(steady) < len(a.cycles)                    # the first cycle of every rank is left out
    cyc = steady["period_ns"].mean()
    assert adv.cycle_ns == pytest.approx(cyc)
    assert f.ceiling_ns == pytest.approx(steady["verify_ns"].mean())
    assert f.evidence["verify_share"] == pytest.approx(steady["verify_ns"].mean() / cyc)
    assert f.evidence["verify_share"] >= 0.5
    w = adv.whatif
    assert f.evidence["profiled_steps"] == w["profiled_steps"] == 3
    # the saving is the cycle time per token the recommended step count saves
    assert f.saving_ns == pytest.approx(cyc * (1 - w["tokens_per_s_profiled"] / w["tokens_per_s_best"]))
    if w["best_steps"] != 3:
        assert f.setting_names() == [S.SPEC_STEPS, S.SPEC_TOPK, S.SPEC_DRAFT_TOKENS]
        assert f.settings[0].value == str(w["best_steps"])


def test_verify_dominated_quiet_below_half_the_cycle(tmp_path):
    a, _, _ = _trace(tmp_path, host_gap_ns=1_000_000)
    adv = advise(a)
    c = _check(adv, F.VERIFY_DOMINATED)
    assert c.status == F.BELOW_THRESHOLD and c.figures["verify_share"] < 0.5
    assert F.VERIFY_DOMINATED not in adv.rules_triggered()


# ----------------------------------------------------------------------------------- allreduce
def _transfer_per_cycle(truth, ranks, a):
    """The generator's transfer time per rank and steady cycle (the cycles advise reads)."""
    steady = set(_steady(a)["cycle"].tolist())
    return sum(r["transfer_ns"] for c in truth["collectives"] if c["cycle"] in steady
               for r in c["ranks"]) / (ranks * len(steady))


def test_simple_allreduces_dominating_verify_on_8_ranks_are_named_first(tmp_path):
    """Done-when: 8 ranks, NCCL RING_SIMPLE all-reduces of 80 us x 4 per verify: advise names the
    all-reduce first, in verify, with the protocol setting to try."""
    a, truth, _ = _trace(tmp_path, ranks=8, cycles=10, allreduce_kernel=NCCL_KERNEL.format("RING_SIMPLE"),
                         allreduce_ns=80_000, jitter=0.02)
    adv = advise(a)
    first = adv.findings[0]
    assert first.rule == F.ALLREDUCE and first.phase == "verify"
    assert "NCCL_PROTO" in first.setting_names()
    assert next(s for s in first.settings if s.name == "NCCL_PROTO").value == "LL"
    assert "NCCL_ALGO" not in first.setting_names()                     # Ring already
    assert first.evidence["kinds"][0]["protocol"] == "SIMPLE" and first.evidence["kinds"][0]["algorithm"] == "RING"
    assert first.evidence["kinds"][0]["count"] == 8 * 9 * 4       # 10 cycles, the first of each rank warm-up
    # the saving is the transfer time per cycle (wait excluded), as the generator made it
    assert first.saving_ns == pytest.approx(_transfer_per_cycle(truth, 8, a))
    assert first.evidence["collectives_per_cycle"] == pytest.approx(4)
    assert first.evidence["transfer_share"] > 0.3
    assert first.evidence["message_sizes"] is None and "payload" in first.evidence["message_sizes_reason"]


def test_tree_algorithm_suggests_ring_and_custom_suggests_fusion(tmp_path):
    a, _, _ = _trace(tmp_path / "tree", ranks=2, allreduce_kernel=NCCL_KERNEL.format("TREE_LL"), allreduce_ns=60_000)
    f = _one(advise(a), F.ALLREDUCE)
    assert "NCCL_ALGO" in f.setting_names() and "NCCL_PROTO" not in f.setting_names()
    custom = "void sglang::cross_device_reduce_1stage<__nv_bfloat16, (int)8>(sglang::RankData *, int)"
    a, _, _ = _trace(tmp_path / "custom", ranks=2, allreduce_kernel=custom, allreduce_ns=60_000)
    f = _one(advise(a), F.ALLREDUCE)
    assert f.evidence["kinds"][0]["kind"] == K.CUSTOM and f.evidence["kinds"][0]["variant"] == "1stage"
    assert S.FUSION_BACKEND in f.setting_names() and "NCCL_PROTO" not in f.setting_names()


def test_allreduce_quiet_when_small_and_not_applicable_at_tp1(tmp_path):
    a, _, _ = _trace(tmp_path / "small", ranks=2, allreduce_ns=1_000)
    adv = advise(a)
    assert _check(adv, F.ALLREDUCE).status == F.BELOW_THRESHOLD
    assert F.ALLREDUCE not in adv.rules_triggered()
    a = shared_loads.load(REAL / "h200_moe_steps3.sqlite")
    adv = advise(a, whatif=False)
    assert _check(adv, F.ALLREDUCE).status == F.NOT_APPLICABLE


# ----------------------------------------------------------------------------------- NCCL message sizes
def _add_nccl_payloads(path: Path, size_of) -> int:
    """Write NCCL's payload schema and one ``ncclAllReduce`` range with a binaryData blob inside every
    shim ``allreduce`` range of a synthetic export (the layout read/nccl_payloads.py documents)."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER, "
                "flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER)")
    con.execute("CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER, "
                "flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER)")
    sid = 16777221
    con.execute("INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (2, ?, NULL, 1, NULL, 3, 24, NULL)", (sid,))
    con.executemany("INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (2, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
                    [(sid, 0, 18, "NCCL communicator ID", None), (sid, 1, 22, NP.MESSAGE_SIZE, 8),
                     (sid, 2, 16777236, "Reduction operation", 16)])
    rows = con.execute("SELECT e.start, e.\"end\", e.globalTid FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                       "WHERE s.value = 'allreduce' AND e.domainId = 1 UNION ALL SELECT e.start, e.\"end\", e.globalTid "
                       "FROM NVTX_EVENTS e WHERE e.text = 'allreduce' AND e.domainId = 1").fetchall()
    for i, (start, end, tid) in enumerate(sorted(rows)):
        blob = NP.HEADER.pack(2, 0, sid, 0, 24, 32 + 24) + struct.pack("<QQQ", 0xC0FFEE, size_of(i), 0)
        con.execute("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId, binaryData) "
                    "VALUES (?, ?, 59, 'ncclAllReduce', ?, 2, ?)", (start + 100, end - 100, tid, blob))
    con.commit()
    con.close()
    return len(rows)


def test_decode_message_size():
    blob = NP.HEADER.pack(2, 0, 7, 0, 24, 56) + struct.pack("<QQQ", 1, 458752, 0)
    assert NP.decode_message_size(blob, {7: 8}) == 458752
    assert NP.decode_message_size(blob.hex(), {7: 8}) == 458752          # a TEXT column holding hex
    assert NP.decode_message_size(blob, {8: 8}) is None                   # another schema
    assert NP.decode_message_size(blob[:40], {7: 8}) is None              # short blob
    assert NP.decode_message_size(None, {7: 8}) is None


def test_message_sizes_from_nccl_payloads(tmp_path):
    from fixtures.synth import TraceSpec, write_trace

    paths, _ = write_trace(TraceSpec(ranks=2, cycles=6, jitter=0.0, allreduce_kernel=NCCL_KERNEL.format("RING_LL128"),
                                     allreduce_ns=60_000), tmp_path)
    n = _add_nccl_payloads(paths[0], lambda i: 16384 * (1 + i % 3))
    assert n == 2 * 6 * 4
    frame, info = NP.message_sizes(paths[0])
    assert len(frame) == n and info["reason"] is None and info["undecoded"] == 0
    assert sorted(frame["message_bytes"].unique()) == [16384, 32768, 49152]
    f = _one(advise(analyze.load(paths)), F.ALLREDUCE)
    ms = f.evidence["message_sizes"]
    assert ms["count"] == n and ms["min_bytes"] == 16384 and ms["max_bytes"] == 49152 and ms["matched_to_phase"]
    assert ms["median_bytes"] == pytest.approx(np.median([16384 * (1 + i % 3) for i in range(n)]))
    # LL128 with messages under 64 KiB: try LL
    assert next(s for s in f.settings if s.name == "NCCL_PROTO").value == "LL"


def test_real_exports_have_schemas_but_no_payload_bytes():
    """nsys 2025.3.1 wrote NCCL's payload schemas but no event bytes: no size, and the reason says so."""
    frame, info = NP.message_sizes(REAL / "h200_sweep_steps3.sqlite")
    assert frame.empty and "binaryData" in info["reason"]


# ----------------------------------------------------------------------------------- host_bound
def test_host_bound_names_the_idle_time_and_the_flags(tmp_path):
    """Done-when: a host-bound trace (2 ms of host work per cycle, eager): advise names the idle time
    (exactly period - busy) and the flags (CUDA graphs on, the overlap scheduler on)."""
    a, _, _ = _trace(tmp_path, host_gap_ns=2_000_000)
    adv = advise(a)
    f = adv.findings[0]
    assert f.rule == F.HOST_BOUND
    c = _steady(a)
    idle = float((c["period_ns"] - c["busy_ns"]).mean())
    assert f.saving_ns == pytest.approx(idle) and f.evidence["idle_ns"] == pytest.approx(idle)
    assert f.evidence["gap_inside_gpu_window_ns"] == pytest.approx(c["gap_ns"].mean())
    assert f.evidence["cuda_graphs"] is False
    assert f.evidence["launch_gaps_per_cycle"] >= 1
    assert f.evidence["launch_gap_per_cycle_ns"] >= 2_000_000 * 0.95
    names = f.setting_names()
    assert S.DISABLE_GRAPH in names and S.DISABLE_OVERLAP in names
    assert all(s.action == F.REMOVE for s in f.settings if s.name in (S.DISABLE_GRAPH, S.DISABLE_OVERLAP))
    assert "idle" in f.suggestion and "host bound" in f.suggestion


def test_host_bound_with_graphs_does_not_ask_for_graphs(tmp_path):
    a, _, _ = _trace(tmp_path, host_gap_ns=2_000_000, cuda_graph_mode="node")
    f = _one(advise(a), F.HOST_BOUND)
    assert f.evidence["cuda_graphs"] is True
    assert S.DISABLE_GRAPH not in f.setting_names()


def test_host_bound_quiet_when_the_gpu_is_busy(tmp_path):
    a, _, _ = _trace(tmp_path, verify_layers=8)
    c = _check(advise(a), F.HOST_BOUND)
    assert c.status == F.BELOW_THRESHOLD and c.figures["idle_share"] < 0.3


# ----------------------------------------------------------------------------------- straggler
def test_late_rank_is_named_with_its_phase(tmp_path):
    """Done-when: rank 5 of 8 is 300 us late into every verify: advise names rank 5 and verify."""
    a, truth, _ = _trace(tmp_path, ranks=8, straggler={5: 300_000}, jitter=0.02)
    adv = advise(a)
    f = adv.findings[0]
    assert f.rule == F.STRAGGLER and f.rank == 5 and f.phase == "verify"
    assert f.evidence["times_late"] >= 9                  # every cycle but the first (start-up skew)
    assert f.evidence["phase_excess_ns"] == pytest.approx(300_000, rel=0.05)
    assert f.saving_ns == pytest.approx(300_000, rel=0.15)
    assert "Rank 5" in f.suggestion and "verify" in f.suggestion
    assert len([x for x in adv.findings if x.rule == F.STRAGGLER]) == 1


def test_no_straggler_on_balanced_ranks(tmp_path):
    """The start-up skew (ranks start 150 us apart) makes one late collective: no finding."""
    a, _, _ = _trace(tmp_path, ranks=4, jitter=0.02)
    adv = advise(a)
    assert _check(adv, F.STRAGGLER).status == F.BELOW_THRESHOLD
    assert F.STRAGGLER not in adv.rules_triggered()


# ----------------------------------------------------------------------------------- draft_extend
def test_draft_extend_cost_beyond_one_draft_step(tmp_path):
    a, _, _ = _trace(tmp_path, draft_extend_ns=120_000)
    adv = advise(a)
    f = _one(adv, F.DRAFT_EXTEND)
    de = _steady(a)["draft_extend_ns"].mean()
    step = adv.whatif["draft_step_ns"]
    assert f.ceiling_ns == pytest.approx(de)
    assert f.saving_ns == pytest.approx(de - step)
    assert f.evidence["draft_steps_equivalent"] == pytest.approx(de / step)
    assert S.DISABLE_GRAPH in f.setting_names()                       # eager


def test_draft_extend_quiet_when_small(tmp_path):
    a, _, _ = _trace(tmp_path)
    c = _check(advise(a), F.DRAFT_EXTEND)
    assert c.status == F.BELOW_THRESHOLD and c.figures["draft_extend_share"] < 0.1


# ----------------------------------------------------------------------------------- real traces
def test_real_sglang_server_is_host_bound_and_has_no_allreduce_finding():
    """SGLang 0.5.17, TP 1, a tiny model, CUDA graphs: the GPU is idle most of every cycle."""
    a = shared_loads.load(REAL / "sglang_server.sqlite")
    adv = advise(a)
    f = adv.findings[0]
    assert f.rule == F.HOST_BOUND
    assert f.evidence["idle_share"] > 0.8
    assert f.evidence["cuda_graphs"] is True                    # graphs on: no advice to turn them on
    assert S.DISABLE_GRAPH not in f.setting_names()
    assert S.DISABLE_OVERLAP in f.setting_names()
    assert F.ALLREDUCE not in adv.rules_triggered() and F.STRAGGLER not in adv.rules_triggered()
    assert _check(adv, F.ALLREDUCE).status == F.NOT_APPLICABLE
    assert adv.warmup_cycles == 1                                # the first cycle (640 ms, prefill) left out


def test_real_sglang_engine_with_graphs_is_host_bound():
    """SGLang 0.5.17 Engine, CUDA graphs, the whole run (load, capture, prefill) in the trace."""
    adv = advise(shared_loads.load(REAL / "sglang_graphs.sqlite"))
    f = adv.findings[0]
    assert f.rule == F.HOST_BOUND and f.evidence["cuda_graphs"] is True and f.evidence["idle_share"] > 0.5
    assert F.ALLREDUCE not in adv.rules_triggered()


def test_real_sglang_eager_asks_for_cuda_graphs():
    adv = advise(shared_loads.load(REAL / "sglang_eager.sqlite"))
    f = _one(adv, F.HOST_BOUND)
    assert f.evidence["cuda_graphs"] is False and S.DISABLE_GRAPH in f.setting_names()


def test_real_moe_profile_recommends_two_steps():
    """The MoE-like H200 profile at 3 steps: verify is ~90% of the cycle, whatif (verify fitted in
    the tokens) recommends 2 steps, the measured best."""
    adv = advise(shared_loads.load(REAL / "h200_moe_steps3.sqlite"))
    f = adv.findings[0]
    assert f.rule == F.VERIFY_DOMINATED and f.evidence["verify_share"] > 0.85
    assert f.evidence["recommended_steps"] == 2 and f.evidence["verify_scaling"] == "fit"
    assert [s.short() for s in f.settings] == ["--speculative-num-steps 2", "--speculative-eagle-topk 1",
                                               "--speculative-num-draft-tokens 3"]


# ----------------------------------------------------------------------------------- outputs
def test_findings_are_data_and_rank_by_saving():
    f1 = F.Finding(F.HOST_BOUND, "a", 10.0, 20.0, 100.0, "b", "c")
    f2 = F.Finding(F.ALLREDUCE, "a", 30.0, 30.0, 100.0, "b", "c")
    assert F.ranked([f1, f2]) == [f2, f1]
    assert f1.speedup_ceiling == pytest.approx(100 / 80)
    d = f2.to_dict()
    assert d["saving_share"] == pytest.approx(0.3) and json.dumps(d)
    with pytest.raises(ValueError):
        F.Finding("nope", "a", 0, 0, 1, "b", "c")
    assert str(F.Setting(F.SET, "NCCL_PROTO", "LL")) == "NCCL_PROTO=LL"
    assert str(F.Setting(F.REMOVE, S.DISABLE_OVERLAP)) == "remove --disable-overlap-schedule (if set)"


def test_cli_advise_and_the_report_section(tmp_path):
    a_dir = tmp_path / "t"
    _, _, paths = _trace(a_dir, ranks=8, allreduce_kernel=NCCL_KERNEL.format("RING_SIMPLE"), allreduce_ns=80_000)
    out = tmp_path / "adv.json"
    proc = cli_process.run(["advise", str(paths[0]), "--json", str(out)], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120
    assert re.search(r"^1\. all-reduce in verify", proc.stdout, re.M)
    assert "try: NCCL_PROTO=LL" in proc.stdout
    data = json.loads(out.read_text())
    assert data["findings"][0]["rule"] == "allreduce" and data["findings"][0]["rank_order"] == 1
    assert {c["rule"] for c in data["checks"]} == set(F.RULES)
    # the main report: terminal section, JSON key, HTML section
    rep, html = tmp_path / "r.json", tmp_path / "r.html"
    proc = cli_process.run([str(paths[0]), "--json", str(rep), "--html", str(html)], cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "Advice: what to change" in proc.stdout and "try: NCCL_PROTO=LL" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) <= 120
    assert json.loads(rep.read_text())["advice"]["findings"][0]["rule"] == "allreduce"
    page = html.read_text()
    assert 'id="advice"' in page and "NCCL_PROTO=LL" in page
    proc = cli_process.run([str(paths[0]), "--json", str(rep), "--no-advice"], cwd=ROOT)
    assert "Advice" not in proc.stdout and "advice" not in json.loads(rep.read_text())


# ----------------------------------------------------------------------------------- SGLang flag names
def _server_args() -> Path | None:
    known = Path("/tmp/sglb/site/sglang/srt/server_args.py")
    if known.exists():
        return known
    bundle = Path("/work/shared/sglang-h200/h200_bundle_sglang0.5.17.tar.xz")
    if not bundle.exists():
        return None
    dest = Path("/tmp/specprof_sglang_args")
    dest.mkdir(exist_ok=True)
    got = list(dest.rglob("server_args.py"))
    if not got:
        subprocess.run(["tar", "-C", str(dest), "-xJf", str(bundle), "--wildcards", "*sglang/srt/server_args.py"],
                       check=True, capture_output=True)
        got = list(dest.rglob("server_args.py"))
    return got[0] if got else None


def test_sglang_flags_exist():
    """Every SGLang flag advise suggests is a CLI flag of the real SGLang 0.5.17 (an explicit
    add_argument name, or a ServerArgs field with a CLI form)."""
    path = _server_args()
    if path is None:
        pytest.skip("SGLang 0.5.17 sources not available")
    text = path.read_text()
    for flag in S.SGLANG_FLAGS:
        field = flag[2:].replace("-", "_")
        explicit = f'"{flag}"' in text
        m = re.search(rf"^    {field}: A\[(.*)$", text, re.M)
        declared = m is not None and "no_cli=True" not in m.group(1)
        assert explicit or declared, flag


def test_advise_command_exit_codes_and_output_policy(tmp_path, capsys):
    """`advise` follows the CLI's rules: an option error is exit 10 (one line, never argparse's 2);
    --json onto its own input is refused (exit 8) and leaves the input's bytes as they were."""
    from analyze import cli

    src = REAL / "sglang_server.sqlite"
    if not src.exists():
        pytest.skip("fixture absent")
    assert cli.main(["advise", str(src), "--no-such-option"]) == 10
    assert "no-such-option" in capsys.readouterr().err
    victim = tmp_path / "run.sqlite"
    victim.write_bytes(src.read_bytes())
    before = victim.read_bytes()
    assert cli.main(["advise", str(victim), "--json", str(victim), "-q"]) == 8
    assert "input" in capsys.readouterr().err
    assert victim.read_bytes() == before
    out = tmp_path / "advice.json"
    assert cli.main(["advise", str(victim), "--json", str(out), "-q"]) == 0
    adv = json.loads(out.read_text())
    assert [f["rule"] for f in adv["findings"]][:1] == ["host_bound"]


def test_suggestions_are_sentences_whole_and_chunked():
    """Every suggestion's sentences start with a capital letter and nothing ends in ' .' or '. .',
    whether the report was analysed whole or in chunks (the chunked host-bound finding read 'host
    bound. the host starts')."""
    for budget in (None, 10**6):
        adv = advise(analyze.load(str(REAL / "h200_4proc_eager.sqlite"), memory_budget=budget), message_sizes=False)
        assert adv.findings
        for f in adv.findings:
            assert not re.search(r"\. [a-z]", f.suggestion) and " ." not in f.suggestion, f.suggestion


@pytest.mark.parametrize("report,reason", [("h200_4proc_eager.sqlite", "no GPU op of the 4 ranks matched"),
                                           ("sglang_server.sqlite", "one rank")])
def test_straggler_says_why_there_is_no_collective(report, reason):
    """Four ranks whose all-reduce kernels match no pattern are not 'one rank, or no collectives'."""
    adv = advise(shared_loads.load(str(REAL / report)), whatif=False, message_sizes=False)
    check = next(c for c in adv.checks if c.rule == F.STRAGGLER)
    assert check.status == F.NOT_APPLICABLE and reason in check.reason


def test_speculation_that_does_not_pay_is_a_finding():
    """The real SGLang server fixture (random weights: no draft token is accepted) yields one token per
    request per cycle with or without its drafter, so whatif's no-speculation baseline (the cycle
    without draft and draft_extend) beats every step count: a finding whose saving is the time per
    token that turning speculation off saves, with the flag to remove; where speculation pays
    (the H200 look-alike sweep, given its measured tokens/s) the rule stays quiet and says by how much."""
    a = shared_loads.load(str(REAL / "sglang_server.sqlite"))
    adv = advise(a, message_sizes=False)
    f = next(x for x in adv.findings if x.rule == F.SPECULATION)
    w = adv.whatif
    assert w["accepted_per_request_profiled"] == 0.0 and w["tokens_per_s_best"] < w["tokens_per_s_baseline"]
    assert f.saving_ns == pytest.approx(adv.cycle_ns * (1 - w["tokens_per_s_profiled"] / w["tokens_per_s_baseline"]))
    assert f.saving_ns <= f.ceiling_ns
    assert f.ceiling_ns == pytest.approx(f.saving_ns) and 0 < f.saving_ns < adv.cycle_ns
    assert S.SPEC_ALGORITHM in f.setting_names() and f.evidence["baseline_source"] == "estimated"
    assert [x.rule for x in adv.findings] == ["host_bound", "speculation"]      # ranked by saving
    # no step count beside it: the speculation finding names whatif's best (nothing is accepted at any count)
    assert _check(adv, F.DRAFT_STEPS).status == F.NOT_APPLICABLE and "no step count pays" in _check(adv, F.DRAFT_STEPS).reason
    # the look-alike's sweep (3 steps, 1.21x measured over no speculation): against the estimated baseline
    # (1.03x) the rule states no verdict; given the measured tokens/s it stays quiet and says by how much
    sweep2 = shared_loads.load(str(REAL / "h200_sweep2_steps3.sqlite"))
    est = advise(sweep2, message_sizes=False)
    check = next(c for c in est.checks if c.rule == F.SPECULATION)
    assert check.status == F.NO_DATA and check.reason.startswith("uncertain: 1.0")
    measured = {n: json.loads((REAL / f"h200_sweep2_{n}.workload.json").read_text())["ranks"][0]["runs"][0]["tokens_per_s"]
                for n in ("nospec", "steps3")}
    pays = advise(sweep2, message_sizes=False, baseline_tps=measured["nospec"], calibrate_tps=measured["steps3"])
    check = next(c for c in pays.checks if c.rule == F.SPECULATION)
    assert check.status == F.BELOW_THRESHOLD and "speculation pays:" in check.reason and "(given)" in check.reason
    assert not any(x.rule == F.SPECULATION for x in pays.findings)
    none = advise(shared_loads.load(str(REAL / "h200_4proc_eager.sqlite")), message_sizes=False)
    assert next(c for c in none.checks if c.rule == F.SPECULATION).status == F.NO_DATA


def test_straggler_with_collectives_outside_the_steady_cycles_says_so(tmp_path):
    a, _, _ = _trace(tmp_path, ranks=2)
    assert len(a.collectives) > 0
    a.collectives = a.collectives.assign(start_ns=a.collectives["start_ns"] + 10**15,
                                         end_ns=a.collectives["end_ns"] + 10**15)     # after every cycle
    adv = advise(a, whatif=False, message_sizes=False)
    check = next(c for c in adv.checks if c.rule == F.STRAGGLER)
    assert check.status == F.NOT_APPLICABLE and "in a steady cycle" in check.reason and "warm-up" in check.reason


def test_speculation_check_without_whatif_says_it_was_not_run():
    adv = advise(shared_loads.load(str(REAL / "sglang_server.sqlite")), whatif=False, message_sizes=False)
    check = next(c for c in adv.checks if c.rule == F.SPECULATION)
    assert check.status == F.NO_DATA and check.reason == "whatif not run (--no-whatif)"


# ----------------------------------------------------------------------------------- few cycles
def test_on_fewer_than_20_cycles_advise_recommends_no_step_count(tmp_path):
    """10 cycles (9 steady): whatif's prediction is no basis for a decision (its few_cycles). advise recommends no
    step count in any rule (verify, draft_extend), states no speculation verdict, and leaves whatif's pick out of the
    evidence; the same trace with 24 cycles recommends one (test_verify_dominated_triggers_with_the_step_count...)."""
    a, _, _ = _trace(tmp_path, cycles=10, verify_layers=8, draft_extend_ns=120_000)
    adv = advise(a)
    assert adv.whatif["few_cycles"] and adv.whatif["cycles"] == 9
    assert adv.whatif["best_steps"] != adv.whatif["profiled_steps"]     # whatif would have picked another
    v = _one(adv, F.VERIFY_DOMINATED)
    assert v.settings == () and v.saving_ns == 0
    assert "recommended_steps" not in v.evidence and v.evidence["few_cycles"] is True
    assert "No step count is recommended: whatif's prediction rests on 9 decode cycles" in v.suggestion
    d = _one(adv, F.DRAFT_EXTEND)
    assert S.SPEC_STEPS not in d.setting_names()
    spec = _check(adv, F.SPECULATION)
    assert spec.status == F.NO_DATA and "rests on 9 decode cycles" in spec.reason


def test_the_header_says_its_cycle_pools_batch_sizes_only_where_several_ran():
    from analyze.render.advice import text_lines

    base = {"cycle_ns": 1e6, "cycles": 40, "findings": [], "checks": []}
    one = " ".join(text_lines(dict(base, whatif={"batch": 8, "batches_seen": 1}), width=400))
    several = " ".join(text_lines(dict(base, whatif={"batch": 8, "batches_seen": 3}), width=400))
    assert "over 40 cycles, host" in one and "over 40 cycles of every batch size, host" in several


# ----------------------------------------------------------------------------------- draft_steps
def test_draft_steps_names_whatifs_pick_where_verify_does_not_dominate(tmp_path):
    """A host-bound synthetic cycle (a 1 ms host stall after verify's launches: verify under half the cycle) whose
    drafts are never accepted: every draft step is cost without gain, so whatif's best is 1 step, and the draft_steps
    rule names it (the verify rule stays below its threshold) with the time per token it saves."""
    a, _, _ = _trace(tmp_path, host_gap_ns=1_000_000, accept_lengths=[[0] * 24])
    adv = advise(a)
    assert _check(adv, F.VERIFY_DOMINATED).status == F.BELOW_THRESHOLD
    w = adv.whatif
    assert w["profiled_steps"] == 3 and w["best_steps"] == 1
    f = _one(adv, F.DRAFT_STEPS)
    assert f.saving_ns == pytest.approx(adv.cycle_ns * (1 - w["tokens_per_s_profiled"] / w["tokens_per_s_best"]))
    assert f.saving_ns > 0 and f.setting_names() == [S.SPEC_STEPS, S.SPEC_TOPK, S.SPEC_DRAFT_TOKENS]
    assert [s.value for s in f.settings] == ["1", "1", "2"]
    assert "1 draft step at" in f.suggestion and "--calibrate-tps X" in f.suggestion   # not calibrated: said


def test_draft_steps_leaves_the_step_count_to_the_verify_rule_where_verify_dominates(tmp_path):
    a, _, _ = _trace(tmp_path, verify_layers=8, accept_lengths=[[0] * 24])
    adv = advise(a)
    assert _check(adv, F.VERIFY_DOMINATED).status == F.TRIGGERED
    c = _check(adv, F.DRAFT_STEPS)
    assert c.status == F.NOT_APPLICABLE and "verify_dominated" in c.reason
    assert F.DRAFT_STEPS not in adv.rules_triggered()
    assert _one(adv, F.VERIFY_DOMINATED).settings[0].value == str(adv.whatif["best_steps"]) == "1"
