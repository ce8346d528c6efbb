"""``analyze-trace diff BEFORE AFTER``: what moved between two measurements, and whether it is noise.

Each side is a report, a directory of per-rank reports, or a saved ``analyze-trace --json`` result.
Per rank (and ``all``: per cycle index, the mean over ranks) and per figure (cycle time, exclusive
GPU time per phase per cycle, gap, tokens per cycle, tokens per second): before, after, delta and a
95% bootstrap confidence interval of the delta (cycles resampled with replacement on each side,
seeded, so the same inputs give the same interval; paired by cycle index when both runs accepted
the same tokens in every cycle). A delta is *significant* when its interval
excludes 0. Kernels: time per cycle (total over the run / cycles), matched by a normalized name
(return type, template arguments, parameter list, NCCL algorithm/protocol and compiler numbering
stripped) within the same phase; new and vanished kernels are listed.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analyze.attribute.phases import OTHER

OUTLIER_FACTOR = 5.0   # cycles longer than this many medians are warm-up/outliers and left out
N_BOOT = 2000
LEVEL = 0.95


# ---------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------
@dataclass
class Side:
    """What diff and whatif need from one measurement."""

    label: str
    cycles: pd.DataFrame
    kernels: pd.DataFrame
    phase_names: list
    ranges: pd.DataFrame | None = None     # only for reports (not for JSON results)
    gpu_ops: pd.DataFrame | None = None
    notes: list = field(default_factory=list)


def cycle_kernels(gpu_ops: pd.DataFrame) -> pd.DataFrame:
    """(rank, phase, name) -> instances, total_ns over the ops launched inside decode cycles, so
    set-up work (weight uploads, warm-up outside cycles) does not count as time per cycle."""
    inside = gpu_ops[gpu_ops["cycle_range"].to_numpy() >= 0]
    dur = inside["end_ns"].to_numpy() - inside["start_ns"].to_numpy()
    frame = pd.DataFrame({"rank": inside["rank"].to_numpy(), "phase": inside["phase"].astype(str).to_numpy(),
                          "name": inside["name"].astype(str).to_numpy(), "d": dur})
    return frame.groupby(["rank", "phase", "name"], sort=False)["d"].agg(instances="size", total_ns="sum") \
        .reset_index()


def side_from_analysis(result, label: str = "") -> Side:
    kernels, notes = result.kernels, list(result.notes)
    ops = result.gpu_ops
    if len(result.cycles) and ops is not None and len(ops) and "cycle_range" in ops.columns:
        kernels = cycle_kernels(ops)
    elif len(result.cycles) and (ops is None or not len(ops)):
        notes.append("no per-op table (chunked analysis): kernel lists count every op of the report, "
                     "not only those inside decode cycles")
    return Side(label, result.cycles, kernels, list(result.phase_names), result.ranges, ops, notes)


def side_from_json(data: dict, label: str = "") -> Side:
    if "cycles" not in data or "kernels" not in data:
        raise ValueError(f"{label}: not an `analyze-trace --json` result (no cycles/kernels tables)")
    cycles = pd.DataFrame(data["cycles"])
    for c in ("accepted_tokens", "requests", "tokens"):
        if c in cycles.columns:
            cycles[c] = pd.to_numeric(cycles[c], errors="coerce").astype("Int64")
    return Side(label, cycles, pd.DataFrame(data["kernels"]), list(data.get("phase_names") or []),
                notes=list(data.get("notes") or []))


def load_side(path, config=None) -> Side:
    """A report, a directory of reports, or a ``--json`` result (``.json``)."""
    from analyze import safety

    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".json":
        try:
            data = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise safety.TraceError(f"{p}: cannot read JSON result: {exc}") from exc
        try:
            return side_from_json(data, str(p))
        except ValueError as exc:
            raise safety.TraceError(str(exc)) from exc
    from analyze.run import api

    return side_from_analysis(api.load(str(p), config), str(p))


def as_side(x, label: str = "") -> Side:
    if isinstance(x, Side):
        return x
    if isinstance(x, dict):
        return side_from_json(x, label)
    if hasattr(x, "cycles") and hasattr(x, "kernels"):
        return side_from_analysis(x, label)
    return load_side(x)


# ---------------------------------------------------------------------------------------------
# per-cycle samples
# ---------------------------------------------------------------------------------------------
def time_column(cycles: pd.DataFrame) -> str:
    """The cycle's wall time: its period (start to next start on the host) when the table has it."""
    return "period_ns" if "period_ns" in cycles.columns else "duration_ns"


def figures(cycles: pd.DataFrame, phase_names: list) -> list[str]:
    cols = [time_column(cycles)] + [f"{p}_ns" for p in list(phase_names) + [OTHER]] + ["gap_ns"]
    return [c for c in dict.fromkeys(cols) if c in cycles.columns]


def drop_outliers(cycles: pd.DataFrame, factor: float = OUTLIER_FACTOR) -> tuple[pd.DataFrame, int]:
    """Leave out cycles (all ranks of a cycle index) whose wall time exceeds ``factor`` x median."""
    if cycles.empty or not factor:
        return cycles, 0
    t = cycles.groupby("cycle")[time_column(cycles)].max()
    bad = t.index[t > factor * t.median()]
    return cycles[~cycles["cycle"].isin(bad)], int(len(bad))


def per_cycle(cycles: pd.DataFrame, phase_names: list, rank=None) -> pd.DataFrame:
    """One row per cycle: the figures of one rank, or (rank=None) the mean over ranks per cycle index;
    tokens from the lowest rank that recorded accept marks."""
    cols = figures(cycles, phase_names)
    if rank is not None:
        c = cycles[cycles["rank"] == rank].set_index("cycle")
        out = c[cols].astype("float64")
    else:
        out = cycles.groupby("cycle")[cols].mean()
    tok = cycles[cycles["tokens"].notna()] if "tokens" in cycles.columns else cycles.iloc[0:0]
    if len(tok):
        src = tok[tok["rank"] == (rank if rank is not None else tok["rank"].min())].set_index("cycle")
        out["tokens"] = src["tokens"].astype("float64").reindex(out.index)
    else:
        out["tokens"] = np.nan
    return out.reset_index()


# ---------------------------------------------------------------------------------------------
# bootstrap
# ---------------------------------------------------------------------------------------------
def _boot_means(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return values[idx].mean(axis=1)


def bootstrap_delta(before: pd.DataFrame, after: pd.DataFrame, *, n_boot: int = N_BOOT, seed: int = 0,
                    level: float = LEVEL, time_col: str = "duration_ns") -> pd.DataFrame:
    """Per figure of two per-cycle tables: means, delta and a percentile bootstrap CI of the delta.
    tokens_per_s is the throughput sum(tokens)/sum(time) of the resampled cycles."""
    rng = np.random.default_rng(seed)
    nb, na = len(before), len(after)
    ib = rng.integers(0, nb, (n_boot, nb)) if nb else None
    ia = rng.integers(0, na, (n_boot, na)) if na else None
    if paired(before, after):
        ia = ib                      # same token sequence cycle by cycle: resample cycle pairs
    q = [50 * (1 - level), 50 * (1 + level)]
    rows = []
    names = [c for c in before.columns if c in after.columns and c != "cycle"]
    for name in names + ["tokens_per_s"]:
        if name == "tokens_per_s":
            if not {"tokens", time_col} <= set(names):
                continue
            okb = before["tokens"].notna().to_numpy()
            oka = after["tokens"].notna().to_numpy()
            if not okb.any() or not oka.any():
                continue

            def tps(frame, ok, idx):
                tok = np.where(ok, frame["tokens"].to_numpy(dtype="float64", na_value=0.0), 0.0)
                t = np.where(ok, frame[time_col].to_numpy(dtype="float64"), 0.0)
                point = tok.sum() * 1e9 / t.sum()
                return point, tok[idx].sum(axis=1) * 1e9 / t[idx].sum(axis=1)

            b, bb = tps(before, okb, ib)
            a, ab = tps(after, oka, ia)
        else:
            vb = before[name].to_numpy(dtype="float64", na_value=np.nan)
            va = after[name].to_numpy(dtype="float64", na_value=np.nan)
            if np.isnan(vb).all() or np.isnan(va).all() or not nb or not na:
                continue
            vb = np.where(np.isnan(vb), np.nanmean(vb), vb)
            va = np.where(np.isnan(va), np.nanmean(va), va)
            b, a = float(vb.mean()), float(va.mean())
            bb, ab = _boot_means(vb, ib), _boot_means(va, ia)
        lo, hi = np.percentile(ab - bb, q)
        delta = a - b
        rows.append(dict(figure=_figure_name(name, time_col), before=b, after=a, delta=delta,
                         delta_pct=100.0 * delta / b if b else np.nan, ci_lo=float(lo), ci_hi=float(hi),
                         significant=bool(lo > 0 or hi < 0), cycles_before=nb, cycles_after=na))
    return pd.DataFrame(rows)


def paired(before: pd.DataFrame, after: pd.DataFrame) -> bool:
    """Two runs of one seeded workload: same number of cycles and the same tokens in every cycle
    (acceptance replayed identically). Their cycles are then compared pair by pair."""
    if len(before) != len(after) or not len(before) or "tokens" not in before.columns:
        return False
    tb, ta = before["tokens"].to_numpy(dtype="float64"), after["tokens"].to_numpy(dtype="float64")
    return bool(np.isfinite(tb).all() and np.array_equal(tb, ta))


def _figure_name(col: str, time_col: str) -> str:
    if col == time_col:
        return "cycle_ns"
    return col


# ---------------------------------------------------------------------------------------------
# kernels
# ---------------------------------------------------------------------------------------------
_NCCL_SUFFIX = re.compile(r"_(?:RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|NVLS|NVLS_TREE|PAT)"
                          r"(?:_(?:LL|LL128|SIMPLE))?$")


def _strip_balanced(text: str, open_: str, close: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == open_:
            depth += 1
        elif ch == close and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def normalize_kernel(name: str) -> str:
    """The kernel's identity across runs: no return type, template arguments, parameter list,
    ``[clone ...]``, NCCL algorithm/protocol suffix (RING_LL, TREE_LL128, ...) or compiler numbering
    of generated kernels (``triton_poi_fused_add_0`` -> ``triton_poi_fused_add``)."""
    s = str(name).strip()
    if s.startswith("[CUDA "):        # memcpy / memset / graph rows keep their label
        return re.sub(r"\s+\d+\]$", "]", s)
    s = re.sub(r"\s*\[clone[^\]]*\]", "", s)
    s = s.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    s = s.replace("operator<<", "operator_lshift").replace("operator>>", "operator_rshift")
    s = _strip_balanced(s, "<", ">")
    s = _strip_balanced(s, "(", ")")
    s = s.strip()
    if " " in s:                      # drop a return type ("void f" -> "f")
        s = s.rsplit(" ", 1)[-1]
    s = _NCCL_SUFFIX.sub("", s)
    if re.match(r"^(triton_|fused_|cutlass_)", s):
        s = re.sub(r"_\d+$", "", s)
    return s


def kernel_per_cycle(kernels: pd.DataFrame, cycles: pd.DataFrame) -> pd.DataFrame:
    """(phase, kernel) -> time per cycle per rank: total over ranks / cycles over ranks."""
    ncyc = int(cycles.groupby("rank")["cycle"].nunique().sum()) if len(cycles) else 0
    if kernels.empty:
        return pd.DataFrame(columns=["phase", "kernel", "ns_per_cycle", "instances_per_cycle", "names"])
    k = kernels.assign(kernel=kernels["name"].map(normalize_kernel))
    g = k.groupby(["phase", "kernel"], sort=False)
    out = g.agg(total_ns=("total_ns", "sum"), instances=("instances", "sum"),
                names=("name", lambda s: sorted(set(map(str, s))))).reset_index()
    denom = ncyc if ncyc else max(1, k["rank"].nunique())
    out["ns_per_cycle"] = out["total_ns"] / denom
    out["instances_per_cycle"] = out["instances"] / denom
    return out[["phase", "kernel", "ns_per_cycle", "instances_per_cycle", "names"]]


def kernel_diff(before: Side, after: Side, top: int = 10) -> pd.DataFrame:
    b = kernel_per_cycle(before.kernels, before.cycles).set_index(["phase", "kernel"])
    a = kernel_per_cycle(after.kernels, after.cycles).set_index(["phase", "kernel"])
    keys = b.index.union(a.index, sort=False)
    out = pd.DataFrame(index=keys)
    out["before_ns"] = b["ns_per_cycle"].reindex(keys)
    out["after_ns"] = a["ns_per_cycle"].reindex(keys)
    out["status"] = np.where(out["before_ns"].isna(), "new", np.where(out["after_ns"].isna(), "vanished", "changed"))
    out = out.fillna({"before_ns": 0.0, "after_ns": 0.0})
    out["delta_ns"] = out["after_ns"] - out["before_ns"]
    out["delta_pct"] = np.where(out["before_ns"] > 0, 100 * out["delta_ns"] / out["before_ns"].where(
        out["before_ns"] > 0), np.nan)
    out["names_before"] = b["names"].reindex(keys)
    out["names_after"] = a["names"].reindex(keys)
    out = out.reset_index()
    out["abs"] = out["delta_ns"].abs()
    out = out.sort_values(["abs", "phase", "kernel"], ascending=[False, True, True]).drop(columns="abs")
    changed = out[out["status"] == "changed"].head(top)
    rest = out[out["status"] != "changed"]
    return pd.concat([changed, rest], ignore_index=True)


# ---------------------------------------------------------------------------------------------
# the diff
# ---------------------------------------------------------------------------------------------
def diff_results(before, after, *, n_boot: int = N_BOOT, seed: int = 0, top: int = 10,
                 outlier_factor: float = OUTLIER_FACTOR, level: float = LEVEL) -> dict:
    """Before/after/delta with bootstrap CIs, per rank (+ ``all``) and figure; kernel changes.

    ``before``/``after``: an Analysis, a ``to_json_dict`` result, a :class:`Side` or a path.
    Returns {"summary": DataFrame, "kernels": DataFrame, "notes": [str]}."""
    b, a = as_side(before, "before"), as_side(after, "after")
    notes = []
    cb, nb = drop_outliers(b.cycles, outlier_factor)
    ca, na = drop_outliers(a.cycles, outlier_factor)
    for side, n in (("before", nb), ("after", na)):
        if n:
            notes.append(f"{side}: {n} cycle(s) longer than {outlier_factor:g}x the median left out (warm-up)")
    phases = list(dict.fromkeys(list(b.phase_names) + [p for p in a.phase_names if p not in b.phase_names]))
    if cb.empty or ca.empty:
        notes.append("no decode cycles on one side: only kernels are compared")
        summary = pd.DataFrame()
    else:
        tb, ta = time_column(cb), time_column(ca)
        if tb != ta:
            cb = cb.assign(duration_ns=cb[tb]) if tb != "duration_ns" else cb
            ca = ca.assign(duration_ns=ca[ta]) if ta != "duration_ns" else ca
            tb = "duration_ns"
            notes.append("the two sides measure cycle time differently: GPU window used for both")
        frames = []
        ranks_b, ranks_a = set(cb["rank"].unique()), set(ca["rank"].unique())
        common = sorted(ranks_b & ranks_a)
        if ranks_b != ranks_a:
            notes.append(f"ranks differ (before {sorted(map(int, ranks_b))}, after {sorted(map(int, ranks_a))}): "
                         f"per-rank rows for the common ranks {[int(r) for r in common]} only")
        for rank in ["all"] + common:
            r = None if rank == "all" else rank
            pb, pa = per_cycle(cb, phases, r), per_cycle(ca, phases, r)
            pb = pb.reindex(columns=pa.columns.union(pb.columns, sort=False))
            pa = pa.reindex(columns=pb.columns)
            t = bootstrap_delta(pb, pa, n_boot=n_boot, seed=seed, level=level, time_col=tb)
            if rank == "all" and paired(pb, pa):
                notes.append("both runs accepted the same tokens in every cycle (seeded workload): cycles are "
                             "compared pair by pair (paired bootstrap)")
            t.insert(0, "rank", str(rank))
            frames.append(t)
        summary = pd.concat(frames, ignore_index=True)
    kern = kernel_diff(b, a, top=top) if len(b.kernels) or len(a.kernels) else pd.DataFrame()
    return {"summary": summary, "kernels": kern, "notes": notes,
            "inputs": {"before": b.label, "after": a.label}, "n_boot": n_boot, "seed": seed, "level": level}


# ---------------------------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------------------------
def _fmt_value(fig: str, v: float) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    if fig.endswith("_ns"):
        return f"{v / 1e3:,.1f}"
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


def render_diff(d: dict, max_ranks: int = 8, top: int = 10) -> str:
    from analyze.render.text import clip, table

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
            out += table(["figure", "before", "after", "delta", "delta %", "95% CI of delta", ""], rows,
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
    for n in d["notes"]:
        out.append(clip(f"note: {n}", 120))
    return "\n".join(out).rstrip() + "\n"


def to_json(d: dict) -> dict:
    from analyze.render.outputs import records

    return {"inputs": d["inputs"], "n_boot": d["n_boot"], "seed": d["seed"], "level": d["level"],
            "summary": records(d["summary"]) if len(d["summary"]) else [],
            "kernels": records(d["kernels"]) if len(d["kernels"]) else [], "notes": d["notes"]}


def plot_diff(d: dict, path, top: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = d["summary"]
    s = s[(s["rank"] == "all") & s["figure"].str.endswith("_ns")] if len(s) else s
    k = d["kernels"]
    k = k[k["status"] == "changed"].head(top) if len(k) else k
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1, 1.3]})
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
    from analyze.safety import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="analyze-trace diff", description=__doc__.split("\n\n")[0] + " " +
                                "Each input: a report, a directory of per-rank reports, or a --json result.")
    p.add_argument("before")
    p.add_argument("after")
    p.add_argument("--json", metavar="PATH", help="write the comparison as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a figure (PNG/SVG/PDF by extension)")
    p.add_argument("--top", type=int, default=10, help="kernels listed (default 10)")
    p.add_argument("--boot", type=int, default=N_BOOT, help=f"bootstrap resamples (default {N_BOOT})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--keep-outliers", action="store_true",
                   help=f"keep cycles longer than {OUTLIER_FACTOR:g}x the median (warm-up)")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal table")
    return p


def main_diff(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    d = diff_results(load_side(args.before), load_side(args.after), n_boot=args.boot, seed=args.seed,
                     top=args.top, outlier_factor=0 if args.keep_outliers else OUTLIER_FACTOR)
    if args.json:
        from analyze.render.outputs import _plain
        from analyze.safety import atomic_write

        with atomic_write(args.json) as f:
            json.dump(to_json(d), f, indent=1, default=_plain)
            f.write("\n")
    if args.plot:
        plot_diff(d, args.plot, top=args.top)
    if not args.quiet:
        sys.stdout.write(render_diff(d, top=args.top))
    return 0
