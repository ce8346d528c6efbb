"""Kernel names are never cut so that two kernels print the same, and the terminal report fits the
terminal: 80 and 200 columns (COLUMNS), tables split into column blocks rather than cut."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import analyze
from analyze import cli
from analyze.render import names, text

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
EAGER = REAL / "h200_4proc_eager.sqlite"

TWINS = [
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
    "std::array<char *, (unsigned long)1>>(int, T2, T3)",
    "void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char *, (unsigned long)3>>(int, T2, T3)",
    "void at::native::vectorized_elementwise_kernel<(int)8, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char *, (unsigned long)3>>(int, T2, T3)",
    "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT",
    "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT",
    "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT",
    "[CUDA memcpy]",
]


@pytest.mark.parametrize("width", [12, 20, 30, 40, 60, 200])
def test_twins_get_different_labels_within_the_width(width):
    labels = names.display_names(TWINS, width)
    assert len(set(labels)) == len(TWINS)
    assert all(len(lbl) <= width for lbl in labels)


def test_the_distinguishing_part_is_kept():
    labels = dict(zip(TWINS, names.display_names(TWINS, 40)))
    assert labels[TWINS[0]].endswith("[FillFunctor]")
    assert labels[TWINS[3]] == TWINS[3]                      # fits: whole
    assert labels[TWINS[4]].endswith("_splitK_NNT") and labels[TWINS[5]].endswith("_splitK_TNT")
    assert labels[TWINS[6]] == "[CUDA memcpy]"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet="ab_<>(), :x1", min_size=1, max_size=60), min_size=1, max_size=12),
       st.integers(min_value=12, max_value=80))
def test_labels_are_unique_and_fit_for_any_names(raw, width):
    labels = names.display_names(raw, width)
    by_name = {}
    for n, lbl in zip(raw, labels):
        by_name.setdefault(names.normalize(n), set()).add(lbl)
    assert all(len(v) == 1 for v in by_name.values())          # one name, one label
    distinct = {next(iter(v)) for v in by_name.values()}
    assert len(distinct) == len(by_name)                        # two names, two labels
    assert all(len(lbl) <= width for lbl in labels)


def _kernel_rows(report: str) -> list[tuple[str, str]]:
    lines = report.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Top kernels per phase"))
    rows = []
    for ln in lines[start + 3:]:
        if not ln.strip():
            break
        phase, rest = ln.split(None, 1)
        label = re.split(r"\s{2,}\d", rest)[0].strip()
        rows.append((phase, label))
    return rows


@pytest.mark.parametrize("columns", [80, 200])
def test_terminal_report_fits_the_terminal(columns, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert cli.main([str(EAGER), "--top", "8"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= columns
    rows = _kernel_rows(out)
    a = analyze.load(EAGER)
    k = a.kernels.groupby(["phase", "name"], as_index=False)["total_ns"].sum()
    shown = k.sort_values("total_ns", ascending=False).groupby("phase").head(8)
    assert len(rows) == len(shown)
    # a label is one kernel: the same label never stands for two kernels of one phase
    assert len(set(rows)) == len(rows)
    # and across the table one label is one name
    assert len({lbl for _, lbl in rows}) == shown["name"].nunique()
    if columns == 200:       # room for the whole name of every kernel that fits in 150 columns
        assert any(lbl.startswith("void at::native::") for _, lbl in rows)


def test_wide_tables_are_split_not_cut():
    lines = text.table(["name"] + [f"column {i}" for i in range(12)], [["x"] + [f"{i:,}" for i in range(12)]],
                       width=60)
    assert max(map(len, lines)) <= 60
    assert sum(ln.startswith("name") for ln in lines) >= 2          # several blocks, each with its label column
    assert all(f"column {i}" in " ".join(lines) for i in range(12))


def test_terminal_width_reads_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "97")
    assert text.terminal_width() == 97
    monkeypatch.setenv("COLUMNS", "10")
    assert text.terminal_width() == text.MIN_WIDTH


@pytest.mark.parametrize("columns", [80, 110])
def test_advice_is_wrapped_once_to_the_terminal(columns, monkeypatch, capsys):
    """The Advice section was wrapped at 120 and then again at the terminal's width ('(90.5% of' / 'the
    cycle' on lines of their own); analyze-trace advise cut its lines at 120."""
    server = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_server.sqlite"
    if not server.exists():
        pytest.skip("fixture not unpacked")
    monkeypatch.setenv("COLUMNS", str(columns))
    for argv in ([str(server)], ["advise", str(server)]):
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert max(map(len, lines)) <= columns
        advice = lines[next(i for i, ln in enumerate(lines) if ln.startswith("Advice:")):]
        # no orphan fragment: every wrapped line but a paragraph's last is more than half the width
        short = [a for a, b in zip(advice, advice[1:]) if 0 < len(a) < columns // 2 and b.startswith("   ")
                 and not b.lstrip().startswith(("-", "saving", "evidence", "The ", "Speculation", "whatif predicts"))
                 and a.startswith("   ") and not a.lstrip().startswith(("-", "saving", "evidence"))]
        assert not short, short


def test_wrap_never_breaks_a_quoted_argument():
    """A --phase hint wrapped inside its quotes could not be copied; apostrophes are not quotes."""
    arg = "'allreduce=ranges:allreduce;kernels:PATTERN'"
    msg = f"no GPU op of the 4 ranks matched the allreduce phase's kernel patterns; --phase {arg} names other kernels"
    for width in (30, 50, 60, 80):
        lines = text.wrap(msg, width, indent="  ")
        assert sum(arg in ln for ln in lines) == 1
        assert all(len(ln) <= width for ln in lines if arg not in ln)
    spaced = "run 'python -m x --flag value' then go"
    assert any("'python -m x --flag value'" in ln for ln in text.wrap(spaced, 12))
