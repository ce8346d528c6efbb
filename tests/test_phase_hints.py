"""Traces not made with the shim: the hint (ranges with the most GPU time, the exact --phase line),
glob and `domain:name` range patterns, names with commas, a phase that matches nothing."""
from __future__ import annotations

import json
import shlex
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

import analyze
from analyze import cli
from analyze.attribute.phases import Phase, load_config, parse_phase_option, quote_value, split_quoted
from analyze.views import phase_hints

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "public-traces"
if not PUBLIC.is_dir():
    PUBLIC = Path("/work/shared/public-traces")
MFU = PUBLIC / "GindaChen_nsys-ai__mfu_2gpu_after.sqlite"
needs_public = pytest.mark.skipif(not MFU.is_file(), reason="public third-party traces not present")


def _count_ranges(path, where: str) -> int:
    """NVTX push/pop and start/end ranges matching ``where`` (SQL over the export itself)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                           f"WHERE e.eventType IN (59, 60) AND {where}").fetchone()[0]
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------
# the option syntax

def test_quoted_values_keep_commas_and_semicolons():
    p = parse_phase_option('mm=ranges:"aten::mm, *",x;kernels:"void k<1, 2>(int)";domain:d')
    assert p == Phase("mm", ("aten::mm, *", "x"), ("void k<1, 2>(int)",), "d")
    assert parse_phase_option('s=ranges:"a;b"').ranges == ("a;b",)
    with pytest.raises(ValueError, match="unclosed"):
        parse_phase_option('s=ranges:"a, b')


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
                .filter(lambda t: t.strip() == t and t), min_size=1, max_size=4))
def test_quote_value_round_trips(values):
    text = ",".join(quote_value(v) for v in values)
    assert split_quoted(text, ",") == values


def test_range_patterns_are_globs_and_match_domain_name():
    m = Phase("c", ("nccl:*",)).range_matcher()
    assert m("ncclAllReduce", "nccl") and not m("ncclAllReduce", "sglang")
    m = Phase("c", ("verify*",)).range_matcher()
    assert m("verify", "sglang") and m("verify_tree", "") and not m("xverify", "")
    m = Phase("c", (":aten::mm",)).range_matcher()          # the default domain, as the tool prints it
    assert m("aten::mm", "") and not m("aten::mm", "other")
    m = Phase("c", ("a[1]",)).range_matcher()              # an exact name wins over its glob reading
    assert m("a[1]", "") and m("a1", "")


def test_family_patterns():
    assert phase_hints.family_pattern("aten::mm, seq = 12, op_id = 34") == "aten::mm, *"
    assert phase_hints.family_pattern("FSDP::pre_forward (encoder.block.16.layer.1), op_id = 3") == \
        "FSDP::pre_forward (encoder.block.*.layer.*), *"
    assert phase_hints.family_pattern("ProfilerStep#12") == "ProfilerStep#*"
    assert phase_hints.family_pattern("c10d::allreduce_") == "c10d::allreduce_"   # digits inside a word stay
    assert phase_hints.family_pattern("verify") == "verify"


# ---------------------------------------------------------------------------------------------
# the hint, always testable: the bundled trace with no phase defined and no cycle range

def test_hint_when_no_range_is_a_phase(tmp_path):
    cfg = tmp_path / "none.toml"
    cfg.write_text('replace_defaults = true\ncycle_ranges = []\n[[phase]]\nname = "x"\nkernels = ["nomatch*"]\n')
    config = load_config(cfg)
    a = analyze.load(REAL / "h200_4proc_eager.sqlite", config)
    notes = phase_hints.hint_notes(a, config)
    codes = [n.code for n in notes]
    assert codes == ["nvtx_not_phases", "phase_unmatched"]
    fams = phase_hints.range_families(a.ranges)
    # the trace's outermost range, decode_cycle, holds all the cycles' GPU work: it comes first
    assert fams["pattern"].iloc[0].endswith("decode_cycle")
    assert fams["option"].iloc[0] in notes[0].message


# ---------------------------------------------------------------------------------------------
# a real third-party trace (PyTorch + NCCL NVTX, no SGLang names)

@needs_public
def test_public_trace_gets_the_hint_and_its_phase_line_works(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert cli.main([str(MFU), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    head = text.splitlines()[:12]
    assert any("none of them a phase" in line for line in head), head
    data = json.loads(out.read_text())
    hint = [n for n in data["notes"] if n["code"] == "nvtx_not_phases"]
    assert len(hint) == 1 and hint[0]["count"] == len(analyze.load(MFU).ranges)
    fams = phase_hints.range_families(analyze.load(MFU).ranges)
    first = fams.iloc[0]
    assert first["pattern"] == "FlashAttnFunc, *" and first["option"] in text and first["option"] in hint[0]["message"]
    # the line, as a shell would split it, makes a phase of exactly the ranges the family names
    args = shlex.split(first["option"])
    assert args[0] == "--phase"
    out2 = tmp_path / "r2.json"
    assert cli.main([str(MFU), *args, "--json", str(out2), "-q"]) == 0
    data2 = json.loads(out2.read_text())
    name = first["phase_name"]
    ranges = sum(r["instances"] for r in data2["phases"] if r["phase"] == name)
    assert ranges == _count_ranges(MFU, "coalesce(e.text, s.value) LIKE 'FlashAttnFunc, %'") == 60
    assert not any(n["code"] == "nvtx_not_phases" for n in data2["notes"])
    for rank in (0, 1):      # the phase's time left `other`; every nanosecond still counted once
        before = {r["phase"]: r["exclusive_ns"] for r in data["phases"] if r["rank"] == rank}
        after = {r["phase"]: r["exclusive_ns"] for r in data2["phases"] if r["rank"] == rank}
        assert after[name] > 100e6
        assert after["other"] == before["other"] - after[name]


@needs_public
def test_glob_and_domain_name_patterns_on_a_public_trace():
    config = load_config(options=["nccl=ranges:domain1:nccl*", "attn=ranges:FlashAttnFunc*"])
    a = analyze.load(MFU, config)
    nccl = a.ranges[a.ranges["phase"] == "nccl"]
    assert len(nccl) == _count_ranges(MFU, "e.domainId = 1 AND coalesce(e.text, s.value) LIKE 'nccl%'") == 420
    assert set(nccl["domain"]) == {"domain1"}
    assert (a.ranges["phase"] == "attn").sum() == 60
    assert a.phases.loc[a.phases["phase"] == "nccl", "exclusive_ns"].min() > 0
    # the same phase from a config file: a name with commas needs no quoting there
    assert phase_hints.hint_notes(a, config) == []


@needs_public
def test_config_file_takes_names_with_commas(tmp_path):
    cfg = tmp_path / "p.toml"
    cfg.write_text('[[phase]]\nname = "attn"\nranges = ["FlashAttnFunc, *"]\n')
    a = analyze.load(MFU, load_config(cfg))
    assert (a.ranges["phase"] == "attn").sum() == 60


def test_phase_matching_nothing_warns(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = cli.main([str(REAL / "h200_4proc_eager.sqlite"), "--phase", "moe=ranges:moe_*;kernels:*fused_moe*",
                     "--json", str(out), "-q"])
    assert code == 0
    err = capsys.readouterr().err
    assert "warning: phase 'moe' matched no NVTX range and no kernel (moe_*, *fused_moe*)" in err
    notes = json.loads(out.read_text())["notes"]
    assert [n["code"] for n in notes if n["code"] == "phase_unmatched"] == ["phase_unmatched"]
    # a default phase with no match (prefill in this trace) is not warned about
    assert "prefill" not in err


@needs_public
def test_the_html_page_opens_with_the_hint(tmp_path):
    from analyze.render import html

    a = analyze.load(MFU)
    a.notes.extend(phase_hints.hint_notes(a, load_config()))
    page = html.render_html(a)
    body = page[page.index("<nav>"):]
    first = phase_hints.range_families(a.ranges).iloc[0]["option"]
    from html import escape
    assert escape(first) in body and body.index(escape(first)) < body.index('<section id="decode">')
