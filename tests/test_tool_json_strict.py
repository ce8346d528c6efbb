"""whatif, whatif --per-batch and advise write standard JSON (a figure that could not be computed is null,
never a bare NaN that strict parsers refuse) and end their text with a "wrote:" section naming the files
they wrote, as the report does."""
import json
import math
from pathlib import Path

import pytest

from analyze.render.outputs import finite
from analyze.tools.advise.command import main_advise
from analyze.tools.whatif.command import main_whatif

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
LOG = REAL / "sglang_live_h100_v3_l32_s3.live"
PROFILE = REAL / "sglang_v2_l64_s3.sqlite"


def strict(path):
    """The document, parsed the way JavaScript's JSON.parse does (NaN / Infinity refused)."""
    def refuse(token):
        raise ValueError(f"not JSON: {token}")
    return json.loads(Path(path).read_text(), parse_constant=refuse)


def test_finite_turns_every_non_finite_float_into_null():
    import numpy as np
    got = finite({"a": float("nan"), "b": [1.5, np.float64("inf"), np.int64(3)], "c": (np.nan, "x"), "d": None})
    assert got == {"a": None, "b": [1.5, None, 3], "c": [None, "x"], "d": None}
    assert isinstance(got["b"][2], int)


@pytest.mark.skipif(not LOG.exists(), reason="held-out live log absent")
def test_whatif_json_of_a_live_log_is_standard_json(tmp_path, capsys):
    """A live log leaves figures uncomputable (no kernels: attention, host ranges): they were bare NaN (11 of
    them at --batch 16); now null, and the text ends naming the file."""
    out = tmp_path / "w.json"
    assert main_whatif([str(LOG), "--batch", "16", "--steps", "1..3", "--boot", "0", "--json", str(out)]) == 0
    doc = strict(out)
    assert doc["predictions"] and all(p["tokens_per_s"] > 0 for p in doc["predictions"])
    assert any(v is None for v in doc["profiles"][0].values())
    text = capsys.readouterr().out
    assert text.rstrip().endswith(f"wrote:\n  {out}")


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang fixtures not unpacked")
def test_per_batch_and_advise_say_what_they_wrote(tmp_path, capsys):
    pb, adv = tmp_path / "p.json", tmp_path / "a.json"
    assert main_whatif([str(PROFILE), "--per-batch", "--steps", "1..3", "--boot", "0", "--json", str(pb)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"wrote:\n  {pb}")
    assert [r["batch"] for r in strict(pb)["per_batch"]] == [1, 16]
    assert main_advise([str(PROFILE), "--json", str(adv)]) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"wrote:\n  {adv}")
    assert all(not isinstance(f["saving_ns"], float) or math.isfinite(f["saving_ns"]) for f in strict(adv)["findings"])


@pytest.mark.skipif(not PROFILE.exists(), reason="real SGLang fixtures not unpacked")
def test_json_to_stdout_says_nothing_of_writing(tmp_path, capsys):
    assert main_whatif([str(PROFILE), "--batch", "1", "--steps", "1..3", "--boot", "0", "--json", "-"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["best"]["steps"] in (1, 2, 3)
    assert "wrote:" not in cap.err
