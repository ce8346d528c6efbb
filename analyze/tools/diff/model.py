"""The comparison of two measurements: per rank (and ``all``: per cycle index, the mean over ranks)
and per figure, before, after, delta and a seeded bootstrap confidence interval of the delta;
kernels matched by a normalized name within a phase (changed, new, vanished)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyze.render.text import left_out_text
from analyze.timeline import cycles as cycles_mod
from analyze.tools.sides import Side, as_side, per_cycle, time_column

N_BOOT = 2000
LEVEL = 0.95


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
            if np.isnan(vb).any() or np.isnan(va).any():
                # cycles without this figure (a sampled live log's untimed cycles): each side resampled
                # over the cycles that have it (filling the others with the mean would narrow the CI)
                vb, va = vb[~np.isnan(vb)], va[~np.isnan(va)]
                own = np.random.default_rng([seed, len(rows)])
                bb = _boot_means(vb, own.integers(0, len(vb), (n_boot, len(vb))))
                ab = _boot_means(va, own.integers(0, len(va), (n_boot, len(va))))
            else:
                bb, ab = _boot_means(vb, ib), _boot_means(va, ia)
            b, a = float(vb.mean()), float(va.mean())
        lo, hi = np.percentile(ab - bb, q)
        delta = a - b
        rows.append(dict(figure=_figure_name(name, time_col), before=b, after=a, delta=delta,
                         delta_pct=100.0 * delta / b if b else np.nan, ci_lo=float(lo), ci_hi=float(hi),
                         significant=bool(lo > 0 or hi < 0), cycles_before=nb, cycles_after=na))
    return pd.DataFrame(rows)


def timed_carried(frame: pd.DataFrame, time_col: str) -> pd.DataFrame:
    """A sampled live log's per-cycle figures as the report and whatif take them: the figures its timed cycles
    alone carry (the phases, null in the others) x :func:`analyze.timeline.cycles.sampled_scale` (the timed
    cycles' split carried onto the mean period of every cycle: the timed ones pay the events); the ``timed`` flag
    dropped (no figure). Before 2026-12-07 diff compared the timed cycles' raw means (918 us of draft a cycle on
    the gated H200 log where the report says 842) and listed the flag as a figure ("timed 1.00 -> 0.06")."""
    if "timed" not in frame.columns:
        return frame
    timed = frame["timed"].astype(bool).to_numpy()
    out = frame.drop(columns="timed")
    # the figures some cycle lacks (the phases of untimed cycles), known only where every rank timed the cycle
    # (sides.per_cycle's flag): a cycle only some ranks timed (ranks numbering their cycles apart, a restarted
    # worker) has a mean over those ranks, which is no cycle's split: left out with the untimed
    only = [c for c in out.columns if c.endswith("_ns") and c != time_col and out[c].isna().any()]
    if only and not timed.all():
        out.loc[~timed, only] = np.nan
    k = cycles_mod.sampled_scale(out[time_col].to_numpy(dtype="float64", na_value=np.nan), timed)
    if k != 1.0 and only:
        out[only] = out[only].astype("float64") * k
    return out


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
                 keep_outliers: bool = False, level: float = LEVEL) -> dict:
    """Before/after/delta with bootstrap CIs, per rank (+ ``all``) and figure; kernel changes.

    ``before``/``after``: an Analysis, a ``to_json_dict`` result, a :class:`Side` or a path.
    Returns {"summary": DataFrame, "kernels": DataFrame, "notes": [str]}."""
    b, a = as_side(before, "before"), as_side(after, "after")
    notes = []
    cb, nb = cycles_mod.steady(b.cycles, keep_outliers, True), cycles_mod.left_out_counts(b.cycles, keep_outliers)
    ca, na = cycles_mod.steady(a.cycles, keep_outliers, True), cycles_mod.left_out_counts(a.cycles, keep_outliers)
    for side, n in (("before", nb), ("after", na)):
        if n:
            notes.append(f"{side}: {left_out_text(n)} left out")
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
            pb, pa = timed_carried(per_cycle(cb, phases, r), tb), timed_carried(per_cycle(ca, phases, r), tb)
            pb = pb.reindex(columns=pa.columns.union(pb.columns, sort=False))
            pa = pa.reindex(columns=pb.columns)
            t = bootstrap_delta(pb, pa, n_boot=n_boot, seed=seed, level=level, time_col=tb)
            if rank == "all" and paired(pb, pa):
                notes.append("both runs accepted the same tokens in every cycle (seeded workload): cycles are "
                             "compared pair by pair (paired bootstrap)")
            t.insert(0, "rank", str(rank))
            frames.append(t)
        summary = pd.concat(frames, ignore_index=True)
    live = [side for side, x in (("before", b), ("after", a)) if x.live]
    if live:
        notes.append(f"{' and '.join(live)}: a live timing log: kernel tables absent, no kernels compared; phase "
                     "times from CUDA events (the all-reduce inside the phases that ran it), periods from the host "
                     "clock")
        if len(live) == 1:
            # a phase's event time holds its Python where the stream was idle; nsys's is its kernels' GPU time
            notes.append("a live log against an nsys report: their phase times are not the same measure (a live "
                         "phase is the stream time between its entry and exit events, its Python included where "
                         "the stream was idle; nsys's is its kernels' GPU time): compare cycle time and tokens, "
                         "not phases (on real SGLang verify measured 7.6 ms live against 4.6 ms of kernels)")
    kern = kernel_diff(b, a, top=top) if len(b.kernels) or len(a.kernels) else pd.DataFrame()
    return {"summary": summary, "kernels": kern, "notes": notes,
            "inputs": {"before": b.label, "after": a.label}, "n_boot": n_boot, "seed": seed, "level": level}
