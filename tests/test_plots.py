"""Figures, write_all and the HTML report: their content is checked against the analysis tables."""
from __future__ import annotations

import os
import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

import analyze
from analyze import cli
from analyze.attribute.phases import OTHER
from analyze.render import html, plots
from helpers import shared_loads

ROOT = Path(__file__).resolve().parents[1]
REAL4 = ROOT / "fixtures" / "real" / "h200_4proc_eager.sqlite"
REAL1 = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"


@pytest.fixture(scope="module")
def real4():
    return shared_loads.load(REAL4)


@pytest.fixture(scope="module")
def real1():
    return shared_loads.load(REAL1)


@pytest.fixture(scope="module")
def synth8(tmp_path_factory):
    synth = pytest.importorskip("fixtures.synth")
    spec = synth.TraceSpec(ranks=8, cycles=5, straggler={5: {"cycle": 3, "phase": "verify", "delay_ns": 400_000}})
    paths, _ = synth.write_trace(spec, tmp_path_factory.mktemp("synth8"))
    return analyze.load(paths)


def legend_texts(ax):
    return [t.get_text() for t in ax.get_legend().get_texts()]


def tick_texts(ax, axis="x"):
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def svg_text(fig) -> str:
    return plots.to_bytes(fig, "svg").decode()


# ------------------------------------------------------------------------------------------------
# palette and labels


def test_one_palette_other_and_idle_grey():
    colors = plots.phase_colors(["draft", "verify", "moe", "allreduce", "attn"])
    for p in ("draft", "verify", "allreduce", OTHER, plots.IDLE):
        assert colors[p] == plots.PALETTE[p]
    for grey in (colors[OTHER], colors[plots.IDLE]):
        r, g, b = matplotlib.colors.to_rgb(grey)
        assert r == g == b
    # unknown phases get distinct extra colours, in the order of the phase list
    assert colors["moe"] == plots.EXTRA_COLORS[0] and colors["attn"] == plots.EXTRA_COLORS[1]
    assert plots.phase_colors(["attn"])["attn"] == plots.EXTRA_COLORS[0]


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
     "std::array<char *, (unsigned long)1>>(int, T2, T3)", "at::native::vectorized_elementwise_kernel"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<c10::BFloat16, unsigned int, (int)2>(T1 *, int)",
     "at::native::CatArrayBatchedCopy"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
    ("[CUDA memcpy]", "[CUDA memcpy]"),
    ("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT", "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"),
    ("float foo::bar<int>(int)", "foo::bar"),
])
def test_short_name(name, short):
    assert plots.short_name(name) == short


def test_short_name_truncates_and_drops_namespaces():
    name = "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<(unsigned int)1024>(T6 *, unsigned long)"
    assert plots.short_name(name, 30) == "TopKTopPSamplingFromProbKernel"
    assert plots.short_name("x" * 80, 20) == "x" * 19 + "…"


def test_twin_kernel_labels_are_told_apart(real4):
    names = real4.kernels["name"].unique().tolist()
    labels = plots._unique_labels(names, 48)
    assert len(set(labels)) == len(labels)
    assert all(len(lbl) <= 60 for lbl in labels)
    assert any("[GeluCUDAKernelImpl]" in lbl for lbl in labels)


# ------------------------------------------------------------------------------------------------
# figures on the real 4-rank trace


def test_phase_bars_heights_are_exclusive_ms(real4):
    fig = plots.phase_bars(real4)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "exclusive GPU time (ms)"
    assert tick_texts(ax) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    # draft_extend has no time in this trace: no empty legend entry
    assert legend_texts(ax) == ["draft", "verify", "allreduce", "other"]
    ex = real4.phases.set_index(["rank", "phase"])["exclusive_ns"]
    for bars in ax.containers:
        phase = bars.get_label()
        assert bars.patches[0].get_facecolor()[:3] == pytest.approx(matplotlib.colors.to_rgb(plots.PALETTE[phase]))
        for rank, patch in enumerate(bars.patches):
            assert patch.get_height() == pytest.approx(ex[(rank, phase)] / 1e6)
    # stack top = the rank's busy time (exclusive phases + other add up to busy exactly)
    busy = real4.totals.set_index("rank")["busy_ns"]
    tops = [max(p.get_y() + p.get_height() for b in ax.containers for p in [b.patches[r]]) for r in range(4)]
    assert tops == pytest.approx([busy[r] / 1e6 for r in range(4)])


def test_phase_bars_with_idle(real4):
    ax = plots.phase_bars(real4, include_idle=True).axes[0]
    assert legend_texts(ax)[-1] == "idle"
    idle = ax.containers[-1]
    assert idle.patches[2].get_height() == pytest.approx(real4.totals.set_index("rank")["idle_ns"][2] / 1e6)


def test_cycle_timeline_window_and_lanes(real4):
    fig = plots.cycle_timeline(real4, cycles=(3, 5))
    ax = fig.axes[0]
    sel = real4.cycles[real4.cycles["cycle"].isin([3, 4])]
    assert ax.get_title() == "GPU timeline per rank, cycles 3-4"
    assert ax.get_xlabel() == "time since window start (ms)"
    assert ax.get_xlim()[1] == pytest.approx((sel["end_ns"].max() - sel["start_ns"].min()) / 1e6)
    assert tick_texts(ax, "y") == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert legend_texts(ax) == ["draft", "verify", "allreduce", "other", "idle"]
    # every phase's bars use the palette colour; the ops drawn cover the ops of the window exactly
    colors = {matplotlib.colors.to_hex(c.get_facecolor()[0]) for c in ax.collections}
    assert {plots.PALETTE[p].lower() for p in ("draft", "verify", "allreduce", "other", "idle")} <= colors
    verify_rgb = matplotlib.colors.to_rgba(plots.PALETTE["verify"])
    drawn = sum(np.ptp(path.vertices[:, 0]) for c in ax.collections
                if tuple(c.get_facecolor()[0]) == verify_rgb for path in c.get_paths())
    w0, w1 = sel["start_ns"].min(), sel["end_ns"].max()
    ops = real4.gpu_ops[(real4.gpu_ops["phase"] == "verify") & (real4.gpu_ops["end_ns"] > w0)
                        & (real4.gpu_ops["start_ns"] < w1)]
    union = 0
    for _, o in ops.groupby("rank"):
        st, en = np.clip(o["start_ns"], w0, w1).to_numpy(), np.clip(o["end_ns"], w0, w1).to_numpy()
        union += sum(w for _, w in plots._merge(st, en))
    assert union > 0 and drawn == pytest.approx(union / 1e6)
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["cycle 3", "cycle 4"]


def test_cycle_timeline_default_skips_warmup_and_single_cycle(real4, real1):
    ax = plots.cycle_timeline(real4).axes[0]
    title = ax.get_title()
    m = re.fullmatch(r"GPU timeline per rank, cycles (\d+)-(\d+)", title)
    assert m and int(m.group(1)) >= 1 and int(m.group(2)) == int(m.group(1)) + 1
    ax1 = plots.cycle_timeline(real1, cycles=7).axes[0]
    assert ax1.get_title() == "GPU timeline per rank, cycle 7" and tick_texts(ax1, "y") == ["rank 0"]
    with pytest.raises(plots.NoData, match="no decode cycle"):
        plots.cycle_timeline(real1, cycles=(500, 510))


def test_top_kernels_bars_and_shares(real4):
    fig = plots.top_kernels(real4, top=4)
    titles = [ax.get_title("left") for ax in fig.axes]
    assert [t.split(":")[0] for t in titles] == ["draft", "verify", "allreduce", "other"]
    k = real4.kernels[real4.kernels["phase"] == "verify"].groupby("name")["total_ns"].sum().sort_values(
        ascending=False)
    ax = fig.axes[1]
    widths = [p.get_width() for p in ax.patches]
    assert widths == pytest.approx((k.head(4) / 1e6).tolist())
    shares = [t.get_text() for t in ax.texts]
    assert shares == [f"{100 * v:.1f}%" for v in (k.head(4) / k.sum())]
    labels = tick_texts(ax, "y")
    assert labels[0] == "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT" and all(len(x) <= 60 for x in labels)
    assert ax.get_xlabel() == "GPU time (ms)"
    one = plots.top_kernels(real4, phases=["verify"], rank=2)
    assert len(one.axes) == 1 and "(rank 2)" in one.axes[0].get_title("left")


def test_cycle_distributions_medians(real4):
    fig = plots.cycle_distributions(real4)
    ax1, ax2 = fig.axes
    assert tick_texts(ax1) == ["rank 0", "rank 1", "rank 2", "rank 3"]
    assert ax1.get_ylabel() == "cycle period (host start to next start) (ms)"
    assert ax1.get_yscale() == "log"  # the warm-up cycle is > 20x the median
    med = real4.cycles.groupby("rank")["period_ns"].median() / 1e6
    got = [line.get_ydata()[0] for line in ax1.lines if line.get_gid() == "median"]
    assert got == pytest.approx(med.tolist())
    assert tick_texts(ax2) == ["draft", "verify", "allreduce", "other"]
    med2 = [line.get_ydata()[0] for line in ax2.lines if line.get_gid() == "median"]
    assert med2 == pytest.approx([real4.cycles[f"{p}_ns"].median() / 1e3 for p in ("draft", "verify", "allreduce",
                                                                                    "other")])
    assert ax2.get_ylabel() == "exclusive GPU time per cycle (µs)"
    violin = plots.cycle_distributions(real4, kind="violin", skip_first=True)
    assert violin.axes[0].get_yscale() == "linear"  # without cycle 0 the spread is small


def test_cycle_breakdown_and_variability(real4):
    fig = plots.cycle_breakdown(real4, rank=1)
    ax1, ax2 = fig.axes
    c = real4.cycles[real4.cycles["rank"] == 1].sort_values("cycle")
    verify = next(b for b in ax1.containers if b.get_label() == "verify")
    assert [p.get_height() for p in verify.patches] == pytest.approx((c["verify_ns"] / 1e3).tolist())
    assert ax2.get_xlabel() == "decode cycle" and "(rank 1" in ax1.get_title()
    slow = [t for t in ax2.texts if t.get_text() == "slow"]
    assert len(slow) == 3 and int(round(slow[0].xy[0])) == int(c["period_ns"].idxmax() - c.index[0])
    table = plots.kernel_cycle_table(real4, "verify")
    assert table["share"].sum() == pytest.approx(1.0)
    total = real4.gpu_ops.loc[real4.gpu_ops["phase"] == "verify", "duration_ns"].sum()
    assert table["total_ns"].sum() == total  # every verify op of this trace lies inside a cycle
    assert table.iloc[0]["name"] == "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"
    vfig = plots.kernel_variability(real4, top=5)
    assert tick_texts(vfig.axes[0], "y")[0] == "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"
    assert vfig.axes[0].get_xlabel() == "GPU time per cycle and rank (µs)"


def test_ops_by_cycle_with_a_few_columns_is_the_same_rows(real4):
    full = plots.ops_by_cycle(real4, "verify")
    lean = plots.ops_by_cycle(real4, "verify", columns=["name", "end_ns"])
    assert list(lean.columns) == ["name", "end_ns", "rank", "start_ns", "phase", "cycle"]
    assert len(full) > 0
    pd.testing.assert_frame_equal(lean, full[list(lean.columns)])


def test_cycle_breakdown_bins_thousands_of_cycles(real4, monkeypatch):
    """Beyond MAX_CYCLE_BARS cycles a bar is a run of consecutive cycles: phase heights are the
    run's means, the period mark its slowest; drawing stays fast (a 10M-kernel report has 35k
    cycles per rank: one bar each took minutes)."""
    import dataclasses

    monkeypatch.setattr(plots, "MAX_CYCLE_BARS", 5)
    c = real4.cycles[real4.cycles["rank"] == 1].sort_values("cycle").reset_index(drop=True)
    n = len(c)
    per_bar = -(-n // 5)
    fig = plots.cycle_breakdown(real4, rank=1)
    ax1, ax2 = fig.axes
    assert f"mean of {per_bar} cycles per bar" in ax1.get_title()
    verify = next(b for b in ax1.containers if b.get_label() == "verify")
    want = c["verify_ns"].groupby(c.index // per_bar).mean() / 1e3
    assert [p.get_height() for p in verify.patches] == pytest.approx(want.tolist())
    period = next(line for line in ax2.lines if line.get_label() == "period")
    unit_div = {"µs": 1e3, "ms": 1e6, "s": 1e9}[ax2.get_ylabel().split("(")[1].rstrip(")")]
    assert list(period.get_ydata()) == pytest.approx((c["period_ns"].groupby(c.index // per_bar).max()
                                                     / unit_div).tolist())
    # unchanged below the limit: one bar per cycle
    monkeypatch.setattr(plots, "MAX_CYCLE_BARS", 300)
    one = plots.cycle_breakdown(dataclasses.replace(real4), rank=1)
    assert len(next(b for b in one.axes[0].containers if b.get_label() == "verify").patches) == n


def test_no_collectives_is_nodata(real4, real1):
    with pytest.raises(plots.NoData, match="no collectives"):
        plots.allreduce_heatmap(real4)
    with pytest.raises(plots.NoData, match=r"one rank"):
        plots.allreduce_heatmap(real1)
    figs, notes = plots.figures(real1)
    assert "allreduce_wait" not in figs and "phases" in figs
    expected = [("figure_skipped", "figure allreduce_wait skipped: no collectives (one rank)")]
    from analyze.views import decode
    if not decode.has_period_split(real1.cycles, real1.phase_names):      # before the cycle table's period split
        expected.insert(0, ("figure_skipped", "figure decode skipped: the cycle table has no period split"))
    assert [(n.code, n.message) for n in notes] == expected


# ------------------------------------------------------------------------------------------------
# 8 ranks (synthetic, with collectives)


def test_heatmap_values_8_ranks(synth8):
    fig = plots.allreduce_heatmap(synth8)
    ax = fig.axes[0]
    assert tick_texts(ax, "y") == [f"rank {r}" for r in range(8)]
    assert ax.get_xlabel() == "collective instance (n-th all-reduce of every rank)"
    grid = synth8.collectives.pivot(index="rank", columns="collective", values="wait_ns").to_numpy()
    unit = fig.axes[1].get_ylabel()
    div = {"(ms)": 1e6, "(µs)": 1e3}[unit[unit.rindex("("):]]
    assert np.allclose(ax.images[0].get_array(), grid / div)
    assert "last to arrive" in legend_texts(ax)


def test_eight_rank_labels_do_not_overlap(synth8):
    for fn in (plots.phase_bars, plots.cycle_distributions):
        fig = fn(synth8)
        fig.canvas.draw() if hasattr(fig.canvas, "draw") else None
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        ax = fig.axes[0]
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) == 8
        assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:])), fn.__name__


# ------------------------------------------------------------------------------------------------
# files: write_all, the HTML report, the CLI


def test_write_all_png_svg(real4, tmp_path):
    a = shared_loads.load(REAL4)
    names = plots.write_all(a, tmp_path / "figs")
    stems = ["decode", "phases", "timeline", "top_kernels", "cycle_distributions", "cycle_breakdown", "verify_kernels"]
    assert names == [f"{s}.{ext}" for s in stems for ext in ("png", "svg")]
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(names)
    for s in stems:
        assert (tmp_path / "figs" / f"{s}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "figs" / "phases.svg").read_text()
    for text in ("exclusive GPU time (ms)", "rank 0", "rank 3", "draft", "verify", "allreduce", "other"):
        assert f">{text}<" in svg
    assert "figure allreduce_wait skipped: no collectives" in " ".join(map(str, a.notes))
    again = plots.write_all(a, tmp_path / "again", names=["allreduce_wait", "phases"], formats=("svg",))
    assert again == ["phases.svg"]  # the note is not added twice
    assert sum("allreduce_wait skipped" in n.message for n in a.notes) == 1
    # SVG output is reproducible
    assert plots.to_bytes(plots.phase_bars(real4), "svg") == plots.to_bytes(plots.phase_bars(real4), "svg")


def test_write_all_is_atomic(real4, tmp_path, monkeypatch):
    out = tmp_path / "figs"
    out.mkdir()
    (out / "phases.png").write_bytes(b"old")

    calls = []

    def failing(fig, fmt="png", dpi=110):
        calls.append(fmt)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return b"new"

    monkeypatch.setattr(plots, "to_bytes", failing)
    with pytest.raises(RuntimeError):
        plots.write_all(real4, out)
    assert [p.name for p in out.iterdir()] == ["phases.png"]
    assert (out / "phases.png").read_bytes() == b"old"


def test_html_report_content(synth8, tmp_path):
    path = html.write_html(synth8, tmp_path / "report.html")
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    # self-contained: no scripts, no external stylesheets, images or fonts
    assert "<script" not in text and "<link" not in text
    assert not re.search(r'(src|href)="(https?:)?//', text)
    for table in ("t-phases", "t-cross-rank", "t-kernels", "t-cycles", "t-skew", "t-ranks"):
        assert f'id="{table}"' in text
    for section in ("phases", "timeline", "kernels", "cycles", "skew", "notes"):
        assert f'<section id="{section}">' in text
    # the numbers of the tables
    ex = synth8.phases.set_index(["rank", "phase"])["exclusive_ns"]
    assert f"<td>{ex[(5, 'verify')] / 1e6:,.3f}</td>" in text
    assert "straggler rank(s): <b>" in text
    # every figure inline as SVG, with its labels as text
    assert text.count("<svg") == 8          # the decode bars first, then the 7 figures
    for label in ("exclusive GPU time (ms)", "rank 7", "collective instance (n-th all-reduce of every rank)",
                  "decode cycle"):
        assert f">{label}<" in text
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text
    t = html.tables(synth8)
    assert list(t["phases"]["phase"]) == ["draft", "verify", "draft_extend", "allreduce", "prefill", "other", "busy"]
    assert t["phases"].iloc[-1]["share"] == 1.0
    assert t["phases"]["rank 3"].iloc[:-1].sum() == pytest.approx(t["phases"]["rank 3"].iloc[-1])
    assert list(t["skew"]["rank"]) == list(range(8))


def test_html_one_rank_says_why_no_heatmap(real1, tmp_path):
    text = html.write_html(real1, tmp_path / "r.html").read_text()
    assert "no all-reduce skew table: one rank (TP 1): no collective to wait in" in text      # the terminal's note
    assert "figure allreduce_wait skipped: no collectives (one rank)" in text
    assert "CUDA graphs traced at graph level" in text  # analysis notes are shown
    assert text.count("<svg") == 7


def test_cli_plots_and_html(tmp_path, capsys):
    rc = cli.main([str(REAL1), "--plots", str(tmp_path / "figs"), "--html", str(tmp_path / "r.html")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "figure allreduce_wait skipped" in out  # the skip is a note of the terminal report
    assert (tmp_path / "figs" / "timeline.svg").exists() and not (tmp_path / "figs" / "allreduce_wait.png").exists()
    assert (tmp_path / "r.html").read_text().count("<svg") == 7
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_api_doc_examples_run(capsys):
    """The ```python blocks of docs/api.md run in order on the bundled trace."""
    doc = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(blocks) >= 6
    scope: dict = {}
    before = set(os.listdir(ROOT))
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), scope)
    assert set(os.listdir(ROOT)) == before          # the examples write into temporary folders only
    out = capsys.readouterr().out
    assert "4 ranks; ['draft', 'verify', 'draft_extend', 'allreduce', 'prefill']" in out
    assert "skipped: no collectives" in out
    assert "['decode.png', 'decode.svg', 'phases.png', 'phases.svg'] report.html" in out
    assert scope["late"] == [] and scope["t"]["phases"]["phase"].iloc[-1] == "busy"


def test_same_kernel_in_two_phases_keeps_its_label(real4):
    t = html.tables(real4)["top_kernels"]
    text = html._table_html(t, left=("phase",), kernel_col="kernel")
    assert text.count(">nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT<") == 2  # in draft and in verify
    assert " #2" not in text


def test_gpu_busy_bars_stay_visible_on_a_log_scale():
    """sglang_server: a 600 ms first cycle turns the lower panel logarithmic; the GPU busy bars (0.66 ms,
    drawn from 0) fell below the axis and were invisible."""
    from pathlib import Path

    import analyze

    path = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "sglang_server.sqlite"
    if not path.exists():
        pytest.skip("fixture not unpacked")
    a = analyze.load(str(path))
    fig = plots.cycle_breakdown(a)
    ax2 = fig.axes[1]
    assert ax2.get_yscale() == "log"
    busy = [p.get_height() for p in ax2.patches if p.get_y() == 0 and p.get_height() > 0]
    assert busy and ax2.get_ylim()[0] < min(busy)


def test_kernel_tables_of_a_chunked_analysis_equal_the_whole(monkeypatch):
    """A report analysed in chunks keeps no per-op table: ops_by_cycle (the kernel variability figure and
    table) reads its spilled op store, and gives the whole analysis' ops (in (rank, start) order)."""
    from analyze.run import api

    path = str(ROOT / "fixtures" / "real" / "h200_4proc_eager.sqlite")
    whole = analyze.load(path)
    monkeypatch.setattr(api, "MIN_CHUNK_ROWS", 97)
    chunked = analyze.load(path, memory_budget=1)
    assert chunked.gpu_ops.empty and chunked.ops.frame is None
    key = ["rank", "start_ns", "end_ns", "name"]
    want = plots.ops_by_cycle(whole, "verify", columns=["name", "end_ns"])
    got = plots.ops_by_cycle(chunked, "verify", columns=["name", "end_ns"])
    assert len(want) > 100 and list(got.columns) == list(want.columns)
    pd.testing.assert_frame_equal(got.sort_values(key).reset_index(drop=True),
                                  want.sort_values(key).reset_index(drop=True), check_dtype=False)
    tw, tc = plots.kernel_cycle_table(whole), plots.kernel_cycle_table(chunked)
    pd.testing.assert_frame_equal(tc.sort_values("name").reset_index(drop=True),
                                  tw.sort_values("name").reset_index(drop=True), check_dtype=False, rtol=1e-9)
    assert tc.iloc[0]["name"] == "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT"


def test_html_says_why_no_skew_table_on_four_ranks_as_the_terminal_does(real4, tmp_path):
    """The bundled 4-rank trace's allreduce time is its NVTX ranges' other GPU ops (no collective kernel matched): the
    HTML says that, as the terminal's note does, not "one rank, or ..." (a newcomer read the two as a contradiction)."""
    text = html.write_html(real4, tmp_path / "r.html").read_text()
    assert ("no all-reduce skew table: no GPU op of the 4 ranks matched the allreduce phase&#x27;s kernel patterns "
            "(NCCL, custom and fused all-reduce kernels; any allreduce time shown is that of the other GPU ops inside "
            "its NVTX ranges)") in text
    assert "one rank, or" not in text
