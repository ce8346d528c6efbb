"""Phases are user-defined: command line and config file override the SGLang defaults."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import analyze
from analyze.attribute.phases import Phase, load_config, parse_phase_option
from helpers import cli_process

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
TRACE = REAL / "h200_4proc_eager.sqlite"
SAMPLING = "*distribution_elementwise_grid_stride_kernel*"


def test_parse_phase_option():
    p = parse_phase_option("moe=ranges:moe_forward,experts;kernels:*fused_moe*;domain:sglang")
    assert p == Phase("moe", ("moe_forward", "experts"), ("*fused_moe*",), "sglang")
    with pytest.raises(ValueError):
        parse_phase_option("nothing")
    with pytest.raises(ValueError):
        parse_phase_option("x=colour:red")


def test_kernel_pattern_phase_takes_its_kernels_from_every_range():
    base = analyze.load(TRACE)
    config = load_config(options=[f"sampling=kernels:{SAMPLING}"])
    assert config.names == ["draft", "verify", "draft_extend", "allreduce", "prefill", "sampling"]
    custom = analyze.load(TRACE, config)
    kernels = base.gpu_ops[base.gpu_ops["name"].str.contains("distribution_elementwise_grid_stride_kernel")]
    for rank in range(4):
        mine = kernels[kernels["rank"] == rank]
        row = custom.phases[(custom.phases["rank"] == rank) & (custom.phases["phase"] == "sampling")].iloc[0]
        assert row["kernel_ns"] == int(mine["duration_ns"].sum())
        assert row["instances"] == 0                      # no NVTX range defines this phase
        # the kernels left `other`, and nothing else moved
        before = base.phases.set_index(["rank", "phase"])
        after = custom.phases.set_index(["rank", "phase"])
        assert after.loc[(rank, "other"), "exclusive_ns"] == before.loc[(rank, "other"), "exclusive_ns"] - \
            row["exclusive_ns"]
        assert after.loc[(rank, "verify"), "exclusive_ns"] == before.loc[(rank, "verify"), "exclusive_ns"]


def test_domain_restricted_phase_counts_only_that_domain():
    # the bundled trace pushes every range twice: default domain and `sglang`
    config = load_config(options=["verify=ranges:verify;domain:sglang"])
    result = analyze.load(TRACE, config)
    ranges = result.ranges[result.ranges["phase"] == "verify"]
    assert set(ranges["domain"]) == {"sglang"} and len(ranges) == 48


def test_config_file_replaces_defaults(tmp_path):
    cfg = tmp_path / "phases.toml"
    cfg.write_text('replace_defaults = true\n\n[[phase]]\nname = "spec"\nranges = ["draft", "verify"]\n\n'
                   '[[phase]]\nname = "comm"\nranges = ["allreduce"]\n')
    out = tmp_path / "r.json"
    proc = cli_process.run([str(TRACE), "--config", str(cfg), "--json", str(out), "-q"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["phase_names"] == ["spec", "comm"]
    assert {r["phase"] for r in data["phases"]} == {"spec", "comm", "other"}
    base = analyze.load(TRACE).phases.set_index(["rank", "phase"])
    for row in data["phases"]:
        if row["phase"] == "spec":   # draft and verify ranges never overlap: their times add up
            r = row["rank"]
            assert row["exclusive_ns"] == base.loc[(r, "draft"), "exclusive_ns"] + base.loc[(r, "verify"), "exclusive_ns"]
