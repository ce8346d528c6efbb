"""A what-if prediction on the terminal, as JSON records and as a figure."""
from __future__ import annotations

import numpy as np

from analyze.tools.whatif import acceptance as acc_mod

def render_whatif(r: dict) -> str:
    from analyze.render.text import clip, clip_left, table

    out = ["specprof whatif: tokens/s per draft step count (EAGLE)", ""]
    rows = []
    for c in r["profiles"]:
        rows.append([clip_left(c.get("label") or "-", 44), c["steps"], c["cycles"], f"{c['requests']:.1f}",
                     f"{c['cycle_ns'] / 1e3:,.1f}", f"{c['draft_step_ns'] / 1e3:,.1f}",
                     "-" if np.isnan(c["tokens_per_cycle"]) else f"{c['tokens_per_cycle']:.2f}",
                     "-" if np.isnan(c["tokens_per_s"]) else f"{c['tokens_per_s']:,.0f}"])
    out.append("Profiles")
    out += table(["report", "steps", "cycles", "reqs", "cycle us", "step us", "tok/cycle", "tok/s"], rows)
    out.append("")
    a = r["acceptance"]
    boot = r.get("n_boot") != 0                # without resamples there are no intervals to show

    def ci(lo: str, hi: str) -> str:
        return f"[{lo}, {hi}]" if boot and "-" not in (lo, hi) else "-"

    def num(x: float) -> str:
        return "-" if x != x else f"{x:.3f}"            # a position no request reached: no rate, not 'nan'

    out.append("Acceptance per draft position (conditional rate P(L>=i | L>=i-1), 95% CI; survival P(L>=i))")
    out.append(_wrap("  from: " + acc_mod.METHOD_TEXT.get(r.get("acceptance_method"), str(r.get("acceptance_method")))))
    out += table(["position", "rate", "95% CI", "survival", "basis"],
                 [[int(x.position), num(x.rate), ci(num(x.rate_lo), num(x.rate_hi)), num(x.survival),
                   "" if x.observed else "extrapolated"] for x in a.itertuples(index=False)], "rrrrl")
    out.append("")
    p = r["predictions"]
    comps = [c for c in p.columns if c.endswith("_ns") and c not in ("cycle_ns", "round_gap_ns")]
    rounds = bool(r.get("rounds")) and "round_efficiency" in p.columns
    heads = ["steps", "cycle us", "accepted/req", "tok/cycle"] + (["round eff"] if rounds else []) \
        + ["tok/s", "95% CI", "speed-up"]
    has_meas = "measured_tokens_per_s" in p.columns
    if has_meas:
        heads += ["measured tok/s", "error"]
    rows = []
    for x in p.itertuples(index=False):
        row = [x.steps, f"{x.cycle_ns / 1e3:,.1f}", f"{x.accepted_per_request:.3f}", f"{x.tokens_per_cycle:.2f}"] \
            + ([f"{x.round_efficiency:.3f}"] if rounds else []) \
            + [f"{x.tokens_per_s:,.0f}", ci(f"{x.tokens_per_s_lo:,.0f}", f"{x.tokens_per_s_hi:,.0f}"), f"{x.speedup:.2f}x"]
        if has_meas:
            row += ["-" if np.isnan(x.measured_tokens_per_s) else f"{x.measured_tokens_per_s:,.0f}",
                    "-" if np.isnan(x.error_pct) else f"{x.error_pct:+.1f}%"]
        flag = "profiled" if x.profiled else ("extrapolated" if x.extrapolated else "")
        if getattr(x, "tokens_extrapolated", False):
            flag = (flag + ", " if flag else "") + "verified tokens beyond the profile's"
        rows.append(row + [flag])
    out.append("Prediction")
    out += table(heads + ["basis"], rows, "r" * len(heads) + "l")
    out.append("")
    sc = r.get("verify_scaling") or {}
    if sc.get("method") in ("fit", "given") and sc.get("components"):
        how = ("fitted over the profile's cycles" if sc["method"] == "fit" else
               f"given: --verify-scaling {sc.get('fraction', 0):g}")
        out.append(f"Time per cycle vs verified tokens n ({how}; observed n = {sc['tokens_min']:.0f}..{sc['tokens_max']:.0f})")
        def per_token(line) -> str:
            if line.get("source") == "refused":   # a falling (or negative) line: the mean kept, no growth
                return f"refused ({line.get('fitted_per_token_ns', 0.0) / 1e3:,.2f} fitted; mean kept)"
            return f"{line['per_token_ns'] / 1e3:,.2f}"
        out += table(["component", "at n = 0 us", "per token us", "95% CI"],
                     [[name, f"{line['intercept_ns'] / 1e3:,.1f}", per_token(line),
                       "-" if line.get("source") == "refused" else
                       ci(f"{line['per_token_lo_ns'] / 1e3:,.2f}", f"{line['per_token_hi_ns'] / 1e3:,.2f}")]
                      for name, line in sc["components"].items()])
        out.append("")
    out.append("Predicted cycle time by component (us per cycle)")
    out += table(["steps"] + [c[:-3] for c in comps] + ["cycle"],
                 [[x.steps] + [f"{getattr(x, c) / 1e3:,.1f}" for c in comps] + [f"{x.cycle_ns / 1e3:,.1f}"]
                  for x in p.itertuples(index=False)])
    b, base = r["best"], r["baseline"]
    tps_at = p.set_index("steps")["tokens_per_s"]
    cal = r.get("calibration")
    if cal:
        from analyze.tools.whatif.model import lengthened_note

        out.append("")
        src = cal.get("source") or {}
        where = (f" from the live log {src.get('path')} ({src.get('cycles')} steady cycles of rank {src.get('rank')})"
                 if src.get("kind") == "live_log" else
                 f" from SGLang's log {src.get('path')} ({src.get('lines')} 'Decode batch' lines at {src.get('batch')} "
                 "running requests" + (f"; {src['unreadable_lines']} decode line(s) whose fields do not read left out"
                                       if src.get("unreadable_lines") else "") + ")"
                 if src.get("kind") == "sglang_log" else
                 f" from the profile's own clock: {src.get('cycles')} steady cycles at batch {src.get('batch')} before "
                 "the capture window" if src.get("kind") == "profile_clock" else "")
        steady = " of steady cycles (the rounds' tail is the model's)" if cal.get("steady") else ""
        for one in cal.get("per_profile") or [cal]:
            in_rounds = (f"; {tps_at[one['steps']]:,.0f} tokens/s in the rounds modelled (column round eff)"
                         if cal.get("steady") and r.get("rounds") and one["steps"] in tps_at.index else "")
            out.append(_wrap(f"Calibrated to {one['tokens_per_s']:,.0f} tokens/s{steady}{in_rounds} (unprofiled{where}) at {one['steps']} steps: "
                             f"profiled cycle {one['profiled_cycle_ns'] / 1e3:,.1f} us -> "
                             f"{(one['profiled_cycle_ns'] - one['shift_ns']) / 1e3:,.1f} us (overhead "
                             f"{-one['shift_ns'] / 1e3:+,.1f} us per cycle)"
                             + (": LONGER than profiled, suspect (note below)"
                                if lengthened_note(one["profiled_cycle_ns"], one["profiled_cycle_ns"] - one["shift_ns"],
                                                   one["steps"]) else "")))
    out.append("")
    through = bool(b.get("speedup_through_estimate"))    # a given baseline, the profile not calibrated
    out.append(f"Best: {b['steps']} draft step{'' if b['steps'] == 1 else 's'}, {b['tokens_per_s']:,.0f} tokens/s, {b['speedup']:.2f}x over the "
               f"{'ESTIMATED ' if base['source'] == 'estimated' else ''}baseline ({base['tokens_per_s']:,.0f} tokens/s"
               + ("; the profile's own speed-up" if through else "") + ")"
               + (" [extrapolated]" if b["extrapolated"] else ""))
    top = b["top_steps"]
    if top != b["steps"]:
        from analyze.tools.whatif.model import BEST_TOLERANCE

        out.append(_wrap(f"  ({b['steps']} is the fewest steps within {100 * BEST_TOLERANCE:.0f}% of the highest "
                         f"prediction, {top} steps' {tps_at[top]:,.0f} tokens/s: a smaller gain is below what the model "
                         "resolves, and each step adds draft work)"))
    if b.get("verdict") == "break_even":
        from analyze.tools.whatif.model import BREAK_EVEN

        out.append(_wrap(f"Break-even: the highest prediction, {b['top_speedup']:.2f}x, is within "
                         f"{100 * BREAK_EVEN:.0f}% of no speculation, inside the "
                         "spread of repeated unprofiled runs of one engine (engines of one configuration differ by "
                         "more): speculation neither clearly pays nor clearly costs here; decide on what else it "
                         "costs (memory, a drafter to serve), or measure both configurations without the profiler."))
    elif b.get("verdict") == "pays":
        out.append(_wrap(f"Speculation pays: {b['speedup']:.2f}x over no speculation at {b['steps']} draft "
                         f"step{'' if b['steps'] == 1 else 's'}."))
    if b.get("verdict") == "does_not_pay":
        estimated = base["source"] == "estimated"
        out.append(_wrap(f"Speculation does not pay here: no speculation ({base['tokens_per_s']:,.0f} tokens/s, "
                         f"{base['source']}) is faster than every step count searched ({_steps_text(p['steps'])}): run "
                         "without --speculative-algorithm"
                         + (", once a baseline measured without the profiler (--baseline-tps) confirms it." if estimated
                            else ", once tokens/s measured without the profiler at the profiled step count "
                            "(--calibrate-tps) confirm it." if through else ".")))
    if b.get("few_cycles"):
        from analyze.tools.whatif.model import MIN_CYCLES

        out.append(_wrap(f"Few cycles: this rests on {b['cycles']} decode cycle{'' if b['cycles'] == 1 else 's'} "
                         f"(fewer than {MIN_CYCLES}): acceptance and costs from so few are not a basis for a decision; "
                         "profile longer, or pick a batch size the profile holds more of (--per-batch lists them)."))
    if b.get("verdict_uncertain") and b.get("baseline_from_live_log"):
        from analyze.tools.whatif.model import LIVE_BASELINE_ERROR

        out.append(_wrap("Uncertain verdict: the baseline is estimated from a live timing log (no kernel tables: a "
                         "cycle without draft and draft_extend, verify's event time holding its Python), "
                         f"{LIVE_BASELINE_ERROR}: measure unprofiled tokens/s without speculation (--baseline-tps) "
                         "before turning speculation on or off."))
    elif b.get("verdict_uncertain") and b.get("rough_estimate"):
        out.append(_wrap("Uncertain verdict: the plain step is estimated roughly (no shim ranges: one cycle without the "
                         "draft phases), an estimate no real sweep has bounded" + (" (the given baseline is of the "
                         "unprofiled clock, the predictions of the profiled one: the profile is not calibrated)"
                         if base["source"] == "given" else "")
                         + ": measure unprofiled tokens/s at the profiled step count (--calibrate-tps)"
                         + ("" if base["source"] == "given" else " and without speculation (--baseline-tps)")
                         + " before turning speculation on or off."))
    elif b.get("verdict_uncertain") and b.get("speedup_through_estimate"):
        from analyze.tools.whatif.model import PROFILE_ALONE_RATIO

        lo, hi = PROFILE_ALONE_RATIO
        out.append(_wrap(f"Uncertain verdict: the profile is not calibrated, so its speed-up is taken against its own "
                         f"estimated plain step (the given {base['tokens_per_s']:,.0f} tokens/s and the profile are of two "
                         f"clocks); such a speed-up was {lo:.2f}x to {hi:.2f}x of the measured one on real SGLang sweeps, so "
                         f"{b['speedup']:.2f}x can be either side of 1: measure unprofiled tokens/s at the profiled step "
                         "count (--calibrate-tps) before turning speculation on or off."))
    elif b.get("verdict_uncertain"):
        from analyze.tools.whatif.model import PROFILE_ALONE_RATIO

        lo, hi = PROFILE_ALONE_RATIO
        calibrated = r.get("calibration") is not None
        out.append(_wrap(f"Uncertain verdict: against an estimated baseline ({'calibrated' if calibrated else 'not calibrated'}) "
                         f"the speed-up was {lo:.2f}x to {hi:.2f}x of the measured one on real SGLang sweeps, so "
                         f"{b['speedup']:.2f}x can be either side of 1: measure unprofiled tokens/s without speculation "
                         "(--baseline-tps)" + ("" if calibrated else " and at the profiled step count (--calibrate-tps)")
                         + " before turning speculation on or off" + ("" if calibrated else " (or profile with "
                         "profile-trace --delay or --capture cudaprofilerapi: the profile then carries its own "
                         "unprofiled clock)") + "."))
    out.append("")
    out.append("Assumptions")
    for s in r["assumptions"]:
        out.append(clip(f"- {s}", 120) if len(s) < 118 else _wrap(f"- {s}"))
    for n in r["notes"]:
        out.append(_wrap(f"note: {n}"))
    return "\n".join(out).rstrip() + "\n"


def _steps_text(steps) -> str:
    """``1..6`` for consecutive step counts, else ``1, 3, 5``."""
    s = sorted(int(x) for x in steps)
    return f"{s[0]}..{s[-1]}" if len(s) > 2 and s == list(range(s[0], s[-1] + 1)) else ", ".join(map(str, s))


def _wrap(text: str, width: int = 120) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="  "))


def _left_out(table, wrap) -> list[str]:
    """The lines of the batch sizes --per-batch did not model, and of the figures given for them."""
    from analyze.tools.whatif.per_batch import MIN_CYCLES

    out = []
    few = table.attrs.get("not_modelled") or {}
    if few:
        out += wrap(f"Not modelled (fewer than {MIN_CYCLES} decode cycles each): "
                    + ", ".join(f"batch {b} ({n})" for b, n in sorted(few.items()))
                    + ". SGLang routes such a batch to the config's largest key at or below its CUDA-graph-padded "
                    "size.")
    few_timed = table.attrs.get("few_timed") or {}
    if few_timed:
        out += wrap(f"Not modelled (fewer than {MIN_CYCLES} cycles timed with CUDA events: the log times one cycle "
                    "in N): " + ", ".join(f"batch {b} ({n} cycles, {t} timed)" for b, (n, t) in sorted(few_timed.items()))
                    + ".")
    unused = table.attrs.get("unused_figures") or {}

    def why(b):
        if b in few:
            return f"{few[b]} decode cycles, not modelled"
        if b in few_timed:
            return f"{few_timed[b][0]} cycles, {few_timed[b][1]} timed, not modelled"
        return "no decode cycle of that batch size"
    if unused:
        out += wrap("Given but not used: " + "; ".join(f"{' and '.join(flags)} at batch {b} ({why(b)})"
                                                       for b, flags in sorted(unused.items())) + ".")
    return out


def render_per_batch(table, config_path=None) -> str:
    from analyze.render.text import table as text_table
    from analyze.render.text import terminal_width
    from analyze.render.text import wrap as wrap_to
    from analyze.tools.whatif.per_batch import MIN_CYCLES, differs, not_paying

    def wrap(text):
        return wrap_to(text, terminal_width())

    out = ["specprof whatif: the best draft step count per batch size (EAGLE)", ""]
    if table.empty:
        return "\n".join(out + [f"no batch size with {MIN_CYCLES} decode cycles or more in the profile(s)"]
                         + _left_out(table, wrap) + [""])
    ci = "tokens_per_s_best_lo" in table.columns and table["tokens_per_s_best_lo"].notna().any()
    rows = [[r.batch, r.cycles, r.profiled_steps, r.best_steps, f"{r.tokens_per_s_best:,.0f}"]
            + ([f"[{r.tokens_per_s_best_lo:,.0f}, {r.tokens_per_s_best_hi:,.0f}]"
                if np.isfinite(r.tokens_per_s_best_lo) else "-"] if ci else [])
            + [f"{r.tokens_per_s_baseline:,.0f}", r.baseline_source, f"{r.speedup:.2f}x",
               ("off" if r.best_or_off == 0 else str(r.best_or_off))
               + ("?" if r.verdict_uncertain else "~" if getattr(r, "verdict", "") == "break_even" else ""),
               ("extrapolated " if r.best_extrapolated else "") + ("calibrated" if r.calibrated else "")]
            for r in table.itertuples()]
    out += text_table(["batch", "cycles", "profiled", "best steps", "tok/s at best"] + (["95% CI"] if ci else [])
                      + ["tok/s no spec", "baseline", "speed-up", "use", "basis"], rows)
    out.append("")
    clock = table.attrs.get("clock_calibrated") or {}
    if clock:
        out += wrap("'calibrated' from the profile's own clock (the decode cycles before its capture window, nsys "
                    "attached, not collecting): " + ", ".join(f"batch {b} ({n} steady cycles)" for b, n in
                                                             sorted(clock.items())) + ".")
    out += _left_out(table, wrap)
    if differs(table):
        out += wrap("The best step count differs between batch sizes: SGLang can switch by batch size "
                    "(--speculative-adaptive --speculative-adaptive-config FILE"
                    + ("; write FILE with --adaptive-config)." if not config_path else ")."))
    elif len(table) >= 2 and table["best_steps"].nunique() == 1 and (table["best_or_off"] > 0).any():
        k = int(table["best_steps"].iloc[0])
        out += wrap(f"One step count is best at every batch size measured: --speculative-num-steps {k} "
                    f"(--speculative-num-draft-tokens {k + 1}) does what an adaptive config would, without it.")
    off = not_paying(table)          # where the verdict is not uncertain ('?': said below)
    off_estimated = bool(off) and bool((table.loc[table["batch"].isin(off), "baseline_source"] == "estimated").any())
    if off and len(off) == len(table):
        out += wrap("No step count beats no speculation at any batch size modelled: run without "
                    "--speculative-algorithm (no adaptive config: its 0 steps still verifies)"
                    + (", once the estimated baselines are measured (below)." if off_estimated else "."))
    elif off:
        out += wrap("No step count beats no speculation at batch " + ", ".join(map(str, off)) + ": SGLang cannot turn "
                    "speculation off by batch size (adaptive 0 steps still verifies one token and runs the draft "
                    "extend, slower than any step count), so a config keeps the best step count there; a server that "
                    "mostly runs at those batch sizes is faster without --speculative-algorithm.")
    if "verdict" in table and (table["verdict"] == "break_even").any():
        from analyze.tools.whatif.model import BREAK_EVEN

        out += wrap(f"'~': break-even: within {100 * BREAK_EVEN:.0f}% of no speculation at batch "
                    + ", ".join(str(int(b)) for b in table.loc[table["verdict"] == "break_even", "batch"])
                    + ", inside the spread of repeated unprofiled runs: neither clearly pays nor clearly costs there.")
    if table["verdict_uncertain"].any():
        from analyze.tools.whatif.model import LIVE_BASELINE_ERROR, PROFILE_ALONE_RATIO

        lo, hi = PROFILE_ALONE_RATIO
        unsure_rows = table[table["verdict_uncertain"].astype(bool)]
        live_rows = unsure_rows["baseline_from_live_log"].astype(bool)
        need_tps = not (unsure_rows["calibrated"].astype(bool) | live_rows).all()
        need_base = bool((unsure_rows["baseline_source"] == "estimated").any())
        what = " and ".join(f for f, need in (("--batch-tps", need_tps), ("--batch-baseline-tps", need_base)) if need)
        through = unsure_rows["speedup_through_estimate"].astype(bool).any() if "speedup_through_estimate" in unsure_rows \
            else False
        if live_rows.all():
            out += wrap("'?': an uncertain verdict: the baselines are estimated from a live timing log (a cycle "
                        f"without draft and draft_extend; {LIVE_BASELINE_ERROR}): measure --batch-baseline-tps "
                        "before turning speculation on or off there.")
        else:
            out += wrap(f"'?': an uncertain verdict: against an estimated baseline the speed-up was {lo:.2f}x to "
                        f"{hi:.2f}x of the measured one on real SGLang sweeps"
                        + (" (a baseline given for a batch size whose profile is not calibrated is of another clock: "
                           "the speed-up there is the profile's own over its estimated plain step)" if through else "")
                        + ("; at batch " + ", ".join(str(int(x)) for x in unsure_rows.loc[unsure_rows["rough_estimate"]
                                                                                        .astype(bool), "batch"])
                           + " the plain step is estimated roughly (no shim ranges), which no sweep has bounded"
                           if "rough_estimate" in unsure_rows and unsure_rows["rough_estimate"].astype(bool).any()
                           else "")
                        + f", so these can be either side of 1: measure {what} before turning speculation on or off "
                        "there.")
    est = table["baseline_source"] == "estimated"
    if est.any() and not (est & table["baseline_from_live_log"].astype(bool)).all():
        out += wrap("Baselines marked 'estimated' come from the speculative profile (a plain step's GPU and host "
                    "time): measure them (--batch-baseline-tps M=Y,...) before turning speculation off for a batch size.")
    if config_path:
        out += wrap(f"wrote: {config_path} (SGLang --speculative-adaptive-config; candidate_steps = the best step count)")
    return "\n".join(out) + "\n"


def to_json(r: dict) -> dict:
    from analyze.render.outputs import records

    return {"profiles": r["profiles"], "acceptance": records(r["acceptance"]),
            "acceptance_method": r.get("acceptance_method"), "calibration": r.get("calibration"),
            "predictions": records(r["predictions"]), "baseline": r["baseline"], "best": r["best"],
            "assumptions": r["assumptions"], "notes": r["notes"], "verify_scaling": r.get("verify_scaling"),
            "rounds": r.get("rounds")}


def plot_whatif(r: dict, path, title: str | None = None) -> None:
    from pathlib import Path

    from matplotlib.figure import Figure   # no pyplot: nothing registered with a GUI backend

    from analyze.atomic import atomic_path

    p = r["predictions"]
    fig = Figure(figsize=(12, 5.4))
    axes = fig.subplots(1, 2)
    ax = axes[0]
    s = p["steps"].to_numpy()
    if r.get("n_boot", 1):      # --boot 0: point estimates, the bounds equal them: no band to label
        ax.fill_between(s, p["tokens_per_s_lo"], p["tokens_per_s_hi"], color="tab:blue", alpha=0.2, label="95% CI")
    inside = ~p["extrapolated"].to_numpy()
    ax.plot(s, p["tokens_per_s"], "o-", color="tab:blue", label="predicted")
    if (~inside).any():
        ax.plot(s[~inside], p["tokens_per_s"][~inside], "o", mfc="white", color="tab:blue",
                label="predicted (extrapolated)")
    prof = p[p["profiled"]]
    for c in r["profiles"]:
        if not np.isnan(c["tokens_per_s"]):
            ax.plot([c["steps"]], [c["tokens_per_s"]], "s", color="tab:orange", ms=9, mfc="none",
                    label="profiled (under nsys)" if c is r["profiles"][0] else None)
    if "measured_tokens_per_s" in p.columns and p["measured_tokens_per_s"].notna().any():
        ax.plot(s, p["measured_tokens_per_s"], "x--", color="k", label="measured (no profiler)")
    base = r["baseline"]
    src = {"given": "given, no profiler", "measured": "measured under the profiler"}.get(base["source"], base["source"])
    ax.axhline(base["tokens_per_s"], color="tab:gray", ls=":", label=f"no speculation ({src})")
    mb = r.get("measured_baseline_tps")
    if mb and not (base["source"] == "given" and abs(mb - base["tokens_per_s"]) < 0.5):
        ax.axhline(mb, color="k", ls=":", lw=1, label="no speculation, measured (no profiler)")
    b = r["best"]
    ax.annotate(f"best: {b['steps']} steps", (b["steps"], b["tokens_per_s"]), textcoords="offset points",
                xytext=(0, 10), ha="center")
    ax.set_xlabel("draft steps")
    ax.set_ylabel("tokens / s")
    ax.set_xticks(s)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)  # below: never hides a point
    cal = r.get("calibration")
    cal_at = ", ".join(str(x["steps"]) for x in (cal.get("per_profile") or [cal])) if cal else ""
    ax.set_title(title or ("tokens/s vs draft steps" + (f" (calibrated at {cal_at} steps)" if cal else "")))
    del prof
    ax = axes[1]
    comps = [c for c in p.columns if c.endswith("_ns") and c not in ("cycle_ns", "round_gap_ns")]
    from analyze.render.plots import phase_colors   # the phase palette of every other figure

    colors = phase_colors([c[:-3] for c in comps])
    colors.setdefault("overhead", colors.get("other", "#8C8C8C"))
    bottom = np.zeros(len(p))
    for c in comps:
        v = p[c].to_numpy() / 1e3
        ax.bar(s, v, bottom=bottom, label=c[:-3], color=colors.get(c[:-3]))
        bottom += v
    ax.set_xlabel("draft steps")
    ax.set_ylabel("predicted cycle time (us)")
    ax.set_xticks(s)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)  # below: never hides a bar
    ax.set_title("cycle time by component")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
