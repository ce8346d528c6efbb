"""A newcomer's stumbles (issue 44), each held: wording, help texts, units, the HTML's words."""
from pathlib import Path

import pytest

from analyze import cli
from helpers import shared_loads

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"


def _need(name):
    p = REAL / name
    if not p.exists():
        pytest.skip("fixture not unpacked")
    return str(p)


def test_tokens_line_says_it_counts_warm_up(capsys):
    """sglang_server printed 1,108 tokens/s in the headline and '286.0 tokens/s' in the tokens line
    without saying that the second counts the warm-up cycle (a 600 ms first cycle)."""
    assert cli.main([_need("sglang_server.sqlite"), "--no-advice"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("tokens (rank 0"))
    assert "warm-up included" in line and "1,108 tokens/s" in out


def test_help_texts_name_no_source_paths_and_whatif_outputs_are_explained(capsys):
    for argv in (["--help"], ["advise", "--help"], ["whatif", "--help"]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        out = capsys.readouterr().out
        assert "analyze/attribute/phases.py" not in out
    with pytest.raises(SystemExit):
        cli.main(["whatif", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--json PATH write the prediction" in out and "--plot PATH write predicted" in out


def test_evidence_shows_units_not_ns_keys():
    from analyze.render.advice import text_lines

    adv = {"findings": [{"rank_order": 1, "title": "t", "saving_ns": 1.0, "ceiling_ns": 1.0, "cycle_ns": 2.0,
                         "saving_share": 0.5, "speedup_ceiling": 2.0, "suggestion": "s", "basis": "b", "settings": [],
                         "evidence": {"idle_ns": 4_188_100.0, "idle_share": 0.844}}],
           "checks": [], "cycle_ns": 2.0, "cycles": 1}
    text = "\n".join(text_lines(adv, width=200))
    assert "idle 4,188.1 us" in text and "idle_ns" not in text and "idle_share 84.4%" in text


def test_html_names_why_cycles_were_left_out_in_words(tmp_path):
    from analyze.render import html

    a = shared_loads.load(_need("sglang_graphs.sqlite"))
    out = tmp_path / "r.html"
    html.write_html(a, str(out))
    page = out.read_text()
    assert "no GPU ops recorded 48" in page and "no_gpu_ops 48" not in page


def test_whatif_table_has_no_nan_and_says_one_step(capsys):
    """A position no request reached printed 'nan [nan, nan]'; 'Best: 1 draft steps'."""
    from analyze.tools.whatif.render import render_whatif
    from analyze.tools.whatif import model as W

    r = W.whatif(_need("sglang_server.sqlite"), range(1, 4), n_boot=20)
    text = render_whatif(r)
    assert "nan" not in text
    assert "Best: 1 draft step," in text
