"""Figures of an :class:`~analyze.results.Analysis` (matplotlib, no pyplot state).

Every figure function takes an Analysis (plus options) and returns a ``matplotlib.figure.Figure``;
it raises :class:`NoData` when the analysis holds nothing to draw (e.g. no collectives in a one-rank
trace). :func:`write_all` writes every figure that has data as PNG and SVG into a directory
(atomically) and turns the skipped ones into notes.

    >>> from analyze import load, plots
    >>> a = load("report.sqlite")
    >>> fig = plots.phase_bars(a)            # per-rank stacked exclusive phase time
    >>> fig.savefig("phases.png")

One palette (:data:`PALETTE`) colours every phase the same way in every figure: ``other`` and
``idle`` are greys; phases the palette does not know get colours from :data:`EXTRA_COLORS` in the
order of ``analysis.phase_names``.

Figures are built on ``matplotlib.figure.Figure`` directly (not pyplot): nothing is registered with
a GUI backend, so they work headless (Agg), in threads, and display inline in notebooks.
"""
from __future__ import annotations

import io
from typing import Callable, Iterable

import numpy as np
import pandas as pd
from matplotlib import rc_context
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from analyze import notes as N
from analyze import opstore
from analyze import views
from analyze.views.phases import phase_order
from analyze.attribute.phases import OTHER
from analyze.notes import Note
from analyze.render import names
from analyze.timeline import cycles as cycles_mod
from analyze.views import decode

__all__ = ["PALETTE", "EXTRA_COLORS", "IDLE", "NoData", "FIGURES", "phase_colors", "short_name",
           "decode_bars", "phase_bars", "cycle_timeline", "top_kernels", "cycle_distributions", "cycle_breakdown",
           "allreduce_heatmap", "kernel_variability", "ops_by_cycle", "kernel_cycle_table", "figures", "write_all", "to_bytes"]

IDLE = "idle"
PALETTE: dict[str, str] = {
    "draft": "#4C72B0",         # blue
    "verify": "#DD8452",        # orange
    "draft_extend": "#8172B3",  # purple
    "allreduce": "#C44E52",     # red
    OTHER: "#8C8C8C",           # grey
    IDLE: "#E3E3E3",            # light grey
}
EXTRA_COLORS = ("#55A868", "#CCB974", "#64B5CD", "#937860", "#DA8BC3", "#2F4B7C", "#A05195", "#7A9E3B")

# options for savefig: text stays text in SVG (searchable, small), reproducible files
_RC = {"svg.fonttype": "none", "svg.hashsalt": "specprof", "font.size": 9,
       "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8}


class NoData(ValueError):
    """The analysis has nothing this figure could show (the message says what is missing)."""


# ------------------------------------------------------------------------------------------------
# helpers


def phase_colors(phase_names: Iterable[str] = ()) -> dict[str, str]:
    """Colour of every phase: :data:`PALETTE`, then :data:`EXTRA_COLORS` for unknown phases in the
    given order (so the mapping only depends on the configured phase list)."""
    colors = dict(PALETTE)
    extra = iter(EXTRA_COLORS * 4)
    for name in phase_names:
        if name not in colors:
            colors[name] = next(extra, PALETTE[OTHER])
    return colors


def _phase_order(a) -> list[str]:
    return phase_order(a)


# kernel labels: one module for the terminal, HTML and figures (never two kernels under one label)
short_name = names.short_name
_unique_labels = names.display_names


def _floats(values) -> np.ndarray:
    """float64 values, NaN where a nullable column or value holds NA (a sampled live log's untimed cycles)."""
    if hasattr(values, "to_numpy"):
        return values.to_numpy(dtype="float64", na_value=np.nan)
    if values is pd.NA or values is None:
        return np.array(np.nan)
    return np.asarray(values, dtype="float64")


def _unit(values_ns) -> tuple[str, float]:
    """Pick ms / µs / s for values in ns so that the largest one reads well."""
    v = _floats(values_ns)
    top = float(np.nanmax(np.abs(v))) if v.size and np.isfinite(v).any() else 0.0
    if top >= 10e9:
        return "s", 1e9
    if top >= 1e6:
        return "ms", 1e6
    return "µs", 1e3


def _rank_label(rank) -> str:
    return f"rank {int(rank)}"


def _new_figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def _styled(fn: Callable) -> Callable:
    """Build the figure under specprof's rc settings (font sizes are read when text is created)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with rc_context(_RC):
            return fn(*args, **kwargs)
    return wrapper


def _boxplot(ax, data, horizontal: bool = False, **kwargs):
    """ax.boxplot across matplotlib versions (``orientation`` replaced ``vert`` in 3.10)."""
    if not horizontal:
        return ax.boxplot(data, **kwargs)
    try:
        return ax.boxplot(data, orientation="horizontal", **kwargs)
    except TypeError:  # matplotlib < 3.10
        return ax.boxplot(data, vert=False, **kwargs)


def _legend_handles(names: list[str], colors: dict[str, str]) -> list[Patch]:
    return [Patch(facecolor=colors[n], edgecolor="none", label=n) for n in names]


# ------------------------------------------------------------------------------------------------
# figures


@_styled
def decode_bars(a, *, max_ranks: int = 16) -> Figure:
    """The steady-state decode cycle per rank (views/decode.py): left, the mean cycle period split
    into the phases, other GPU work and GPU idle (light grey, the host-bound part); right, the GPU
    work alone (the busy part of the same bars, each component's share of it), so the phases stay
    readable when the GPU is idle most of the cycle. Warm-up cycles left out."""
    bd = views.get(a, "decode_breakdown")
    if bd.empty:
        why = ("no decode cycles" if a.cycles is None or a.cycles.empty
               else "the cycle table has no period split" if not decode.has_period_split(a.cycles, a.phase_names)
               else "every cycle is warm-up")
        raise NoData(why)
    comps = [c for c in decode.components(a.phase_names)
             if bd.loc[bd["component"] == c, "per_cycle_ns"].sum() > 0]
    colors = phase_colors(a.phase_names)
    colors[decode.GPU_IDLE] = PALETTE[IDLE]
    pivot = bd.pivot_table(index="rank", columns="component", values="per_cycle_ns", aggfunc="sum")
    pivot = pivot.reindex(columns=comps).fillna(0).iloc[:max_ranks]
    unit, div = _unit(pivot.sum(axis=1))
    n = len(pivot)
    fig = _new_figure(11.0, 1.7 + 0.42 * n)
    left, right = fig.subplots(1, 2, sharey=True, width_ratios=[3, 2])
    y = np.arange(n)
    busy_comps = [c for c in comps if c != decode.GPU_IDLE]
    for ax, cols, scale in ((left, comps, None), (right, busy_comps, "busy")):
        base = np.zeros(n)
        total = pivot[cols].sum(axis=1).to_numpy(dtype="float64")
        for c in cols:
            vals = pivot[c].to_numpy(dtype="float64")
            shown = vals / div if scale is None else np.divide(vals, total, out=np.zeros(n), where=total > 0) * 100
            ax.barh(y, shown, left=base, height=0.62, color=colors[c], edgecolor="white", linewidth=0.5,
                    label=_decode_label(c))
            for yi, (b, v, raw, t) in enumerate(zip(base, shown, vals, total)):
                full = pivot.loc[pivot.index[yi], cols].sum() if scale is None else t
                share = raw / full if full else 0
                if share >= 0.07:
                    ax.text(b + v / 2, yi, f"{100 * share:.0f}%", ha="center", va="center", fontsize=7.5,
                            color="black" if c in (decode.GPU_IDLE, OTHER) else "white")
            base += shown
    left.set_yticks(y, [_rank_label(r) for r in pivot.index])
    left.invert_yaxis()
    left.set_xlabel(f"mean steady-state cycle ({unit})")
    left.set_title("Decode cycle: where the period goes", loc="left")
    right.set_xlabel("share of the GPU work in the cycle (%)")
    right.set_xlim(0, 100)
    right.set_title("GPU work only (idle left out)", loc="left")
    handles = _legend_handles(comps, {c: colors[c] for c in comps})
    for h, c in zip(handles, comps):
        h.set_label(_decode_label(c))
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(comps), 8), frameon=False)
    for ax in (left, right):
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    return fig


def _decode_label(component: str) -> str:
    return "GPU idle (host-bound)" if component == decode.GPU_IDLE else component


@_styled
def phase_bars(a, *, ranks: Iterable[int] | None = None, include_idle: bool = False) -> Figure:
    """Per-rank stacked bars of exclusive GPU time per phase (every busy ns counted once; the
    ``other`` segment is the unattributed time). ``include_idle`` stacks the GPU idle time of the
    rank's window on top."""
    if a.phases.empty:
        raise NoData("no GPU time attributed to any phase")
    order = _phase_order(a)
    colors = phase_colors(order)
    pivot = views.get(a, "phase_by_rank").drop(index="busy", columns="share").T.reindex(columns=order).fillna(0)
    pivot.index.name = "rank"
    if ranks is not None:
        pivot = pivot.reindex(list(ranks)).fillna(0)
    segments = [p for p in order if pivot[p].sum() > 0] or order
    if include_idle:
        idle = a.totals.set_index("rank")["idle_ns"].reindex(pivot.index).fillna(0)
        pivot[IDLE] = idle
        segments = segments + [IDLE]
    unit, div = _unit(pivot[segments].sum(axis=1))
    n = len(pivot)
    fig = _new_figure(max(6.0, 1.0 + 0.75 * n), 4.2)
    ax = fig.add_subplot()
    x = np.arange(n)
    bottom = np.zeros(n)
    for p in segments:
        vals = pivot[p].to_numpy(dtype="float64") / div
        ax.bar(x, vals, bottom=bottom, width=0.7, color=colors[p], label=p, edgecolor="white", linewidth=0.5)
        bottom += vals
    for xi, total in zip(x, bottom):
        ax.annotate(f"{total:,.3g}", (xi, total), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, [_rank_label(r) for r in pivot.index], rotation=0 if n <= 10 else 45,
                  ha="center" if n <= 10 else "right")
    ax.set_xlabel("rank")
    ax.set_ylabel(f"exclusive GPU time ({unit})")
    ax.set_ylim(0, bottom.max() * 1.12 if bottom.max() > 0 else 1)
    ax.set_title("Exclusive GPU time per phase and rank" + (" (+ idle)" if include_idle else ""))
    ax.legend(title="phase", loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


def _cycle_window(a, cycles) -> tuple[int, int, list[int], str]:
    """(start_ns, end_ns, cycle numbers, description) of the window to draw."""
    cyc = cycles_mod.with_gpu(a.cycles)
    if cyc is None or cyc.empty:
        w0, w1 = opstore.of(a).extent()
        return w0, w1, [], "whole trace (no decode_cycle ranges)"
    numbers = sorted(int(c) for c in cyc["cycle"].unique())
    if cycles is None:
        chosen = cycles_mod.default_window_cycles(cyc)
    elif isinstance(cycles, (int, np.integer)):
        chosen = [int(cycles)]
    elif isinstance(cycles, slice):
        chosen = numbers[cycles]
    elif isinstance(cycles, tuple) and len(cycles) == 2:
        chosen = [c for c in numbers if cycles[0] <= c < cycles[1]]
    else:
        chosen = sorted(int(c) for c in cycles)
    sel = cyc[cyc["cycle"].isin(chosen)]
    if sel.empty:
        raise NoData(f"no decode cycle in {cycles!r} (cycles are {numbers[0]}..{numbers[-1]})")
    chosen = sorted(int(c) for c in sel["cycle"].unique())
    label = f"cycle {chosen[0]}" if len(chosen) == 1 else f"cycles {chosen[0]}-{chosen[-1]}"
    return int(sel["start_ns"].min()), int(sel["end_ns"].max()), chosen, label


def _merge(starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    if not len(starts):
        return []
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    out = []
    cs, ce = s[0], e[0]
    for a_, b_ in zip(s[1:], e[1:]):
        if a_ <= ce:
            ce = max(ce, b_)
        else:
            out.append((cs, ce - cs))
            cs, ce = a_, b_
    out.append((cs, ce - cs))
    return out


@_styled
def cycle_timeline(a, *, cycles=None, ranks: Iterable[int] | None = None) -> Figure:
    """Gantt-style lanes, one per rank, over a window of decode cycles: each GPU op coloured by its
    (exclusive) phase, GPU idle time in light grey, cycle boundaries dashed.

    ``cycles``: a cycle number, ``(first, stop)`` (stop excluded), a slice or a list of numbers;
    default: two consecutive cycles starting at the cycle of median duration (ignoring cycle 0,
    usually warm-up). Without decode_cycle ranges the whole trace is drawn."""
    store = opstore.of(a)         # the per-op table, or a chunked analysis' spilled ops
    if not len(store):
        raise NoData("no GPU ops")
    w0, w1, chosen, label = _cycle_window(a, cycles)
    rank_ids = sorted(int(r) for r in (a.ranks["rank"] if ranks is None else ranks))
    order = _phase_order(a)
    colors = phase_colors(order)
    win = store.query(["rank", "start_ns", "end_ns", "phase"], ranks=rank_ids, window=(w0, w1))
    unit, div = _unit([w1 - w0])
    n = len(rank_ids)
    fig = _new_figure(11.0, 1.2 + 0.42 * n)
    ax = fig.add_subplot()
    lane = {r: i for i, r in enumerate(rank_ids)}
    height = 0.7
    cyc = cycles_mod.with_gpu(a.cycles)
    for r in rank_ids:
        y = lane[r] - height / 2
        # idle background: the rank's part of the window (its cycles, or the whole window)
        if chosen:
            mine = cyc[(cyc["rank"] == r) & cyc["cycle"].isin(chosen)]
            lo, hi = (mine["start_ns"].min(), mine["end_ns"].max()) if len(mine) else (w0, w0)
            spans = [((lo - w0) / div, (hi - lo) / div)]
        else:
            spans = [(0.0, (w1 - w0) / div)]
        ax.broken_barh(spans, (y, height), facecolors=colors[IDLE], edgecolor="none", zorder=1)
        sub = win[win["rank"] == r]
        # draw the losing phases first so the phase that owns an overlap is on top
        for z, p in enumerate(reversed(order)):
            ps = sub[sub["phase"] == p]
            if ps.empty:
                continue
            st = (np.clip(ps["start_ns"].to_numpy(dtype="int64"), w0, w1) - w0) / div
            en = (np.clip(ps["end_ns"].to_numpy(dtype="int64"), w0, w1) - w0) / div
            bars = _merge(st, en)
            # a hairline edge keeps µs kernels visible in a ms-wide window
            ax.broken_barh(bars, (y, height), facecolors=colors[p], edgecolors=colors[p], linewidth=0.4,
                           zorder=2 + z)
    if chosen:
        first_rank = cyc[cyc["cycle"].isin(chosen)].sort_values("rank").groupby("cycle").first()
        for c, row in first_rank.iterrows():
            x = (row["start_ns"] - w0) / div
            ax.axvline(x, color="black", linestyle="--", linewidth=0.7, alpha=0.6, zorder=10)
            ax.annotate(f"cycle {c}", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2),
                        textcoords="offset points", fontsize=7, va="bottom")
    ax.set_yticks(range(n), [_rank_label(r) for r in rank_ids])
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, (w1 - w0) / div)
    ax.set_xlabel(f"time since window start ({unit})")
    ax.set_ylabel("rank")
    ax.set_title(f"GPU timeline per rank, {label}", pad=14)
    present = [p for p in order if (win["phase"] == p).any()]
    ax.legend(handles=_legend_handles(present + [IDLE], colors), loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False, title="phase")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


@_styled
def top_kernels(a, *, phases: Iterable[str] | None = None, top: int = 8, rank: int | None = None,
                width: int = 48) -> Figure:
    """Per phase, the kernels with the most GPU time (summed over ranks, or of one ``rank``):
    horizontal bars, labelled with their share of the phase's kernel time."""
    if a.kernels is None or a.kernels.empty:
        raise NoData("no kernels")
    k = views.get(a, "kernel_totals", rank=rank)
    order = _phase_order(a)
    colors = phase_colors(order)
    wanted = list(phases) if phases is not None else order
    wanted = [p for p in wanted if (k["phase"] == p).any() and k.loc[k["phase"] == p, "total_ns"].sum() > 0]
    if not wanted:
        raise NoData("no kernel time in " + ", ".join(phases or order))
    chosen = views.get(a, "top_kernels", top=top, rank=rank, phases=tuple(wanted))
    subs = [chosen[chosen["phase"] == p] for p in wanted]
    unit, div = _unit([s["total_ns"].max() for s in subs])
    heights = [max(1.0, 0.28 * len(s) + 0.5) for s in subs]
    fig = _new_figure(10.0, sum(heights) + 0.6)
    axes = fig.subplots(len(subs), 1, squeeze=False, height_ratios=heights)[:, 0]
    scope = "all ranks" if rank is None else _rank_label(rank)
    for ax, p, s in zip(axes, wanted, subs):
        y = np.arange(len(s))
        vals = s["total_ns"].to_numpy(dtype="float64") / div
        ax.barh(y, vals, color=colors[p], height=0.7)
        ax.set_yticks(y, _unique_labels(s["name"].tolist(), width), fontsize=7.5)
        ax.invert_yaxis()
        top_v = vals.max() if len(vals) else 1
        for yi, v, sh in zip(y, vals, s["share"]):
            ax.annotate(f"{100 * sh:.1f}%", (v, yi), xytext=(3, 0), textcoords="offset points", va="center",
                        fontsize=7)
        ax.set_xlim(0, top_v * 1.15)
        what = "top kernel" if len(s) == 1 else f"top {len(s)} kernels"
        ax.set_title(f"{p}: {what} ({scope}), share of the phase's kernel time", loc="left",
                     color=colors[p] if p != OTHER else "black")
        ax.set_xlabel(f"GPU time ({unit})")
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    return fig


def _distribution_columns(a, cyc: pd.DataFrame) -> list[str]:
    """Phases with a per-cycle column that is not all zero."""
    cols = [p for p in _phase_order(a) if f"{p}_ns" in cyc.columns]
    return [p for p in cols if cyc[f"{p}_ns"].fillna(0).astype("float64").abs().sum() > 0] or cols


def _cycle_time(cyc: pd.DataFrame) -> tuple[str, str]:
    """(column, label) of the wall time of a cycle: its period (host start to next start) when the
    analysis has it, else the GPU window."""
    if "period_ns" in cyc.columns:
        return "period_ns", "cycle period (host start to next start)"
    return "duration_ns", "cycle time"


def _log_if_spread(ax, values, floor=None) -> None:
    """A logarithmic y axis where a few values dwarf the median; ``floor``: values (bars from 0) that
    must stay visible: the axis then starts below the smallest of them."""
    v = _floats(values).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    if len(v) and v.max() / max(float(np.median(v)), 1e-12) > 20:
        ax.set_yscale("log")
        if floor is not None:
            f = np.asarray(floor, dtype="float64").ravel()
            f = f[np.isfinite(f) & (f > 0)]
            if len(f):
                ax.set_ylim(bottom=float(f.min()) / 2)


@_styled
def cycle_distributions(a, *, kind: str = "box", skip_first: bool = False) -> Figure:
    """Distributions over decode cycles: left, cycle time per rank (period: host start to the next
    cycle's start); right, exclusive GPU time per phase per cycle, all ranks pooled. ``kind``:
    ``box`` or ``violin``. ``skip_first`` drops cycle 0 (warm-up). Axes turn logarithmic when a few
    cycles are more than 20x the median (warm-up)."""
    if kind not in ("box", "violin"):
        raise ValueError("kind must be 'box' or 'violin'")
    cyc = cycles_mod.with_gpu(a.cycles)
    if cyc is None or cyc.empty:
        raise NoData("no decode cycles (no decode_cycle NVTX ranges)")
    if skip_first and cyc["cycle"].nunique() > 1:
        cyc = cyc[cyc["cycle"] > cyc["cycle"].min()]
    order = _distribution_columns(a, cyc)
    colors = phase_colors(order)
    ranks = sorted(int(r) for r in cyc["rank"].unique())
    fig = _new_figure(12.0, 4.4)
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[max(3, len(ranks)), max(3, len(order))])

    def draw(ax, data, labels, facecolors):
        data = [d[np.isfinite(d)] for d in (_floats(x) for x in data)]
        if kind == "violin":
            ok = [d if len(d) else np.array([0.0]) for d in data]
            parts = ax.violinplot(ok, showmedians=True, showextrema=True)
            for body, c in zip(parts["bodies"], facecolors):
                body.set_facecolor(c)
                body.set_edgecolor("black")
                body.set_alpha(0.75)
            ax.set_xticks(np.arange(1, len(labels) + 1), labels)
        else:
            parts = _boxplot(ax, data, patch_artist=True, widths=0.6, medianprops={"color": "black"},
                             flierprops={"markersize": 3})
            ax.set_xticks(np.arange(1, len(labels) + 1), labels)
            for box, c in zip(parts["boxes"], facecolors):
                box.set_facecolor(c)
            for line in parts["medians"]:
                line.set_gid("median")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)

    col, label = _cycle_time(cyc)
    unit, div = _unit(cyc[col].quantile(0.9))
    draw(ax1, [cyc.loc[cyc["rank"] == r, col] / div for r in ranks], [_rank_label(r) for r in ranks],
         ["#B0B0B0"] * len(ranks))
    ax1.set_ylabel(f"{label} ({unit})")
    ax1.set_xlabel("rank")
    ax1.set_title(f"Decode cycle time ({cyc['cycle'].nunique()} cycles x {len(ranks)} rank"
                  f"{'' if len(ranks) == 1 else 's'})")
    if len(ranks) > 8:
        ax1.tick_params(axis="x", rotation=45)
    _log_if_spread(ax1, cyc[col])
    unit2, div2 = _unit(cyc[[f"{c}_ns" for c in order]].quantile(0.9).max())
    draw(ax2, [cyc[f"{c}_ns"] / div2 for c in order], order, [colors[c] for c in order])
    ax2.set_ylabel(f"exclusive GPU time per cycle ({unit2})")
    ax2.set_xlabel("phase")
    ax2.set_title("GPU time per phase per cycle (all ranks)")
    _log_if_spread(ax2, cyc[[f"{c}_ns" for c in order]])
    return fig


MAX_CYCLE_BARS = 300     # beyond this, cycle_breakdown draws one bar per run of cycles


def _cycles_per_bar(n: int) -> int:
    return max(1, int(np.ceil(n / MAX_CYCLE_BARS)))


def _binned_cycles(c: pd.DataFrame, per_bar: int, order: list[str]) -> pd.DataFrame:
    """One row per run of ``per_bar`` consecutive cycles: phase times, busy and gap as means, the
    period (or duration) as the maximum (a slow cycle stays visible), ``cycle`` the run's first."""
    run = np.arange(len(c)) // per_bar
    g = c.reset_index(drop=True).groupby(run, sort=True)
    means = [f"{p}_ns" for p in order] + [k for k in ("busy_ns", "gap_ns") if k in c]
    out = g[means].mean()
    for k in ("period_ns", "duration_ns"):
        if k in c:
            out[k] = g[k].max()
    out["cycle"] = g["cycle"].first()
    return out.reset_index(drop=True)


@_styled
def cycle_breakdown(a, *, rank: int | None = None, top_slowest: int = 3) -> Figure:
    """Per decode cycle of one rank (default: the first): top, exclusive GPU time per phase (stacked);
    bottom, the cycle's GPU window split into busy and gap (GPU idle inside the window: launch-bound
    time) and, when known, its period. The ``top_slowest`` cycles by period are marked. Beyond ``MAX_CYCLE_BARS`` cycles a bar
    is a run of consecutive cycles (means; the period is the run's slowest)."""
    cyc = cycles_mod.with_gpu(a.cycles)
    if cyc is None or cyc.empty:
        raise NoData("no decode cycles (no decode_cycle NVTX ranges)")
    rank = int(cyc["rank"].min()) if rank is None else int(rank)
    c = cyc[cyc["rank"] == rank].sort_values("cycle")
    if c.empty:
        raise NoData(f"no decode cycles on rank {rank}")
    order = _distribution_columns(a, c)
    colors = phase_colors(order)
    per_bar = _cycles_per_bar(len(c))
    title_bars = ""
    if per_bar > 1:          # thousands of cycles: one bar per run of cycles (means; period: the max)
        c, title_bars = _binned_cycles(c, per_bar, order), f"; mean of {per_bar} cycles per bar"
    n = len(c)

    def bar_style(color) -> dict:
        # runs of cycles: bars touch (no white moire between hundreds of thin bars)
        return {"width": 0.8} if per_bar == 1 else {"width": 1.0, "edgecolor": color, "linewidth": 0.3}

    fig = _new_figure(max(7.0, min(16.0, 2.5 + 0.22 * n)), 6.2)
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    x = np.arange(n)
    busy_total = c[[f"{p}_ns" for p in order]].sum(axis=1).to_numpy(dtype="float64")
    unit, div = _unit(np.quantile(busy_total, 0.9))
    bottom = np.zeros(n)
    for p in order:
        vals = c[f"{p}_ns"].to_numpy(dtype="float64") / div
        ax1.bar(x, vals, bottom=bottom, color=colors[p], label=p, **bar_style(colors[p]))
        bottom += vals
    ax1.set_ylabel(f"GPU time ({unit})")
    ax1.set_title(f"Where each decode cycle's GPU time went ({_rank_label(rank)}, exclusive per phase"
                  f"{title_bars})")
    ax1.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, title="phase")
    _log_if_spread(ax1, bottom, floor=bottom)

    col, _ = _cycle_time(c)
    unit2, div2 = _unit(c[col].quantile(0.9))
    busy = c["busy_ns"].to_numpy(dtype="float64") / div2 if "busy_ns" in c else busy_total * div / div2
    gap = c["gap_ns"].to_numpy(dtype="float64") / div2 if "gap_ns" in c else np.zeros(n)
    ax2.bar(x, busy, color=PALETTE[OTHER], label="GPU busy", **bar_style(PALETTE[OTHER]))
    ax2.bar(x, gap, bottom=busy, color=PALETTE[IDLE], label="gap (GPU idle)",
            **({"width": 0.8, "edgecolor": "#BBBBBB", "linewidth": 0.4} if per_bar == 1 else bar_style(PALETTE[IDLE])))
    wall = c[col].to_numpy(dtype="float64") / div2
    if col != "duration_ns":
        ax2.plot(x, wall, marker="_", markersize=12, linestyle="none", color="black", label="period")
    slow = c.nlargest(min(top_slowest, n), col)
    pos = {cy: i for i, cy in enumerate(c["cycle"].to_numpy())}
    for cy in slow["cycle"]:
        xi = pos[cy]
        ax2.annotate("slow", (xi, max(wall[xi], busy[xi] + gap[xi])), xytext=(0, 3), textcoords="offset points",
                     ha="center", fontsize=7, color=PALETTE["allreduce"])
    ax2.set_ylabel(f"per cycle ({unit2})")
    ax2.set_title("GPU window of each cycle: busy + gap" + (", and period (host start to next start)"
                                                            if col != "duration_ns" else ""))
    ax2.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _log_if_spread(ax2, wall, floor=busy)          # the GPU busy bars start at 0: keep them in view
    step = max(1, int(np.ceil(n / 30)))
    ax2.set_xticks(x[::step], [str(v) for v in c["cycle"].to_numpy()[::step]])
    ax2.set_xlabel("decode cycle")
    for ax in (ax1, ax2):
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    return fig


def ops_by_cycle(a, phase: str | None = None, columns: list[str] | None = None) -> pd.DataFrame:
    """GPU ops (of one ``phase``, or all) that start inside a decode cycle's GPU window on their
    rank (:func:`analyze.timeline.cycles.cycle_at`, its end included), with that cycle's number in a ``cycle`` column; ``columns``: only these columns of the ops
    (plus ``cycle``; millions of ops: the figures take the few they need). From the analysis' op store:
    its per-op table where it holds one (a report analysed whole: its rows in its order), else the
    spilled ops (reports analysed in chunks: the store's columns, of ``phase``, in (rank, start) order)."""
    store, cyc = opstore.of(a), cycles_mod.with_gpu(a.cycles)
    ops = store.frame
    if ops is None and len(store):
        asked = [c for c in (columns or opstore.COLUMNS) if c in opstore.COLUMNS]
        asked = list(dict.fromkeys(asked + ["rank", "start_ns"] + (["phase"] if phase else [])))
        ops = store.query(asked, where=(lambda f: f["phase"].to_numpy() == phase) if phase else None)
    if ops is not None and columns is not None:
        ops = ops[list(dict.fromkeys(list(columns) + ["rank", "start_ns"] + (["phase"] if phase else [])))]
    cols = (list(ops.columns) if ops is not None else []) + ["cycle"]
    if ops is None or ops.empty or cyc is None or cyc.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    if phase is not None:
        ops = ops[ops["phase"] == phase]
    cycle = cycles_mod.cycle_of_arrays(ops["rank"].to_numpy(dtype="int64"), ops["start_ns"].to_numpy(dtype="int64"),
                                       cyc)           # the one op -> cycle rule (timeline.cycles.cycle_at)
    ok = cycle >= 0
    if not ok.any():
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    return ops[ok].assign(cycle=cycle[ok]).reset_index(drop=True)


def kernel_cycle_table(a, phase: str = "verify") -> pd.DataFrame:
    """Per kernel of ``phase``: its GPU time per (rank, cycle), summarised over cycles: ``mean_ns``,
    ``std_ns``, ``cv`` (std / mean), ``min_ns``, ``max_ns``, ``max_cycle`` / ``max_rank`` (where it
    took longest; of equal longest, the lowest rank, then cycle) and ``share`` of the phase's kernel time; sorted by total time."""
    per = ops_by_cycle(a, phase, columns=["name", "rank", "start_ns", "end_ns"])
    cols = ["name", "cycles", "total_ns", "mean_ns", "std_ns", "cv", "min_ns", "max_ns", "max_rank", "max_cycle",
            "share"]
    if per.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    per = per.assign(duration_ns=per["end_ns"] - per["start_ns"])
    pc = per.groupby(["name", "rank", "cycle"], sort=False)["duration_ns"].sum().reset_index()
    # a kernel absent from some cycle took 0 ns there
    measured = cycles_mod.with_gpu(a.cycles)
    n_cycles = len(measured[measured["rank"].isin(pc["rank"].unique())])
    rows = []
    for name, g in pc.groupby("name", sort=False):
        v = np.concatenate([g["duration_ns"].to_numpy(dtype="float64"), np.zeros(max(0, n_cycles - len(g)))])
        # where it took longest: the lowest (rank, cycle) of the longest (ties: the same whatever the ops' order)
        top = g.sort_values(["duration_ns", "rank", "cycle"], ascending=[False, True, True], kind="stable").iloc[0]
        mean = float(v.mean())
        rows.append([name, len(g), int(v.sum()), mean, float(v.std()), float(v.std() / mean) if mean else np.nan,
                     float(v.min()), float(v.max()), int(top["rank"]), int(top["cycle"])])
    out = pd.DataFrame(rows, columns=cols[:-1])
    out["share"] = out["total_ns"] / out["total_ns"].sum() if out["total_ns"].sum() else 0.0
    return out.sort_values("total_ns", ascending=False).reset_index(drop=True)


@_styled
def kernel_variability(a, *, phase: str = "verify", top: int = 8, width: int = 48) -> Figure:
    """Box plot per kernel of ``phase`` (the ``top`` ones by GPU time): its GPU time in each decode cycle
    of each rank. A wide box or high whisker = a kernel whose time varies between cycles."""
    per = ops_by_cycle(a, phase, columns=["name", "rank", "start_ns", "end_ns"])
    if per.empty:
        raise NoData(f"no {phase} GPU ops inside decode cycles")
    per = per.assign(duration_ns=per["end_ns"] - per["start_ns"])
    pc = per.groupby(["name", "rank", "cycle"], sort=False)["duration_ns"].sum().reset_index()
    order = pc.groupby("name")["duration_ns"].sum().sort_values(ascending=False).index[:top].tolist()
    data = [pc.loc[pc["name"] == n, "duration_ns"].to_numpy(dtype="float64") for n in order]
    unit, div = _unit([np.quantile(d, 0.9) for d in data])
    color = phase_colors(a.phase_names).get(phase, PALETTE[OTHER])
    fig = _new_figure(10.0, 1.0 + 0.42 * len(order))
    ax = fig.add_subplot()
    parts = _boxplot(ax, [d / div for d in data], horizontal=True, patch_artist=True, widths=0.6,
                     medianprops={"color": "black"}, flierprops={"markersize": 3})
    for box in parts["boxes"]:
        box.set_facecolor(color)
    for line in parts["medians"]:
        line.set_gid("median")
    ax.set_yticks(np.arange(1, len(order) + 1), _unique_labels(order, width), fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlabel(f"GPU time per cycle and rank ({unit})")
    ax.set_title(f"{phase}: per-cycle time of the top {len(order)} kernels ({pc[['rank', 'cycle']].drop_duplicates().shape[0]}"
                 " rank-cycles)", loc="left")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    _log_x = np.concatenate(data)
    if len(_log_x) and _log_x.max() / max(float(np.median(_log_x)), 1) > 50:
        ax.set_xscale("log")
    return fig


@_styled
def allreduce_heatmap(a, *, max_collectives: int = 400) -> Figure:
    """Wait time of every rank in every collective (rank x collective instance): how long the rank
    sat in the all-reduce before the last rank arrived. Dots mark the last rank to arrive."""
    coll = a.collectives
    if coll is None or coll.empty:
        n = len(a.ranks)
        why = "one rank" if n < 2 else "no collective kernels (allreduce kernel patterns) matched"
        raise NoData(f"no collectives ({why})")
    grid = coll.pivot_table(index="rank", columns="collective", values="wait_ns", aggfunc="sum").sort_index()
    shown = grid.columns[:max_collectives]
    grid = grid[shown]
    unit, div = _unit(grid.to_numpy())
    n_r, n_c = grid.shape
    fig = _new_figure(11.0, 1.6 + 0.36 * n_r)
    ax = fig.add_subplot()
    cmap = LinearSegmentedColormap.from_list("wait", ["#FFFFFF", "#F2B8A0", PALETTE["allreduce"], "#5A0F12"])
    values = grid.to_numpy(dtype="float64") / div
    vmax, above = heatmap_scale(values)
    im = ax.imshow(values, aspect="auto", cmap=cmap, interpolation="nearest", vmin=0, vmax=vmax)
    last = coll[coll["last_arrival"].astype(bool) & coll["collective"].isin(shown)]
    if n_c <= 200 and len(last):
        col_pos = {c: i for i, c in enumerate(shown)}
        row_pos = {r: i for i, r in enumerate(grid.index)}
        ax.scatter([col_pos[c] for c in last["collective"]], [row_pos[r] for r in last["rank"]], s=5,
                   color="black", marker="o", label="last to arrive")
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), frameon=False, borderaxespad=0.2,
                  handletextpad=0.2)
    ax.set_yticks(range(n_r), [_rank_label(r) for r in grid.index])
    ax.set_xlabel("collective instance (n-th all-reduce of every rank)")
    ax.set_ylabel("rank")
    more = f", first {max_collectives} of {coll['collective'].nunique()}" if coll["collective"].nunique() > n_c else ""
    ax.set_title(f"All-reduce wait per rank and collective ({n_c} collectives{more})", loc="left")
    cb = fig.colorbar(im, ax=ax, pad=0.01, extend="max" if above else "neither")
    cb.set_label(f"wait for the last rank ({unit})")
    if above:
        ax.set_title(ax.get_title(loc="left") + f"; colour scale without the top {above} cell{'s' if above != 1 else ''}",
                     loc="left")
    return fig


HEATMAP_LEFT_OUT = 0.01     # the top 1% of cells (at least one) do not set the colour scale


def heatmap_scale(values: np.ndarray) -> tuple[float, int]:
    """(top of the colour scale, cells above it): the largest cell once the top
    :data:`HEATMAP_LEFT_OUT` of cells, at least one, is left out, so one outlier (the warm-up's
    first all-reduce) does not wash every other cell out; the maximum when that is 0 (a mostly
    zero grid) or there is a single cell."""
    v = np.sort(values[np.isfinite(values)].ravel())
    if not v.size:
        return 1.0, 0
    k = max(1, int(v.size * HEATMAP_LEFT_OUT))
    top = float(v[-k - 1]) if v.size > k else float(v[-1])
    if top <= 0:
        top = float(v[-1])
    top = top if top > 0 else 1.0
    return top, int((v > top).sum())


# name -> (function, what it shows); write_all and the HTML report draw these in this order
FIGURES: dict[str, tuple[Callable, str]] = {
    "decode": (decode_bars, "Steady-state decode cycle per rank"),
    "phases": (phase_bars, "Exclusive GPU time per phase and rank"),
    "timeline": (cycle_timeline, "Decode-cycle timeline per rank"),
    "top_kernels": (top_kernels, "Top kernels per phase"),
    "cycle_distributions": (cycle_distributions, "Cycle time and per-phase distributions"),
    "cycle_breakdown": (cycle_breakdown, "Per-cycle breakdown"),
    "verify_kernels": (kernel_variability, "Verify kernels across cycles"),
    "allreduce_wait": (allreduce_heatmap, "All-reduce wait heatmap"),
}


def figures(a, names: Iterable[str] | None = None) -> tuple[dict[str, Figure], list[Note]]:
    """Every figure that has data, by name, and one note per figure skipped for lack of data."""
    out, notes = {}, []
    for name in (FIGURES if names is None else list(names)):
        if name not in FIGURES:
            raise ValueError(f"unknown figure {name!r}; figures: {', '.join(FIGURES)}")
        fn, title = FIGURES[name]
        try:
            out[name] = fn(a)
        except NoData as exc:
            notes.append(Note(N.FIGURE_SKIPPED, f"figure {name} skipped: {exc}"))
    return out, notes


def to_bytes(fig: Figure, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure rendered as PNG or SVG bytes (SVG text stays text; files are reproducible)."""
    buf = io.BytesIO()
    meta = {"Date": None} if fmt == "svg" else {}
    with rc_context(_RC):
        fig.savefig(buf, format=fmt, dpi=dpi, metadata=meta, facecolor="white")
    return buf.getvalue()


def _add_notes(a, notes: list[Note]) -> None:
    existing = getattr(a, "notes", None)
    if isinstance(existing, list):
        for n in notes:
            if n not in existing:
                existing.append(n)


def write_all(result, directory, *, names: Iterable[str] | None = None, formats: Iterable[str] = ("png", "svg"),
              dpi: int = 110) -> list[str]:
    """Write every figure with data as ``NAME.png`` and ``NAME.svg`` into ``directory`` (created if
    missing; all files renamed into place only when every figure was written). Figures without data
    are skipped; why is added to ``result.notes`` (printed by the CLI). ``names``: only these figures
    (keys of :data:`FIGURES`). Returns the file names."""
    from analyze import output_policy
    from analyze.atomic import atomic_dir_write

    formats = tuple(formats)
    figs, notes = figures(result, names)
    _add_notes(result, notes)
    with output_policy.protect(output_policy.inputs_of(result)), atomic_dir_write(directory) as d:
        for name, fig in figs.items():
            for fmt in formats:
                with d.open(f"{name}.{fmt}", "wb") as f:
                    f.write(to_bytes(fig, fmt, dpi))
        return d.names
