"""The comparison of two measurements on the terminal, as JSON records and as a figure."""
from __future__ import annotations

from pathlib import Path

import numpy as np

def _fmt_value(fig: str, v: float) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if fig.endswith("_ns"):
        return f"{v / 1e3:,.1f}"
    if fig == "tokens_per_s":       # whole tokens/s: a run-to-run spread of percents makes decimals noise
        return f"{v:,.0f}"
    return f"{v:,.2f}"


def _label(fig: str) -> str:
    if fig == "cycle_ns":
        return "cycle time (us)"
    if fig.endswith("_ns"):
        return f"{fig[:-3]} (us)"
    if fig == "tokens":
        return "tokens / cycle"
    if fig == "tokens_per_s":
        return "tokens / s"
    return fig


def render_diff(d: dict, max_ranks: int = 8, top: int = 10, width: int | None = None) -> str:
    from analyze.render.text import clip, table, terminal_width, wrap

    width = terminal_width() if width is None else width

    out = ["specprof diff: what moved (95% bootstrap CI of the delta; * = significant, CI excludes 0)",
           clip(f"  before: {d['inputs']['before']}", 120), clip(f"  after:  {d['inputs']['after']}", 120), ""]
    s = d["summary"]
    if len(s):
        ranks = list(dict.fromkeys(s["rank"]))
        for rank in ranks[: max_ranks + 1]:
            g = s[s["rank"] == rank]
            head = "All ranks (per cycle: mean over ranks)" if rank == "all" else f"Rank {rank}"
            n = g.iloc[0]
            out.append(f"{head}: {n['cycles_before']} -> {n['cycles_after']} cycles")
            rows = []
            for r in g.itertuples(index=False):
                ci = f"[{_fmt_value(r.figure, r.ci_lo)}, {_fmt_value(r.figure, r.ci_hi)}]"
                pct = "-" if np.isnan(r.delta_pct) else f"{r.delta_pct:+.1f}%"
                rows.append([_label(r.figure), _fmt_value(r.figure, r.before), _fmt_value(r.figure, r.after),
                             _fmt_value(r.figure, r.delta), pct, ci, "*" if r.significant else ""])
            out += table(["figure", "before", "after", "delta", "delta %", "95% CI of delta", "sig"], rows,
                         "lrrrrrl")
            out.append("")
        if len(ranks) > max_ranks + 1:
            out.append(f"({len(ranks) - max_ranks - 1} more ranks in --json)")
            out.append("")
    k = d["kernels"]
    if len(k):
        ch = k[k["status"] == "changed"].head(top)
        if len(ch):
            out.append("Kernels whose time per cycle changed most (us per cycle per rank)")
            rows = [[r.phase, clip(r.kernel, 62), f"{r.before_ns / 1e3:,.2f}", f"{r.after_ns / 1e3:,.2f}",
                     f"{r.delta_ns / 1e3:+,.2f}", "-" if np.isnan(r.delta_pct) else f"{r.delta_pct:+.1f}%"]
                    for r in ch.itertuples(index=False)]
            out += table(["phase", "kernel", "before", "after", "delta", "delta %"], rows, "llrrrr")
            out.append("")
        for status, title in (("new", "New kernels (after only)"), ("vanished", "Vanished kernels (before only)")):
            g = k[k["status"] == status]
            if len(g):
                out.append(f"{title}: {len(g)}")
                col = "after_ns" if status == "new" else "before_ns"
                rows = [[r.phase, clip(r.kernel, 80), f"{getattr(r, col) / 1e3:,.2f}"]
                        for r in g.head(top).itertuples(index=False)]
                out += table(["phase", "kernel", "us/cycle"], rows, "llr")
                out.append("")
    for n in d["notes"]:                              # whole, wrapped to the terminal (never cut)
        out += wrap(str(n), width, first="note: ")
    return "\n".join(out).rstrip() + "\n"


def to_json(d: dict) -> dict:
    from analyze.render.outputs import records

    return {"inputs": d["inputs"], "n_boot": d["n_boot"], "seed": d["seed"], "level": d["level"],
            "summary": records(d["summary"]) if len(d["summary"]) else [],
            "kernels": records(d["kernels"]) if len(d["kernels"]) else [], "notes": d["notes"]}


def plot_diff(d: dict, path, top: int = 10) -> None:
    from matplotlib.figure import Figure   # no pyplot: nothing registered with a GUI backend

    s = d["summary"]
    s = s[(s["rank"] == "all") & s["figure"].str.endswith("_ns")] if len(s) else s
    k = d["kernels"]
    k = k[k["status"] == "changed"].head(top) if len(k) else k
    fig = Figure(figsize=(13, 4.8))
    axes = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    ax = axes[0]
    if len(s):
        y = np.arange(len(s))
        delta = s["delta"].to_numpy() / 1e3
        err = np.vstack([delta - s["ci_lo"].to_numpy() / 1e3, s["ci_hi"].to_numpy() / 1e3 - delta])
        colors = ["tab:red" if (sig and dl > 0) else "tab:green" if sig else "0.6"
                  for sig, dl in zip(s["significant"], delta)]
        ax.barh(y, delta, xerr=err, color=colors, capsize=3)
        ax.set_yticks(y, [_label(f) for f in s["figure"]])
        ax.invert_yaxis()
        ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("after - before (us per cycle), 95% CI")
    ax.set_title("Per cycle, mean over ranks")
    ax = axes[1]
    if len(k):
        y = np.arange(len(k))
        ax.barh(y, k["delta_ns"].to_numpy() / 1e3, color=["tab:red" if v > 0 else "tab:green" for v in k["delta_ns"]])
        ax.set_yticks(y, [f"{p}: {n[:40]}" for p, n in zip(k["phase"], k["kernel"])], fontsize=7)
        ax.invert_yaxis()
        ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("after - before (us per cycle per rank)")
    ax.set_title("Kernels that changed most")
    fig.tight_layout()
    from analyze.atomic import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
