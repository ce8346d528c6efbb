"""``advise``: from the numbers of one analysis to ranked, quantified findings (docs/advise.md).

Every rule reads the same steady decode cycles (analyze.timeline.cycles.steady: the report's,
whatif's and diff's), measures one component per cycle and
returns a :class:`analyze.findings.Finding` when the component is large enough to matter, with the
figures it used as ``evidence``; every rule also leaves a :class:`analyze.findings.RuleCheck`
saying what it measured when it found nothing. Findings are ranked by ``saving_ns`` (cycle time per
cycle), each with its ``ceiling_ns`` (Amdahl: the cycle if that component were free, or at its best
observed value). The rules:

* ``verify_dominated``: verify's exclusive GPU time >= 50% of the cycle; saving = the cycle time per
  token that whatif's recommended step count saves (cycle x (1 - tok/s at k / tok/s at best));
  ceiling = verify. Not applicable to a live log of an eager run (:func:`eager_live`): its events time
  the phase's wall span, the host's launches included, not verify's GPU time (as ``draft_extend``).
* ``allreduce`` (one per phase the all-reduces run in): all-reduce transfer time (wait excluded:
  that is the late rank's) >= 5% of the cycle; kind, algorithm and protocol from the kernel names,
  message sizes from NCCL's NVTX payloads when nsys exported them; saving = ceiling = the transfer.
* ``host_bound``: GPU idle within the cycle period (period - busy) >= 30% of the cycle; launch gaps,
  CUDA graphs on or off, whether host work of the next cycle overlaps this cycle's GPU work;
  saving = ceiling = the idle time.
* ``straggler``: a rank that arrives last at the most significantly skewed all-reduces
  (timeline.collectives.stragglers), the phase before them and how much longer it is on that rank
  than on the median rank; saving = ceiling = the time the others waited for it per cycle.
* ``draft_extend``: draft_extend >= 10% of the cycle; saving = what it costs beyond one draft step
  (the same draft model, one forward); ceiling = draft_extend.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analyze import findings as F
from analyze import opstore
from analyze import views
from analyze.views.decode import replay_share
from analyze.codes import factorize_objects
from analyze.timeline import collectives as coll_mod
from analyze.timeline import cycles as cycles_mod
from analyze.timeline.launch_gaps import LAUNCH_GAP_NS, cycle_of_arrays, stats_of_store
from analyze.tools import sides
from analyze.tools.advise import kinds as K
from analyze.tools.advise import settings as S

VERIFY_SHARE = 0.50
ALLREDUCE_SHARE = 0.05
IDLE_SHARE = 0.30
DRAFT_EXTEND_SHARE = 0.10
# LAUNCH_GAP_NS (timeline/launch_gaps.py): GPU idle between consecutive ops of a cycle longer than this
MIN_LATE_SHARE = 0.10        # a straggler finding needs the rank late at >= 10% of the collectives (and twice)
WHATIF_STEPS = range(1, 11)


# ---------------------------------------------------------------------------------------------
# what every rule reads
# ---------------------------------------------------------------------------------------------
@dataclass
class Context:
    analysis: object
    cycles: pd.DataFrame               # steady (rank, cycle) rows
    per_cycle: pd.DataFrame            # one row per steady cycle index: mean over ranks
    time_col: str
    cycle_ns: float
    warmup_cycles: int
    collectives: pd.DataFrame          # collective rows inside steady cycles, column ``cycle``
    whatif: dict | None = None
    whatif_error: str | None = None
    whatif_asked: bool = True          # False: --no-whatif (the rules that cite it say so)
    message_sizes: pd.DataFrame | None = None    # per sized NCCL range: phase, message_bytes
    message_info: dict = field(default_factory=dict)
    gaps: dict | None = None                     # launch_gaps, once computed
    live: bool = False                           # a live timing log (run/live.py): no kernels, no NVTX ranges
    cycles_batch: int | None = None              # the cycles are of this batch size alone (--batch M)
    eager_spans: bool = False                    # a live log of an eager run (eager_live): phase times are wall spans

    @property
    def ranks(self) -> int:
        return int(self.cycles["rank"].nunique()) if len(self.cycles) else 0

    @property
    def n_cycles(self) -> int:
        return int(len(self.per_cycle))

    def mean(self, col: str) -> float:
        """Mean per cycle; 0 where the column is absent or holds no value (a live log's all-reduce at TP 1)."""
        if col not in self.per_cycle.columns or not len(self.per_cycle):
            return 0.0
        m = pd.to_numeric(self.per_cycle[col], errors="coerce").astype(float).mean()
        return float(m) if m == m else 0.0


def steady_cycles(cycles: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The steady cycles (:func:`analyze.timeline.cycles.steady`) and how many cycle numbers were
    left out (warm-up, lost, outlier)."""
    if cycles.empty:
        return cycles, 0
    return cycles_mod.steady(cycles, every_rank=True), sum(cycles_mod.left_out_counts(cycles).values())


def _cycle_of(rows: pd.DataFrame, cycles: pd.DataFrame, start_col: str = "start_ns") -> np.ndarray:
    """Per row (rank, start): the steady cycle whose GPU window [start_ns, end_ns] holds the start, else -1."""
    if rows.empty:
        return np.full(0, -1, dtype="int64")
    return cycle_of_arrays(rows["rank"].to_numpy(), rows[start_col].to_numpy(dtype="int64"), cycles)


def whatif_summary(analysis, steps=WHATIF_STEPS, n_boot: int = 0, baseline_tps: float | None = None,
                   calibrate_tps: float | None = None, batch: int | None = None, request_tokens="auto",
                   calibration_source: dict | None = None) -> dict:
    """The whatif prediction advise cites (point estimates unless ``n_boot``); ``baseline_tps`` /
    ``calibrate_tps``: the no-speculation and the profiled configuration's tokens/s measured without
    the profiler (whatif's --baseline-tps / --calibrate-tps); ``request_tokens``: whatif's
    --request-tokens (rounds of N-token requests, 'steady' or 'auto')."""
    from analyze.tools.whatif import model as W
    from analyze.tools.whatif import per_batch as PB

    side = whatif_side(analysis)
    counts = PB.batch_counts([side])
    visited, all_cycles = PB.visited_of(counts), PB.request_cycles(counts)
    modelled = PB.modelled_batch(visited, batch, baseline_tps, calibrate_tps, all_cycles)
    per_batch_cal, clock_used = None, {}
    if calibrate_tps is None and side.clock:    # no figure given: the profile's own clock, at the batch size modelled
        from analyze.tools.whatif.command import clock_calibration, clock_calibrations

        at = modelled if modelled is not None else int(visited.index[0]) if len(visited) == 1 else None
        _, x, src, _ = clock_calibration([side], None, None, at) if at is not None else (None, None, None, None)
        if x is not None:
            calibrate_tps, calibration_source, modelled = x, src, at
            clock_used = {"clock_cycles": int(src["cycles"]), "clock_batch": int(at)}
    if side.clock and len(visited) >= 2:        # the other batch sizes from the clock, a figure given or not
        from analyze.tools.whatif.command import clock_calibrations

        per_batch_cal = clock_calibrations([side], None, [int(m) for m in visited.index])
    kw = dict(n_boot=n_boot, baseline_tps=baseline_tps, calibrate_tps=calibrate_tps, batch=modelled,
              calibration_source=calibration_source,
              request_tokens=request_tokens)
    r = W.whatif(side, steps, **kw)
    prof = r["profiles"][0]
    k = prof["steps"]
    if k not in set(steps):                   # profiled beyond the grid: predict it too
        r = W.whatif(side, sorted(set(steps) | {k}), profiled_steps=k, **kw)
        prof = r["profiles"][0]
    p = r["predictions"].set_index("steps")
    best = r["best"]["steps"]
    base = r["baseline"]
    return {"profiled_steps": int(k), "best_steps": int(best),
            "tokens_per_s_baseline": float(base["tokens_per_s"]), "baseline_source": base["source"],
            "baseline_method": base["method"], "tokens_per_cycle_profiled": float(p.loc[k, "tokens_per_cycle"]),
            "accepted_per_request_profiled": float(p.loc[k, "accepted_per_request"]),
            "tokens_per_s_profiled": float(p.loc[k, "tokens_per_s"]), "tokens_per_s_best": float(p.loc[best, "tokens_per_s"]),
            "cycle_ns_best": float(p.loc[best, "cycle_ns"]), "draft_step_ns": float(prof["draft_step_ns"]),
            "requests": float(prof["requests"]), "verified_tokens": float(prof["verified_tokens"]),
            "verify_scaling": r["verify_scaling"], "acceptance_method": r["acceptance_method"],
            # what the tokens/s is of: None (steady state) or the rounds of requests started together
            "rounds": r["rounds"],
            "best_extrapolated": bool(r["best"]["extrapolated"]),
            "verdict_uncertain": bool(r["best"]["verdict_uncertain"]),
            # pays / does_not_pay / break_even (within whatif.model.BREAK_EVEN of 1) / uncertain
            "verdict": r["best"]["verdict"],
            "baseline_from_live_log": bool(r["best"].get("baseline_from_live_log")),
            # a given baseline against an uncalibrated profile: the speed-up is the profile's own (whatif.baseline_clock)
            "speedup_through_estimate": bool(r["best"].get("speedup_through_estimate")),
            "rough_estimate": bool(r["best"].get("rough_estimate")),
            # fewer decode cycles than whatif.model.MIN_CYCLES at the batch size modelled: no basis for a decision
            "cycles": int(r["best"]["cycles"]), "few_cycles": bool(r["best"].get("few_cycles")),
            # the best at the top of the searched step counts: the optimum may lie beyond it
            "best_at_edge": int(best) == max(steps) and int(best) != int(k), "steps_searched": [min(steps), max(steps)],
            # the batch size asked for (--batch M) among them where its cycles are enough, visited or not
            "per_batch": _per_batch(side, steps, _with_asked(visited, counts, batch), batch, baseline_tps,
                                    calibrate_tps, calibration_source, per_batch_cal),
            # the batch size modelled: given (--batch), the one most cycles ran where the load visited several
            # and no whole-run figure was given, else None (every cycle, the batch sizes pooled)
            "batch": modelled, "batch_source": "given" if batch is not None else "most cycles" if modelled else None,
            "batches_visited": len(visited), "ramp_share": PB.ramp_share(visited, all_cycles),
            "batches_seen": int((counts.index >= 1).sum()),
            # only where the profile's own clock calibrated it (nvtx_annotate/clock.py): its steady cycles, batch size
            **clock_used, **_calibration_said(r.get("calibration"))}


def _few_said(w: dict) -> str:
    """Why a whatif summary resting on too few decode cycles decides nothing (whatif.model.MIN_CYCLES)."""
    from analyze.tools.whatif.model import MIN_CYCLES

    at = f" at batch {w['batch']}" if w.get("batch") is not None else ""
    return (f"prediction rests on {w['cycles']} decode cycle{'' if w['cycles'] == 1 else 's'}{at}, fewer than "
            f"{MIN_CYCLES}: acceptance and costs from so few are no basis for a decision (profile longer, or a batch "
            "size the profile holds more of: `analyze-trace whatif REPORT --per-batch`)")


def _with_asked(visited: pd.Series, counts: pd.Series, batch: int | None) -> pd.Series:
    """The visited batch sizes (:func:`analyze.timeline.cycles.visited_of`) and ``batch`` (--batch M) where the
    profile holds enough steady cycles of it (MIN_CYCLES) but under the visited share: a size the user asks about
    is one the per-batch figures hold."""
    from analyze.timeline.cycles import MIN_CYCLES

    if batch is None or batch in visited.index or int(counts.get(batch, 0)) < MIN_CYCLES:
        return visited
    return pd.concat([visited, counts.loc[[batch]]])


def _calibration_said(cal: dict | None) -> dict:
    """Where whatif was calibrated at one profiled step count (an unprofiled figure given, or the profile's own
    clock): the profiled cycle it calibrated and the profiler's share of it, per cycle (``calibration_shift_ns``: the
    profiled cycle less the unprofiled one), for the rules that read the cycle's idle time. {} otherwise (the
    summary's keys as before)."""
    if not cal or cal.get("per_profile") or cal.get("shift_ns") is None:
        return {}
    return {"calibration_profiled_cycle_ns": float(cal["profiled_cycle_ns"]),
            "calibration_shift_ns": float(cal["shift_ns"])}


def whatif_side(analysis) -> sides.Side:
    """The cycles, ranges and ops whatif reads of ``analysis`` (not sides.as_side: its per-cycle kernel table
    is not needed); a live log's model is whatif's for it (not the kernel-table one)."""
    from analyze.run.live import is_live

    return sides.Side("", analysis.cycles, analysis.kernels, list(analysis.phase_names), analysis.ranges,
                      sides.whatif_ops(analysis), spec_config=sides.spec_config_of(getattr(analysis, "ranks", None)),
                      live=is_live(analysis), **sides.clock_of(getattr(analysis, "ranks", None)))


def _batch_said(w: dict) -> str:
    """The words a whatif-based finding adds when advise chose the batch size it models, and when the profile's own
    clock calibrated it."""
    clock = (f" Calibrated from the profile's own clock: {w['clock_cycles']} steady decode cycles at batch "
             f"{w['clock_batch']} that ran before nsys's capture window opened." if w and w.get("clock_cycles") else "")
    if not w or w.get("batch_source") != "most cycles":
        return clock
    if w["batches_visited"] < 2:
        return clock + (f" These figures are of batch {w['batch']}, the batch size the load ran (the "
                        f"{w['ramp_share']:.0%} of its decode cycles at other batch sizes, its rounds' ramps, left out; "
                        "`--batch M` for another).")
    return clock + (f" These figures are of batch {w['batch']}, the batch size most decode cycles ran of the "
            f"{w['batches_visited']} the load visited (`--batch M` for another; `analyze-trace whatif REPORT "
            "--per-batch` for each).")


def _rounds_evidence(w: dict) -> dict:
    """What whatif's tokens/s are of, as evidence: ``tokens_per_s_of`` "steady state" or "rounds", and
    the rounds' request tokens (whatif.rounds: a round ends with its slowest request)."""
    r = w.get("rounds")
    if not r:
        return {"tokens_per_s_of": "steady state"}
    return {"tokens_per_s_of": "rounds", "round_request_tokens": list(r["request_tokens"]),
            "rounds_source": r.get("source")}


ADVISE_BATCH_SIZES = 6
"""advise models at most this many batch sizes (those with the most cycles): a bound on its work."""


def _per_batch(side, steps, visited: pd.Series, batch=None, baseline_tps=None,
               calibrate_tps=None, calibration_source=None, clock=None) -> list[dict] | None:
    """whatif's best step count per batch size (point estimates) where the profile's load visits two
    batch sizes or more (each with enough cycles and a share of them); else None. The baselines are
    estimated but at ``batch``, where the unprofiled figures given for it (``baseline_tps``,
    ``calibrate_tps``) are used as whatif --per-batch uses --batch-baseline-tps / --batch-tps; ``clock``:
    ({batch: tokens/s}, {batch: source}) from the profile's own clock, each size its own where no figure is given."""
    from analyze.tools.whatif import per_batch as PB
    from analyze.tools.whatif.command import joined_calibrations
    from analyze.render.outputs import records

    if len(visited) < 2:
        return None
    try:
        given = batch is not None and batch in visited.index
        mine = given and calibrate_tps      # the figure given for its batch size; the clock's for the others
        cal, sources = joined_calibrations(clock, {batch: calibrate_tps} if mine else None,
                                           {batch: calibration_source} if mine and calibration_source else None)
        sizes = list(visited.sort_values(ascending=False, kind="stable").index[:ADVISE_BATCH_SIZES])
        sizes += [batch] if given and batch not in sizes else []       # the size asked for, always
        table = PB.per_batch([side], steps, n_boot=0, only=sizes,
                             baselines_tps={batch: baseline_tps} if given and baseline_tps else None,
                             calibrate=cal, calibration_sources=sources)
        return records(table[table["batch"].isin(visited.index)])
    except (ValueError, KeyError, IndexError):
        return None


def message_sizes_by_phase(analysis) -> tuple[pd.DataFrame, dict]:
    """NCCL ranges with a decoded message size (read/nccl_payloads.py) and the phase of the innermost
    phase range around each on its thread (None when there is none)."""
    sized, info = views.get(analysis, "nccl_messages")      # read once per analysis (the report's figure too)
    if sized.empty:
        return pd.DataFrame(columns=["name", "message_bytes", "phase"]), info
    return sized.assign(phase=_enclosing_phase(sized, analysis.ranges)), info


def _enclosing_phase(sized: pd.DataFrame, ranges: pd.DataFrame) -> list:
    """Per sized NCCL range: the phase of the latest-starting phase range (not ``allreduce``: the
    shim's own range around the call) on its thread that encloses it, else None."""
    out = [None] * len(sized)
    if ranges is None or ranges.empty or "phase" not in ranges.columns:
        return out
    r = ranges[ranges["phase"].notna() & (ranges["phase"] != "allreduce")]
    for (tid, inp), idx in sized.groupby(["global_tid", "input"]).groups.items():
        mine = r[r["global_tid"] == tid]
        if "input" in mine.columns:
            mine = mine[mine["input"] == inp]
        if mine.empty:
            continue
        mine = mine.sort_values("start_ns")
        st, en = mine["start_ns"].to_numpy(dtype="int64"), mine["end_ns"].to_numpy(dtype="int64")
        ph = mine["phase"].to_numpy(dtype=object)
        for i in idx:
            s0, e0 = int(sized.at[i, "start_ns"]), int(sized.at[i, "end_ns"])
            j = int(np.searchsorted(st, s0, side="right")) - 1
            for jj in range(j, max(j - 8, -1), -1):       # the innermost enclosing one is among the last few
                if en[jj] >= e0:
                    out[i] = ph[jj]
                    break
    return out


def at_batch(cyc: pd.DataFrame, batch: int | None) -> tuple[pd.DataFrame, int | None]:
    """The steady cycles of batch size ``batch`` (--batch M: every rank's rows of the cycle numbers whose requests
    are M) and M; all of them and None without --batch, or where no cycle ran M (whatif then says so). With --batch
    the cycle figures (verify's share, the idle time, the all-reduces) are those of the batch size the step count
    is predicted for, not every batch size's pooled."""
    if batch is None or not len(cyc) or "requests" not in cyc.columns:
        return cyc, None
    numbers = cyc.loc[pd.to_numeric(cyc["requests"], errors="coerce") == batch, "cycle"].unique()
    if not len(numbers):
        return cyc, None
    return cyc[cyc["cycle"].isin(numbers)], int(batch)


def eager_live(analysis, cycles: pd.DataFrame | None = None) -> bool:
    """Whether ``analysis`` is a live timing log of an eager run: its process's ``spec_config`` says
    ``cuda_graph=0`` and none of ``cycles`` (its steady cycles; all of its cycles without) timed a CUDA-graph
    replay (``replay_ns`` null). Its phase columns are then each phase's CUDA-event span on the stream, its wall
    time with the host's kernel launches in it, not the phase's GPU time: on the real eager log
    (``fixtures/real/sglang_live_h100_v2_l16_s3_eager.live``) verify's events are within 0.7% of nsys's stream span
    of the same cycle's verify and its kernels are busy 2-8% of that span (docs/live.md, "Eager mode"). False for an
    nsys export, a graph-mode log (one written before the replays were logged too: cuda_graph=1) and a log whose
    configuration is unknown."""
    from analyze.run.live import is_live

    if not is_live(analysis):
        return False
    cfg = sides.spec_config_of(getattr(analysis, "ranks", None))
    if cfg is None or cfg.cuda_graph is not False:
        return False
    rows = analysis.cycles if cycles is None else cycles
    return not ("replay_ns" in rows.columns and pd.to_numeric(rows["replay_ns"], errors="coerce").notna().any())


def _eager_span_check(ctx: Context, rule: str, phase: str, ps: dict, finding: str) -> F.RuleCheck:
    """The check of a rule that tests a phase's GPU time (:func:`phase_share`) on a live log of an eager run
    (:func:`eager_live`): not applicable, the phase's event span and its share of the cycle as figures under names
    that say what they are (``<phase>_span_ns``, ``<phase>_span_share``), and where its GPU time is measured."""
    where = " without the profiler" if ps["calibrated_cycle"] else ""
    figures = {f"{phase}_span_ns": ps["phase_ns"], f"{phase}_span_share": ps["share"], "cycle_ns": ps["cycle_ns"],
               "calibrated_cycle": ps["calibrated_cycle"], "eager_spans": True}
    return F.RuleCheck(rule, F.NOT_APPLICABLE, f"a live log of an eager run (cuda_graph=0, no CUDA-graph replay "
                       f"timed): its {phase} events time the phase's wall span on the stream, the host's kernel "
                       f"launches included, not its kernels' GPU time ({phase}'s span: {_us(ps['phase_ns'])}, "
                       f"{_pct(ps['share'])} of the cycle{where}); {finding} needs {phase}'s GPU time: an nsys "
                       "profile of the run (profile-trace, then advise on it) gives it", figures)


def build_context(analysis, *, whatif: bool = True, message_sizes: bool = True, n_boot: int = 0,
                  baseline_tps: float | None = None, calibrate_tps: float | None = None,
                  batch: int | None = None, request_tokens="auto", calibration_source: dict | None = None) -> Context:
    cyc, warm = steady_cycles(analysis.cycles)
    cyc, cycles_batch = at_batch(cyc, batch)
    tcol = sides.time_column(cyc) if len(cyc) else "period_ns"
    cols = [c for c in cyc.columns if c.endswith("_ns") and c not in ("start_ns", "end_ns", "cpu_start_ns",
                                                                         "cpu_end_ns")]
    per = cyc.groupby("cycle")[cols].mean() if len(cyc) else pd.DataFrame(columns=cols)
    if "timed" in cyc.columns and len(cyc):
        # a sampled live log: its timed cycles' split carried onto every cycle's mean period (the one rule)
        flag = pd.Series(cycles_mod.timed(cyc), index=cyc.index)
        timed = flag.groupby(cyc["cycle"]).all().reindex(per.index).fillna(False).to_numpy(dtype=bool)
        scale = cycles_mod.sampled_scale(pd.to_numeric(per[tcol], errors="coerce").to_numpy(dtype="float64"), timed)
        split = [c for c in cols if c not in (tcol, "period_ns", "duration_ns", "gpu_period_ns")]
        per[split] = per[split].apply(pd.to_numeric, errors="coerce") * scale
    if "requests" in cyc.columns and len(cyc):
        per["requests"] = pd.to_numeric(cyc.groupby("cycle")["requests"].first(), errors="coerce")
    cycle_ns = float(per[tcol].mean()) if len(per) and tcol in per.columns else 0.0
    colls = analysis.collectives
    if len(colls):
        colls = colls.assign(cycle=_cycle_of(colls, cyc))
        colls = colls[colls["cycle"] >= 0]
    from analyze.run.live import is_live

    ctx = Context(analysis, cyc, per.reset_index(), tcol, cycle_ns, warm, colls, whatif_asked=whatif,
                  live=is_live(analysis), cycles_batch=cycles_batch, eager_spans=eager_live(analysis, cyc))
    if whatif and len(cyc):
        try:
            ctx.whatif = whatif_summary(analysis, n_boot=n_boot, baseline_tps=baseline_tps, calibrate_tps=calibrate_tps,
                                        batch=batch, request_tokens=request_tokens,
                                        calibration_source=calibration_source)
        except (ValueError, KeyError, IndexError) as exc:
            ctx.whatif_error = str(exc)
    if message_sizes and len(analysis.collectives):
        try:
            ctx.message_sizes, ctx.message_info = message_sizes_by_phase(analysis)
        except Exception as exc:  # noqa: BLE001 - an unreadable payload table must not stop the advice
            ctx.message_sizes, ctx.message_info = None, {"reason": f"payloads not read: {exc}"}
    return ctx


def _sentence(parts: list[str]) -> str:
    """`` Part one; part two.`` (a capital first letter), or nothing without parts."""
    text = "; ".join(parts)
    return f" {text[:1].upper()}{text[1:]}." if text else ""


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f} us"


# ---------------------------------------------------------------------------------------------
# rules: each returns (findings, check)
# ---------------------------------------------------------------------------------------------
def phase_share(ctx: Context, col: str) -> dict:
    """A phase's time a cycle as a share of the cycle whatif models (:func:`_modelled_cycle`: the batch size it models,
    its calibrated cycle where it was calibrated): ``share``, ``phase_ns``, ``cycle_ns``, ``calibrated_cycle`` and,
    where calibrated, ``profiled_cycle_ns`` and ``profiled_share``. The profiler stretches a host-bound cycle's host
    time, not its kernels, so a share of the profiled cycle understates a phase (a real 32-layer profile at batch 1:
    verify 27.7% of the 8.9 ms profiled cycle, 62.4% of the 3.9 ms it runs without the profiler). The one measure
    the verify_dominated, draft_steps and draft_extend rules test and print (on a live log of an eager run a
    phase's event span, its wall time: :func:`eager_live`; verify_dominated and draft_extend then stand aside)."""
    m = _modelled_cycle(ctx)
    rows = m["rows"]
    v = pd.to_numeric(rows[col], errors="coerce").mean() if col in rows.columns and len(rows) else float("nan")
    phase = float(v) if v == v else 0.0
    out = {"share": phase / m["cycle_ns"] if m["cycle_ns"] > 0 else 0.0, "phase_ns": phase, "cycle_ns": m["cycle_ns"],
           "calibrated_cycle": m["calibrated"], "batch": m["batch"]}
    if m["calibrated"] and m["profiled_cycle_ns"] > 0:
        out.update(profiled_cycle_ns=m["profiled_cycle_ns"], profiled_share=phase / m["profiled_cycle_ns"])
    return out


def rule_verify_dominated(ctx: Context):
    rule = F.VERIFY_DOMINATED
    ps = phase_share(ctx, "verify_ns")
    share, verify, cycle_ns, calibrated = ps["share"], ps["phase_ns"], ps["cycle_ns"], ps["calibrated_cycle"]
    if verify <= 0:
        return [], F.RuleCheck(rule, F.NO_DATA, "no verify time in the decode cycles")
    if ctx.eager_spans:             # verify's wall span, not its GPU time: the step count is draft_steps'
        return [], _eager_span_check(ctx, rule, "verify", ps, "whether verify dominates")
    figures = {"verify_ns": verify, "verify_share": share, "cycle_ns": cycle_ns, "threshold_share": VERIFY_SHARE,
               "calibrated_cycle": calibrated}
    if calibrated:
        figures.update(profiled_cycle_ns=ps["profiled_cycle_ns"], profiled_share=ps["profiled_share"])
    where = " without the profiler (whatif's calibration)" if calibrated else ""
    if share < VERIFY_SHARE:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"verify is {_pct(share)} of the cycle{where} "
                               f"(< {_pct(VERIFY_SHARE)})", figures)
    ev = dict(figures, cycles=ctx.n_cycles)
    w = ctx.whatif
    saving, settings, basis = 0.0, (), "no step-count prediction: whatif could not model this trace"
    if w:
        # on too few cycles whatif's pick is no recommendation: its figures are left out (few_cycles says why)
        picked = {} if w.get("few_cycles") else dict(recommended_steps=w["best_steps"],
                                                     tokens_per_s_recommended=w["tokens_per_s_best"])
        ev.update(profiled_steps=w["profiled_steps"], tokens_per_s_profiled=w["tokens_per_s_profiled"], **picked,
                  few_cycles=bool(w.get("few_cycles")),
                  requests=w["requests"], verified_tokens=w["verified_tokens"],
                  verify_scaling=w["verify_scaling"]["method"], **_rounds_evidence(w))
        comp = (w["verify_scaling"].get("components") or {}).get("verify")
        if comp:
            ev.update(verify_per_token_ns=comp["per_token_ns"], verify_at_zero_tokens_ns=comp["intercept_ns"])
        gain = 1 - w["tokens_per_s_profiled"] / w["tokens_per_s_best"] if w["tokens_per_s_best"] > 0 else 0.0
        saving = max(0.0, cycle_ns * gain)
        edge = (f" ({w['best_steps']} is the edge of the searched {w['steps_searched'][0]}..{w['steps_searched'][1]}: "
                "the optimum may lie beyond it)") if w.get("best_at_edge") else ""
        basis = (f"whatif (point estimate): {w['best_steps']} draft steps instead of {w['profiled_steps']} give the "
                 f"same tokens in {_pct(gain)} less time{edge}" if w["best_steps"] != w["profiled_steps"] else
                 f"whatif: the profiled {w['profiled_steps']} draft steps are already the predicted best")
        if w["best_steps"] != w["profiled_steps"] and not w.get("few_cycles"):
            settings = S.steps_settings(w["best_steps"])
        if w.get("few_cycles"):
            saving, basis = 0.0, f"no step-count prediction: whatif's {_few_said(w)}"
    elif ctx.whatif_error:
        ev["whatif_error"] = ctx.whatif_error
    if w and w.get("few_cycles"):
        suggestion = (f"Verify takes {_pct(share)} of the cycle{where}. No step count is recommended: whatif's {_few_said(w)}."
                      + _batch_said(w))
    elif w and w["best_steps"] != w["profiled_steps"]:
        scal = {"fit": "verify fitted in the verified tokens over this profile's batches",
                "cannot_tell": "verify taken as constant: one profile of a constant batch cannot tell how it grows",
                "given": "verify scaling as given", "constant": "verify taken as constant",
                "batches": "verify fitted in the verified tokens over this profile's batch sizes",
                "profiles": "verify from the profiles' step counts"}.get(ev.get("verify_scaling"), "")
        suggestion = (f"Verify takes {_pct(share)} of the cycle{where}. whatif predicts {w['best_steps']} draft steps at "
                      f"{w['tokens_per_s_best']:,.0f} tokens/s vs {w['tokens_per_s_profiled']:,.0f} at the profiled "
                      f"{w['profiled_steps']}" + (f" ({scal})" if scal else "") + "; check it with `analyze-trace "
                      f"whatif` (intervals) and set {' '.join(x.short() for x in settings)}." + _lean_off_said(ctx)
                      + _batch_said(w))
    else:
        suggestion = (f"Verify takes {_pct(share)} of the cycle{where}: the target forward over "
                      + (f"{w['verified_tokens']:.0f} verified tokens" if w else "the verified tokens")
                      + "; fewer verified tokens per request (a smaller tree: "
                      f"{S.SPEC_DRAFT_TOKENS}, {S.SPEC_TOPK}) or a faster target forward (kernels, quantization) "
                      "are what is left; the step count is already the predicted best." if w else
                      f"Verify takes {_pct(share)} of the cycle{where}; run `analyze-trace whatif` for the step count.")
    f = F.Finding(rule, f"verify dominates the cycle ({_pct(share)}" + (", without the profiler" if calibrated else "")
                  + ")", saving, verify, cycle_ns, basis,
                  suggestion, ev, tuple(settings), phase="verify")
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"verify is {_pct(share)} of the cycle{where}", figures)


def _kind_rows(rows: pd.DataFrame) -> list[dict]:
    """Per all-reduce kind in ``rows`` (collectives): count and transfer time, most time first."""
    # grouped by integer codes of the names (codes.factorize_objects: the shared name objects coded
    # by identity, no hashing of a million texts); rows without a name are left out, as groupby does
    codes, names = factorize_objects(rows["name"].to_numpy(dtype=object))
    named = codes >= 0
    per_name = rows[["transfer_ns", "duration_ns"]][named].groupby(codes[named], sort=False).agg(
        count=("transfer_ns", "size"), transfer_ns=("transfer_ns", "sum"), duration_ns=("duration_ns", "sum"))
    acc: dict[str, dict] = {}
    for code, r in per_name.iterrows():                 # a few distinct names
        k = K.kind_of(names[code])
        a = acc.setdefault(k.label, {"label": k.label, "kind": k.kind, "algorithm": k.algorithm,
                                     "protocol": k.protocol, "variant": k.variant, "count": 0, "transfer_ns": 0,
                                     "duration_ns": 0})
        a["count"] += int(r["count"])
        a["transfer_ns"] += int(r["transfer_ns"])
        a["duration_ns"] += int(r["duration_ns"])
    return sorted(acc.values(), key=lambda a: -a["transfer_ns"])


def _phase_groups(phase: np.ndarray) -> tuple[np.ndarray, list]:
    """(a code per row, the phase of each code) with no phase coded as ``other``, the codes in the
    order the phases first appear (``groupby(phase.fillna("other"), sort=False)``'s groups)."""
    codes, uniques = factorize_objects(phase)
    labels = list(uniques)
    if (codes < 0).any():
        if "other" not in labels:
            labels.append("other")
        codes = np.where(codes < 0, labels.index("other"), codes)
    return codes, labels


def _allreduce_settings(main: dict, median_bytes: float | None) -> tuple[tuple, str]:
    """(settings to try, why) for the dominant all-reduce kind of a phase."""
    kind = main["kind"]
    symm = F.Setting(F.SET, S.TORCH_SYMM_MEM, note="torch symmetric-memory all-reduce; SM90: TP 4, 6, 8")
    if kind == K.NCCL:
        sets, why = [], []
        proto = S.nccl_proto_for(median_bytes)
        if main["protocol"] in (None, "SIMPLE") or (main["protocol"] == "LL128" and proto == "LL"):
            sets.append(F.Setting(F.SET, "NCCL_PROTO", proto))
            why.append(f"protocol {main['protocol'] or 'unknown (generic kernel)'}: decode-sized messages "
                       + (f"(median {median_bytes / 1024:,.1f} KiB) " if median_bytes else "")
                       + f"move with less latency in {proto}")
        if main["algorithm"] not in (None, "RING"):
            sets.append(F.Setting(F.SET, "NCCL_ALGO", "Ring"))
            why.append(f"algorithm {main['algorithm']}: within one node Ring has the lower latency for small "
                       "messages")
        sets.append(F.Setting(F.REMOVE, S.DISABLE_CUSTOM_AR, note="SGLang's custom all-reduce takes in-node "
                              "decode-sized messages"))
        sets.append(symm)
        return tuple(sets), "; ".join(why) if why else "NCCL already runs Ring with a low-latency protocol"
    if kind == K.CUSTOM:
        return ((F.Setting(F.SET, S.FUSION_BACKEND, "auto", "fuses the all-reduce with residual + RMSNorm; MoE "
                           "models, SM90"), symm,
                 F.Setting(F.COMPARE, S.DISABLE_CUSTOM_AR, note="NCCL with NCCL_PROTO=LL NCCL_ALGO=Ring")),
                f"SGLang's custom all-reduce ({main['variant']})")
    if kind == K.FUSED:
        return ((F.Setting(F.COMPARE, S.NO_FUSION, note="the unfused custom all-reduce"), symm),
                "already fused with the residual RMSNorm")
    if kind in (K.SYMM_MEM, K.MSCCLPP):
        return ((F.Setting(F.COMPARE, S.DISABLE_CUSTOM_AR, note="NCCL with NCCL_PROTO=LL NCCL_ALGO=Ring"),),
                main["label"])
    return ((F.Setting(F.CHECK, "the all-reduce backend", note="an on-GPU all-reduce (NCCL or SGLang's custom "
                       "all-reduce) instead of a round trip through the host"),),
            "no collective kernel in the all-reduce phase (e.g. gloo: copies through the host)")


def rule_allreduce(ctx: Context):
    rule = F.ALLREDUCE
    colls = ctx.collectives
    ar_cycle = ctx.mean("allreduce_ns")
    if colls.empty:
        if ar_cycle <= 0:
            return [], F.RuleCheck(rule, F.NOT_APPLICABLE, "no all-reduce in the decode cycles (one rank, TP 1?)")
        return _allreduce_without_collectives(ctx, ar_cycle)
    per_rank_cycles = max(len(ctx.cycles), 1)
    out, checked = [], {}
    needed = colls[["transfer_ns", "wait_ns", "duration_ns", "name"]]     # the groups copy these columns only
    codes, labels = _phase_groups(colls["phase"].to_numpy(dtype=object))
    for code, rows in needed.groupby(codes, sort=False):
        phase = labels[code]
        transfer = float(rows["transfer_ns"].sum()) / per_rank_cycles
        wait = float(rows["wait_ns"].sum()) / per_rank_cycles
        share = transfer / ctx.cycle_ns
        checked[str(phase)] = {"transfer_ns": transfer, "wait_ns": wait, "transfer_share": share}
        if share < ALLREDUCE_SHARE:
            continue
        kinds = _kind_rows(rows)
        main = kinds[0]
        sizes = None
        if ctx.message_sizes is not None and len(ctx.message_sizes):
            ms = ctx.message_sizes
            mine = ms[ms["phase"] == phase]
            from analyze.read.nccl_payloads import size_summary
            sizes = size_summary((mine if len(mine) else ms)["message_bytes"].to_numpy())
            sizes["matched_to_phase"] = bool(len(mine))
        median = sizes.get("median_bytes") if sizes else None
        settings, why = _allreduce_settings(main, median)
        ev = {"phase": phase, "transfer_ns": transfer, "wait_ns": wait, "transfer_share": share,
              "allreduce_ns": transfer + wait, "collectives_per_cycle": len(rows) / per_rank_cycles,
              "kinds": kinds, "cycle_ns": ctx.cycle_ns,
              "message_sizes": sizes, "message_sizes_reason": None if sizes else ctx.message_info.get("reason")}
        size_txt = (f", messages {sizes['min_bytes']:,}..{sizes['max_bytes']:,} B (median {sizes['median_bytes']:,.0f})"
                    if sizes and sizes.get("count") else "")
        suggestion = (f"The all-reduces after {phase} move data for {_us(transfer)} per cycle ({_pct(share)} of the "
                      f"cycle; another {_us(wait)} waiting for the last rank), {len(rows) / per_rank_cycles:.0f} per "
                      f"cycle, mostly {main['label']}{size_txt}: {why}.")
        out.append(F.Finding(rule, f"all-reduce in {phase}: {_pct(share)} of the cycle ({main['label']})", transfer,
                             transfer, ctx.cycle_ns, "upper bound: the all-reduce transfer time per cycle (no model of "
                             "how much a setting recovers)", suggestion, ev, settings, phase=str(phase)))
    if out:
        return out, F.RuleCheck(rule, F.TRIGGERED, f"{len(out)} phase(s) with all-reduce >= {_pct(ALLREDUCE_SHARE)}",
                                checked)
    return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"all-reduce transfer < {_pct(ALLREDUCE_SHARE)} of the cycle in "
                           "every phase", checked)


def _allreduce_without_collectives(ctx: Context, ar_cycle: float):
    """All-reduce time but no cross-rank collectives (one rank's report, or no collective kernels)."""
    rule = F.ALLREDUCE
    share = ar_cycle / ctx.cycle_ns
    figures = {"allreduce_ns": ar_cycle, "allreduce_share": share}
    if share < ALLREDUCE_SHARE:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"all-reduce is {_pct(share)} of the cycle", figures)
    k = ctx.analysis.kernels
    k = k[k["phase"] == "allreduce"] if len(k) else k
    names = k.groupby("name")["total_ns"].sum().sort_values(ascending=False) if len(k) else pd.Series(dtype=float)
    rows = pd.DataFrame({"name": names.index, "transfer_ns": names.to_numpy(), "duration_ns": names.to_numpy()})
    kinds = _kind_rows(rows) if len(rows) else [{"label": "other", "kind": K.OTHER, "algorithm": None, "protocol": None,
                                                 "variant": None, "count": 0, "transfer_ns": 0, "duration_ns": 0}]
    settings, why = _allreduce_settings(kinds[0], None)
    ev = dict(figures, kinds=kinds, cycle_ns=ctx.cycle_ns, message_sizes=None,
              message_sizes_reason="no cross-rank collectives to split wait from transfer")
    suggestion = (f"The all-reduce phase takes {_us(ar_cycle)} per cycle ({_pct(share)}), mostly {kinds[0]['label']}: "
                  f"{why}.")
    f = F.Finding(rule, f"all-reduce: {_pct(share)} of the cycle ({kinds[0]['label']})", ar_cycle, ar_cycle,
                  ctx.cycle_ns, "upper bound: the all-reduce phase's time per cycle (wait not separable)", suggestion,
                  ev, settings)
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"all-reduce is {_pct(share)} of the cycle", figures)


def launch_gaps(ctx: Context) -> dict:
    """GPU idle between consecutive ops inside the steady cycles (per rank and cycle, all streams merged):
    gaps > LAUNCH_GAP_NS per cycle and their time, the median gap, the share of ops that are CUDA graph
    nodes or graph launches. Computed once per context (two rules cite it)."""
    if ctx.gaps is None:
        ctx.gaps = stats_of_store(opstore.of(ctx.analysis), ctx.cycles).figures(len(ctx.cycles))
    return ctx.gaps


def host_overlap(ctx: Context) -> dict:
    """Does the host start the next cycle before this cycle's GPU work ends? (median over ranks/cycles)"""
    c = ctx.cycles
    if c.empty or "cpu_start_ns" not in c.columns:
        return {}
    lead = []
    for _, g in c.sort_values("cycle").groupby("rank"):
        nxt = g["cpu_start_ns"].to_numpy(dtype="float64")[1:]
        lead.append(g["end_ns"].to_numpy(dtype="float64")[:-1] - nxt)
    lead = np.concatenate(lead) if lead else np.zeros(0)
    if not len(lead):
        return {}
    return {"next_cycle_host_start_before_gpu_end_share": float((lead > 0).mean()),
            "host_start_to_previous_gpu_end_median_ns": float(np.median(-lead))}


def _rows_at(ctx: Context, batch: int) -> pd.DataFrame | None:
    """The per-cycle rows of batch size ``batch`` (requests per cycle); None where the cycles do not say theirs."""
    rows = ctx.per_cycle
    if "requests" not in rows.columns:
        return None
    return rows[pd.to_numeric(rows["requests"], errors="coerce") == batch]


def unprofiled_idle(ctx: Context) -> dict | None:
    """The GPU's idle time a cycle without the profiler, where whatif was calibrated at one step count and models one
    batch size: that batch size's steady cycles, their mean GPU busy time, and the calibrated cycle (whatif's profiled
    cycle less the profiler's share, ``calibration_shift_ns``): a profile's stretch of a host-bound cycle is host time,
    not GPU idle the server has (the real clock profile at batch 16: a 7.0 ms cycle profiled, 4.9 ms calibrated).
    None where there is no such calibration, no batch size modelled, or no cycle of it here."""
    w = ctx.whatif or {}
    shift, batch = w.get("calibration_shift_ns"), w.get("batch")
    if shift is None or w.get("few_cycles"):       # a calibration of too few cycles says nothing of the server
        return None
    rows = ctx.per_cycle if batch is None else _rows_at(ctx, batch)   # whatif pooled every batch size: so do its
    if rows is None or not len(rows) or "busy_ns" not in rows.columns:  # busy times
        return None
    cycle = float(w["calibration_profiled_cycle_ns"]) - float(shift)
    busy = float(pd.to_numeric(rows["busy_ns"], errors="coerce").mean())
    if not cycle > 0 or busy != busy or busy > cycle:
        # a calibrated cycle shorter than the GPU's own work a cycle is no cycle this configuration runs (a figure of
        # another batch size or run): the profiled figures stand (whatif's own note says the calibration is suspect)
        return None
    return {"batch": None if batch is None else int(batch), "cycle_ns": cycle, "busy_ns": busy,
            "idle_ns": max(cycle - busy, 0.0),
            "profiled_cycle_ns": float(w["calibration_profiled_cycle_ns"]), "profiler_ns": float(shift)}


def rule_host_bound(ctx: Context):
    rule = F.HOST_BOUND
    cal = unprofiled_idle(ctx)
    if cal is None:
        busy = ctx.mean("busy_ns")
        cycle_ns = ctx.cycle_ns
        idle = cycle_ns - busy
    else:           # the GPU idle the server has: the profiler's stretch of the cycle left out
        busy, cycle_ns, idle = cal["busy_ns"], cal["cycle_ns"], cal["idle_ns"]
    share = idle / cycle_ns if cycle_ns else 0.0
    figures = {"idle_ns": idle, "idle_share": share, "busy_ns": busy, "cycle_ns": cycle_ns,
               "threshold_share": IDLE_SHARE}
    if cal is not None:
        figures.update(calibrated_batch=cal["batch"], profiled_cycle_ns=cal["profiled_cycle_ns"],
                       profiler_ns=cal["profiler_ns"])
    at = ("" if cal is None else (f" at batch {cal['batch']}" if cal["batch"] is not None else "")
          + " without the profiler")
    where = f"{at} (whatif's calibration; {_us(cal['profiled_cycle_ns'])} profiled)" if cal else ""
    if share < IDLE_SHARE:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"the GPU is idle {_pct(share)} of the cycle{where} "
                               f"(< {_pct(IDLE_SHARE)})", figures)
    gap = ctx.mean("gap_ns")
    outside = ctx.cycle_ns - ctx.mean("duration_ns") if ctx.time_col == "period_ns" else 0.0
    # the period less the GPU window, 0 where the GPU window runs into the next cycle (gpu_window_past_period_ns)
    ev = dict(figures, gap_inside_gpu_window_ns=gap, host_outside_gpu_window_ns=max(outside, 0.0),
              gpu_window_past_period_ns=max(-outside, 0.0), cycles=ctx.n_cycles)
    ev.update(launch_gaps(ctx))
    ev.update(host_overlap(ctx))
    graphs = ev.get("graph_ops_share")
    ev["cuda_graphs"] = None if graphs is None else bool(graphs > 0.5)
    overlapped = ev.get("next_cycle_host_start_before_gpu_end_share")
    settings, parts = [], []
    if ev["cuda_graphs"] is False:
        settings += [F.Setting(F.REMOVE, S.DISABLE_GRAPH, note="CUDA graphs: one replay instead of a launch per kernel"),
                     F.Setting(F.REMOVE, S.DISABLE_DECODE_GRAPH),
                     F.Setting(F.REMOVE, S.GRAPH_BACKEND_DECODE, "disabled"),
                     F.Setting(F.SET, S.GRAPH_MAX_BS, ">= the running batch", "larger batches run without graphs")]
        parts.append(f"CUDA graphs are off ({100 * (1 - graphs):.0f}% of the cycle's ops launched one by one from "
                     "the host)")
    elif ev["cuda_graphs"]:
        parts.append(f"CUDA graphs are on ({100 * graphs:.0f}% of the ops are graph nodes): the idle time is host "
                     "work between replays")
    if overlapped is not None and overlapped < 0.5:
        settings.append(F.Setting(F.REMOVE, S.DISABLE_OVERLAP, note="the overlap scheduler prepares the next batch "
                                  "on the host while the GPU runs this one"))
        parts.append(f"the host starts the next cycle {_us(ev['host_start_to_previous_gpu_end_median_ns'])} after "
                     "the GPU finished this one (median): host and GPU take turns")
    if ev.get("launch_gaps_per_cycle"):
        parts.append(f"{ev['launch_gaps_per_cycle']:.0f} launch gaps > {_us(LAUNCH_GAP_NS)} per cycle "
                     f"({_us(ev['launch_gap_per_cycle_ns'])})")
    if not settings:
        settings.append(F.Setting(F.CHECK, "the batch per cycle", note="more concurrent requests amortise the host's "
                                  "per-cycle time"))
    # the period less the GPU window: negative where the GPU window runs into the next cycle (the overlap scheduler)
    beyond = f"{_us(outside)} outside it" if outside >= 0 else \
        f"none outside it (the GPU window runs {_us(-outside)} past the cycle's period, into the next cycle)"
    inside = (f"{_us(gap)} inside its GPU window, {beyond}" if cal is None else
              f"whatif's calibration of the {_us(cal['profiled_cycle_ns'])} profiled cycle; under the profiler"
              f"{', over every batch size' if cal['batch'] is not None and ctx.cycles_batch is None else ''}: "
              f"{_us(gap)} inside the GPU window, "
              f"{beyond}")
    suggestion = (f"The GPU is idle {_us(idle)} of each {_us(cycle_ns)} cycle{at} ({_pct(share)}; {inside}): the "
                  "decode loop is host bound." + _sentence(parts))
    f = F.Finding(rule, f"host-bound decode loop: GPU idle {_pct(share)} of the cycle", idle, idle, cycle_ns,
                  "upper bound: the GPU idle time per cycle" + (" without the profiler (calibrated)" if cal else ""),
                  suggestion, ev, tuple(settings))
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"the GPU is idle {_pct(share)} of the cycle{where}", figures)


def _no_collectives(ctx: Context) -> str:
    """Why there is no all-reduce to compare ranks by: one rank, no op matched the patterns, or none
    lies in a steady cycle (all in warm-up or outside the cycles)."""
    if ctx.ranks <= 1:
        return "no all-reduce across ranks: one rank"
    if ctx.analysis.collectives is None or ctx.analysis.collectives.empty:
        return (f"no all-reduce kernel across ranks: no GPU op of the {ctx.ranks} ranks matched the allreduce "
                "phase's kernel patterns (any allreduce time shown is that of the other GPU ops inside its NVTX "
                "ranges; --phase 'allreduce=ranges:allreduce;kernels:PATTERN' names other collective kernels)")
    return (f"no all-reduce across ranks in a steady cycle: the {len(ctx.analysis.collectives):,} collective ops "
            "lie in warm-up cycles or outside the decode cycles")


def rule_straggler(ctx: Context):
    rule = F.STRAGGLER
    colls = ctx.collectives
    if colls.empty:
        return [], F.RuleCheck(rule, F.NOT_APPLICABLE, _no_collectives(ctx))
    summary = coll_mod.skew_summary(colls)
    late = coll_mod.stragglers_of(summary)
    figures = {"max_times_late": int(summary["times_late"].max()) if len(summary) else 0,
               "collectives": int(colls["collective"].nunique())}
    need = max(2, MIN_LATE_SHARE * figures["collectives"])
    late = [r for r in late if int(summary.loc[summary["rank"] == r, "times_late"].iloc[0]) >= need]
    if not late:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, "no rank arrives last at >= "
                               f"{_pct(MIN_LATE_SHARE)} of the all-reduces with a significant arrival spread", figures)
    out = []
    n = max(ctx.n_cycles, 1)
    for r in late:
        row = summary[summary["rank"] == r].iloc[0]
        phase = row["late_phase"] if isinstance(row["late_phase"], str) else None
        per_cycle_wait = float(row["late_by_ns"]) / n
        ev = {"rank": int(r), "times_late": int(row["times_late"]), "collectives": figures["collectives"],
              "late_by_ns": per_cycle_wait, "late_phase": phase, "cycle_ns": ctx.cycle_ns}
        col = f"{phase}_ns" if phase else None
        if col and col in ctx.cycles.columns:
            per_rank = ctx.cycles.groupby("rank")[col].mean()
            others = per_rank.drop(index=r, errors="ignore")
            ev.update({"phase_on_rank_ns": float(per_rank.get(r, np.nan)),
                       "phase_median_other_ranks_ns": float(others.median()) if len(others) else None})
            if len(others):
                ev["phase_excess_ns"] = float(per_rank.get(r, np.nan) - others.median())
        excess = ev.get("phase_excess_ns")
        suggestion = (f"Rank {r} arrives last at {int(row['times_late'])} of {figures['collectives']} all-reduces, "
                      f"after {phase or 'its work'}; every other rank waits {_us(per_cycle_wait)} per cycle for it"
                      + (f"; its {phase} takes {_us(excess)} more per cycle than the median rank's" if excess else "")
                      + f". Check that GPU (clocks and throttling: nvidia-smi -q -d CLOCK,PERFORMANCE; other "
                        f"processes on it), the rank's CPU/NUMA binding, and its {phase or ''} kernels against the "
                        "other ranks'.")
        settings = (F.Setting(F.CHECK, f"the GPU of rank {r}", note="nvidia-smi -q -d CLOCK,PERFORMANCE: clocks, "
                              "throttling; other processes on it"),
                    F.Setting(F.CHECK, f"the CPU binding of rank {r}", note="numactl / taskset: each TP rank on its "
                              "GPU's socket"))
        out.append(F.Finding(rule, f"straggler: rank {r} late after {phase or '?'}", per_cycle_wait, per_cycle_wait,
                             ctx.cycle_ns, "the time the other ranks wait for it per cycle (all ranks move at the "
                             "slowest one's pace)", suggestion, ev, settings, rank=int(r), phase=phase))
    return out, F.RuleCheck(rule, F.TRIGGERED, f"straggler rank(s) {', '.join(map(str, late))}", figures)


def rule_draft_extend(ctx: Context):
    rule = F.DRAFT_EXTEND
    ps = phase_share(ctx, "draft_extend_ns")
    share, de, cycle_ns = ps["share"], ps["phase_ns"], ps["cycle_ns"]
    if de <= 0:
        return [], F.RuleCheck(rule, F.NO_DATA, "no draft_extend time in the decode cycles")
    if ctx.eager_spans:
        return [], _eager_span_check(ctx, rule, "draft_extend", ps, "its cost against one draft step")
    where = " without the profiler" if ps["calibrated_cycle"] else ""
    figures = {"draft_extend_ns": de, "draft_extend_share": share, "threshold_share": DRAFT_EXTEND_SHARE,
               "calibrated_cycle": ps["calibrated_cycle"]}
    if share < DRAFT_EXTEND_SHARE:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"draft_extend is {_pct(share)} of the cycle{where} "
                               f"(< {_pct(DRAFT_EXTEND_SHARE)})", figures)
    step = ctx.whatif["draft_step_ns"] if ctx.whatif else None
    ev = dict(figures, cycle_ns=cycle_ns, draft_step_ns=step,
              draft_steps_equivalent=de / step if step else None)
    gaps = launch_gaps(ctx) if not ctx.live else {}     # a live log has no ops to find launch gaps in
    graphs = gaps.get("graph_ops_share")
    ev["cuda_graphs"] = None if graphs is None else bool(graphs > 0.5)
    saving = max(0.0, de - step) if step else de
    basis = ("down to the cost of one draft step (the same draft model, one forward)" if step else
             "upper bound: draft_extend's time per cycle")
    settings = []
    if ev["cuda_graphs"] is False:
        settings += [F.Setting(F.REMOVE, S.DISABLE_GRAPH, note="SGLang replays draft-extend as a CUDA graph when "
                               "graphs are on"), F.Setting(F.REMOVE, S.DISABLE_DECODE_GRAPH)]
    if ctx.whatif and ctx.whatif["best_steps"] < ctx.whatif["profiled_steps"] and not ctx.whatif.get("few_cycles"):
        settings.append(F.Setting(F.SET, S.SPEC_STEPS, str(ctx.whatif["best_steps"]), "fewer steps: fewer tokens to "
                                  "extend (whatif's pick)"))
    suggestion = (f"draft_extend (the draft model over the verified batch's tokens after verify) takes {_us(de)} per "
                  f"cycle ({_pct(share)}{where})" + (f", {de / step:.1f}x one draft step ({_us(step)})" if step
                                                     else "") + ".")
    f = F.Finding(rule, f"draft_extend: {_pct(share)} of the cycle{where}", saving, de, cycle_ns, basis, suggestion,
                  ev, tuple(settings), phase="draft_extend")
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"draft_extend is {_pct(share)} of the cycle{where}", figures)


def rule_speculation(ctx: Context):
    """Speculation that costs more than it gains: whatif's no-speculation baseline (estimated: the
    profile's cycle without draft and draft_extend, yielding one token per request) beats its
    prediction at every step count it weighs."""
    rule = F.SPECULATION
    w = ctx.whatif
    if not w:
        reason = ("whatif not run (--no-whatif)" if not ctx.whatif_asked else
                  "no whatif model of this trace" + (f": {ctx.whatif_error}" if ctx.whatif_error else ""))
        return [], F.RuleCheck(rule, F.NO_DATA, reason)
    base, best, prof = w["tokens_per_s_baseline"], w["tokens_per_s_best"], w["tokens_per_s_profiled"]
    figures = {"tokens_per_s_baseline": base, "tokens_per_s_best": best, "tokens_per_s_profiled": prof,
               "best_steps": w["best_steps"], "baseline_source": w["baseline_source"]}
    if not (base == base and base > 0 and prof > 0):           # NaN or nothing measured
        return [], F.RuleCheck(rule, F.NO_DATA, "no tokens/s without speculation to compare with", figures)
    if w.get("few_cycles"):
        return [], F.RuleCheck(rule, F.NO_DATA, f"whatif's {_few_said(w)}", dict(figures, cycles=w["cycles"]))
    if w.get("verdict") == "break_even":
        from analyze.tools.whatif.model import BREAK_EVEN

        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"break-even: {w['best_steps']} draft step"
                               f"{'' if w['best_steps'] == 1 else 's'} predicted at {best:,.0f} tokens/s against "
                               f"{base:,.0f} without speculation ({w['baseline_source']}), {best / base:.3f}x: within "
                               f"{100 * BREAK_EVEN:.0f}% of 1, inside the spread of repeated unprofiled runs; neither "
                               "clearly pays nor clearly costs", figures)
    if best >= base and not w.get("verdict_uncertain"):
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"speculation pays: {w['best_steps']} draft step{'' if w['best_steps'] == 1 else 's'} predicted "
                               f"at {best:,.0f} tokens/s against {base:,.0f} without speculation ({w['baseline_source']})",
                               figures)
    if w.get("verdict_uncertain") and w.get("baseline_from_live_log"):
        from analyze.tools.whatif.model import LIVE_BASELINE_ERROR

        return [], F.RuleCheck(rule, F.NO_DATA, f"uncertain: {best / base:.3f}x against a baseline estimated from a live "
                               f"timing log (no kernel tables; {LIVE_BASELINE_ERROR}); give --baseline-tps "
                               "(unprofiled tokens/s without speculation)", figures)
    if w.get("verdict_uncertain") and w.get("rough_estimate"):
        return [], F.RuleCheck(rule, F.NO_DATA, f"uncertain: {best / base:.3f}x against a plain step estimated roughly "
                               "(no shim ranges: one cycle without the draft phases), an estimate no real sweep has "
                               "bounded; give --calibrate-tps and --baseline-tps (unprofiled tokens/s with and without "
                               "speculation)", figures)
    if w.get("verdict_uncertain") and w.get("speedup_through_estimate"):
        from analyze.tools.whatif.model import PROFILE_ALONE_RATIO

        lo, hi = PROFILE_ALONE_RATIO
        return [], F.RuleCheck(rule, F.NO_DATA, f"uncertain: {best / base:.3f}x, the profile's own speed-up over its "
                               f"estimated plain step (the given baseline is of the unprofiled clock, the profile not "
                               f"calibrated), inside that estimate's error ({lo:.2f}x-{hi:.2f}x of the measured speed-up "
                               "on real SGLang sweeps); give --calibrate-tps (unprofiled tokens/s at the profiled step "
                               "count)", figures)
    if w.get("verdict_uncertain"):
        from analyze.tools.whatif.model import PROFILE_ALONE_RATIO

        lo, hi = PROFILE_ALONE_RATIO
        return [], F.RuleCheck(rule, F.NO_DATA, f"uncertain: {best / base:.3f}x against an estimated baseline, inside the "
                               f"error of an estimated baseline ({lo:.2f}x-{hi:.2f}x of the measured speed-up on real "
                               "SGLang sweeps, calibrated or not); give --baseline-tps (unprofiled tokens/s without "
                               "speculation)", figures)
    through = bool(w.get("speedup_through_estimate"))   # a given baseline against an uncalibrated profile
    draft = ctx.mean("draft_ns") + ctx.mean("draft_extend_ns")
    gain = 1 - prof / base                      # the time per token it saves, as a share of the cycle
    # a plain step saves the draft and draft_extend work and their host time, and the speculative verify's
    # extra host work: the saving is whatif's time per token, its own ceiling
    # on the cycle the host-bound rule takes: whatif's calibrated cycle of the batch size modelled where there is one
    # (before 2026-12-07 the profiled mean over every batch size: two findings of one list on two bases)
    cal = unprofiled_idle(ctx)
    cycle_ns = cal["cycle_ns"] if cal is not None else ctx.cycle_ns
    saving = cycle_ns * gain
    ev = dict(figures, cycle_ns=cycle_ns, cycles=ctx.n_cycles, draft_and_extend_ns=draft,
              accepted_per_request=w["accepted_per_request_profiled"], requests=w["requests"],
              tokens_per_cycle=w["tokens_per_cycle_profiled"], profiled_steps=w["profiled_steps"],
              baseline_method=w["baseline_method"], **_rounds_evidence(w),
              **({"batch": w["batch"]} if w.get("batch") is not None else {}))
    suggestion = (f"Speculation costs more than it gains here: each request gets "
                  f"{w['accepted_per_request_profiled']:.2f} accepted draft tokens per cycle "
                  f"({w['tokens_per_cycle_profiled']:.2f} tokens per cycle for {w['requests']:.1f} requests), while "
                  f"draft and draft_extend take {_us(draft)} of each {_us(ctx.cycle_ns)} cycle (profiled). Without "
                  "speculation "
                  f"{base:,.0f} tokens/s are "
                  + ("measured (given, without the profiler)" if w["baseline_source"] == "given" else
                     f"predicted ({w['baseline_source']}: {w['baseline_method']})")
                  + f", against {prof:,.0f} at the profiled {w['profiled_steps']} draft steps and {best:,.0f} at "
                  f"whatif's best, {w['best_steps']}. "
                  + ("The profile is not calibrated: the speed-up is its own over its estimated plain step; measure "
                     "tokens/s at the profiled step count without the profiler (`--calibrate-tps X`); if it holds, "
                     if through else "")
                  + ("" if w["baseline_source"] == "given" else
                     "Measure a run without speculation first (`analyze-trace advise REPORT --baseline-tps Y`, or "
                     "`analyze-trace whatif REPORT --baseline NOSPEC_REPORT`); if it holds, ")
                  + ("Turn" if w["baseline_source"] == "given" and not through else "turn")
                  + " speculation off or raise the acceptance (a drafter trained on this target's own outputs, the "
                  "same chat template and sampling)." + _batch_said(w))
    remove = F.Setting(F.REMOVE, S.SPEC_ALGORITHM, note="no speculation: predicted faster than every step count")
    settings = ((F.Setting(F.COMPARE, "tokens/s at the profiled step count without the profiler",
                           note="--calibrate-tps: the speed-up rests on the profile's estimated plain step"), remove)
                if through else (remove,) if w["baseline_source"] == "given" else (
        F.Setting(F.COMPARE, "a run without " + S.SPEC_ALGORITHM, note="measure the baseline whatif estimated"), remove))
    at = "" if cal is None else ((f" at batch {cal['batch']}" if cal["batch"] is not None else "")
                                 + f" without the profiler, {_us(cycle_ns)}")
    f = F.Finding(rule, f"speculation does not pay: {prof:,.0f} tokens/s against {base:,.0f} without it",
                  saving, saving, cycle_ns,
                  f"whatif: the time per token that running without speculation saves ({_pct(gain)} of the cycle{at})",
                  suggestion, ev, settings)
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"no speculation predicted at {base:,.0f} tokens/s, above every step "
                            f"count (best {best:,.0f})", figures)


def rule_adaptive_steps(ctx: Context):
    """The best step count differs between the batch sizes the load visits: SGLang can switch by batch
    size (--speculative-adaptive with a config whatif writes)."""
    rule = F.ADAPTIVE_STEPS
    w = ctx.whatif
    if not w:
        return [], F.RuleCheck(rule, F.NO_DATA, "no whatif model of this trace")
    rows = w.get("per_batch")
    if not rows:
        return [], F.RuleCheck(rule, F.NOT_APPLICABLE, "fewer than two batch sizes with enough decode cycles each")
    uses = {r["batch"]: r["best_steps"] for r in rows}     # >= 1: SGLang's adaptive 0 still verifies (whatif.per_batch)
    from analyze.tools.whatif.per_batch import not_paying

    off = not_paying(pd.DataFrame(rows))
    figures = {"best_by_batch": {str(b): u for b, u in uses.items()}, "not_paying_batches": off}
    leans = [float(r["speedup"]) for r in rows if r.get("speedup") is not None and r["speedup"] == r["speedup"]]
    if len(off) == len(rows) or (len(leans) == len(rows) and max(leans) <= 1):
        # every batch size leans to no speculation (some inside the estimate's error, '?'): no bucket to switch in
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, "speculation is predicted to pay at no batch size measured ("
                               + ", ".join(f"{r['batch']}: {r['speedup']:.2f}x" for r in rows)
                               + "; the speculation rule's case): no adaptive config", figures)
    if len(set(uses.values())) < 2:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, "one step count is best at every batch size measured: "
                               + ", ".join(f"{b}: {u}" for b, u in uses.items()), figures)
    n = sum(r["cycles"] for r in rows)
    gain = sum(r["cycles"] * max(0.0, 1 - r["tokens_per_s_profiled"] / max(r["tokens_per_s_best"], 1e-9))
               for r in rows) / n
    saving = ctx.cycle_ns * gain
    def verdict(r) -> str:
        if r.get("verdict_uncertain"):        # inside the estimated-baseline band (whatif.model.verdict_uncertain)
            return ", uncertain whether speculation pays"
        if r.get("verdict") == "break_even":  # within whatif.model.BREAK_EVEN of no speculation
            return ", break-even"
        return ", speculation does not pay" if not r["best_or_off"] else ""

    desc = "; ".join(f"batch {r['batch']}: {r['best_steps']} steps ({r['speedup']:.2f}x, {r['baseline_source']} "
                     "baseline" + verdict(r) + ")" for r in rows)
    suggestion = (f"The best draft step count differs by batch size ({desc}). SGLang switches it by batch size with "
                  f"{S.SPEC_ADAPTIVE} and a config: write it with `analyze-trace whatif REPORT --adaptive-config "
                  "adaptive.json` (measured no-speculation tokens/s per batch size: --batch-baseline-tps M=Y,...).")
    settings = (F.Setting(F.SET, S.SPEC_ADAPTIVE, note="switch the step count by batch size at run time"),
                F.Setting(F.SET, S.SPEC_ADAPTIVE_CONFIG, "adaptive.json",
                          note="written by analyze-trace whatif --adaptive-config"))
    f = F.Finding(rule, "the best step count depends on the batch size: " + ", ".join(
        f"{b}: {u}" for b, u in uses.items()), saving, saving, ctx.cycle_ns,
        "whatif per batch size: the cycle-weighted time per token the best step count of each batch size saves",
        suggestion, dict(figures, per_batch_cycles=n, cycle_ns=ctx.cycle_ns), settings)
    return [f], F.RuleCheck(rule, F.TRIGGERED, "best step counts differ: " + desc, figures)


STEP_GAIN = 0.01
"""The draft_steps rule names a step count whatif predicts at least this much faster than the profiled one (its
pick's own tolerance: whatif.model's best is the fewest steps within 1% of the highest)."""


def _modelled_cycle(ctx: Context) -> dict:
    """The batch size whatif models (its steady cycles here; every cycle where it models none): ``rows``, ``batch``,
    and ``cycle_ns``, the cycle a whatif-based finding's saving is a share of, on one base with whatif's gain: the
    calibrated cycle where whatif was calibrated (:func:`unprofiled_idle`; ``calibrated`` True, ``profiled_cycle_ns``
    that batch size's profiled mean), the profiled mean otherwise."""
    w = ctx.whatif or {}
    batch = w.get("batch")
    at = _rows_at(ctx, batch) if batch is not None else None
    rows = at if at is not None and len(at) else ctx.per_cycle
    v = pd.to_numeric(rows[ctx.time_col], errors="coerce").mean() if ctx.time_col in rows.columns and len(rows) \
        else float("nan")
    profiled = (float(v) if v == v else 0.0) or ctx.cycle_ns
    cal = unprofiled_idle(ctx)
    return {"rows": rows, "batch": batch, "cycle_ns": cal["cycle_ns"] if cal is not None else profiled,
            "calibrated": cal is not None, "profiled_cycle_ns": profiled}


def _lean_off_said(ctx: Context) -> str:
    """The caution after a step count whatif recommends where its best still runs slower than its (estimated or
    given) no-speculation baseline: that speculation does not pay where the speculation rule says so, that whatif
    leans to no speculation where the verdict is uncertain; "" where its best is faster, or without a baseline."""
    w = ctx.whatif or {}
    best, base = w.get("tokens_per_s_best"), w.get("tokens_per_s_baseline")
    if not (best and base and base == base and base > 0) or best >= base:
        return ""
    if rule_speculation(ctx)[1].status == F.TRIGGERED:
        return (f" Speculation itself does not pay here ({best / base:.2f}x at whatif's best against no speculation: "
                "the speculation finding): the step count matters only where it is kept.")
    if w.get("verdict") == "break_even":
        return (f" Speculation is a break-even here ({best / base:.2f}x at whatif's best, within 3% of no "
                "speculation): the step count matters only where it is kept.")
    return (f" If speculation is kept: whatif leans to no speculation ({best / base:.2f}x at its best, a verdict it "
            "cannot make: the speculation rule says what it needs), so measure before keeping it.")


def rule_draft_steps(ctx: Context):
    """whatif's best step count where it differs from the profiled one and no other rule names it: the verify
    rule names the step count where verify is half the cycle or more, the speculation rule whatif's best where it
    finds speculation does not pay; where verify is under half the cycle (:func:`phase_share`: of the calibrated
    cycle where whatif was calibrated) the step count still decides tokens/s (the real 5-step profile at batch 16,
    uncalibrated: verify 25% of the profiled cycle, 2 steps predicted +5.9%, measured within 0.9% of the best).
    On a live log of an eager run (:func:`eager_live`) the verify rule stands aside whatever verify's share (its
    events time the phase's wall span, not its GPU time), so this rule names the step count there: whatif models
    the cycle from the same spans, the cycle being wall time too, and its finding words verify's share as a span."""
    rule = F.DRAFT_STEPS
    w = ctx.whatif
    if not w:
        return [], F.RuleCheck(rule, F.NO_DATA, "no whatif model of this trace"
                               + (f": {ctx.whatif_error}" if ctx.whatif_error else ""))
    figures = {"profiled_steps": w["profiled_steps"], "best_steps": w["best_steps"],
               "tokens_per_s_profiled": w["tokens_per_s_profiled"], "tokens_per_s_best": w["tokens_per_s_best"]}
    if w.get("few_cycles"):
        return [], F.RuleCheck(rule, F.NO_DATA, f"whatif's {_few_said(w)}", dict(figures, cycles=w["cycles"]))
    ps = phase_share(ctx, "verify_ns")
    share, verify = ps["share"], ps["phase_ns"]
    where = " without the profiler" if ps["calibrated_cycle"] else ""
    if verify > 0 and share >= VERIFY_SHARE and not ctx.eager_spans:   # eager live log: verify_dominated stands aside
        return [], F.RuleCheck(rule, F.NOT_APPLICABLE, f"the verify_dominated finding names the step count (verify is "
                               f"{_pct(share)} of the cycle{where})", figures)
    prof, best, base = w["tokens_per_s_profiled"], w["tokens_per_s_best"], w["tokens_per_s_baseline"]
    speedup = best / base if base == base and base > 0 else None
    if rule_speculation(ctx)[1].status == F.TRIGGERED:      # its finding names whatif's best itself
        return [], F.RuleCheck(rule, F.NOT_APPLICABLE, f"the speculation finding: no step count pays ({speedup:.2f}x at "
                               f"whatif's best, {w['best_steps']}, against no speculation)", figures)
    gain = 1 - prof / best if best > 0 else 0.0
    if w["best_steps"] == w["profiled_steps"] or gain < STEP_GAIN:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"the profiled {w['profiled_steps']} draft steps are the "
                               f"predicted best or within {_pct(STEP_GAIN)} of it ({w['best_steps']}: {best:,.0f} "
                               f"tokens/s against {prof:,.0f})", figures)
    cycle_ns, batch = ps["cycle_ns"], ps["batch"]
    saving = max(0.0, cycle_ns * gain)
    edge = (f"; {w['best_steps']} is the edge of the searched {w['steps_searched'][0]}..{w['steps_searched'][1]}: "
            "the optimum may lie beyond it") if w.get("best_at_edge") else ""
    extrapolated = bool(w.get("best_extrapolated"))
    settings = S.steps_settings(w["best_steps"])
    calibrated = w.get("calibration_shift_ns") is not None      # calibrated at the profiled step count
    ev = dict(figures, cycles=ctx.n_cycles, cycle_ns=cycle_ns, requests=w["requests"], calibrated=calibrated,
              best_extrapolated=extrapolated, speedup_best=speedup, verdict_uncertain=bool(w.get("verdict_uncertain")),
              **_rounds_evidence(w), **({"batch": batch} if batch is not None else {}),
              **({"verify_span_share": share, "eager_spans": True} if ctx.eager_spans else {}))
    steps = f"{w['best_steps']} draft step{'' if w['best_steps'] == 1 else 's'}"
    suggestion = (f"whatif predicts {steps} at {best:,.0f} tokens/s against {prof:,.0f} at the profiled "
                  f"{w['profiled_steps']} (+{best / prof - 1:.1%}){edge}"
                  + (f" (extrapolated: acceptance beyond the profiled {w['profiled_steps']} draft positions is the "
                     "last measured rate repeated)" if extrapolated else "") + ". "
                  + ((f"Verify's event span (an eager run: its wall time, the host's launches included, not its "
                      f"GPU time) is {_pct(share)} of the cycle{where}: " if ctx.eager_spans else
                      f"Verify is {_pct(share)} of the cycle{where}: ") if verify > 0 else "")
                  + "the step count trades the draft's host and GPU time a step against the tokens it adds; check it "
                  f"with `analyze-trace whatif` (intervals) and set {' '.join(x.short() for x in settings)}."
                  + _lean_off_said(ctx)
                  + ("" if calibrated else " The profile is not calibrated (the profiler stretches a host-bound cycle "
                     "by a different amount at each step count): give --calibrate-tps X, your unprofiled tokens/s at "
                     "the profiled step count.") + _batch_said(w))
    f = F.Finding(rule, f"draft steps: {w['best_steps']} instead of {w['profiled_steps']} (+{best / prof - 1:.1%} "
                  "tokens/s predicted" + (", extrapolated" if extrapolated else "") + ")", saving, saving, cycle_ns,
                  f"whatif (point estimate): {steps} give the same tokens in {_pct(gain)} less "
                  "time" + (f" (batch {batch}'s cycle)" if batch is not None else ""), suggestion, ev, tuple(settings))
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"{steps} predicted to take {_pct(gain)} less time per token than the "
                            f"profiled {w['profiled_steps']}", figures)


def rule_host_bound_live(ctx: Context):
    """The host-bound rule on a live timing log whose CUDA-graph replays were timed (``replay_ns``): the
    replays' GPU stream time against the cycle. The phase spans hold the phases' host time as well (the log
    cannot split the rest), so the replays are the GPU's time per cycle, less only what runs outside the
    graphs (on real SGLang 1-18% of a phase's kernels). None where the log has no replay times."""
    rule = F.HOST_BOUND
    taken = replay_share(ctx.analysis.cycles)       # the headline's figure: one definition
    if not taken or not ctx.cycle_ns:
        return None
    replay = taken * ctx.cycle_ns
    idle = ctx.cycle_ns - replay
    share = idle / ctx.cycle_ns
    figures = {"replay_ns": replay, "replay_share": replay / ctx.cycle_ns, "not_in_replays_ns": idle,
               "not_in_replays_share": share, "cycle_ns": ctx.cycle_ns, "threshold_share": IDLE_SHARE,
               "timed_phases_share": ctx.mean("busy_ns") / ctx.cycle_ns}
    if share < IDLE_SHARE:
        return [], F.RuleCheck(rule, F.BELOW_THRESHOLD, f"the CUDA-graph replays took {_pct(1 - share)} of the cycle "
                               f"on the GPU: {_pct(share)} outside them (< {_pct(IDLE_SHARE)})", figures)
    settings = [F.Setting(F.CHECK, "the batch per cycle", note="more concurrent requests amortise the host's "
                          "per-cycle time"),
                F.Setting(F.CHECK, "the overlap scheduler", note="it prepares the next batch on the host while the "
                          "GPU runs this one (a profile's launch gaps say whether host and GPU take turns)")]
    suggestion = (f"The CUDA-graph replays took {_us(replay)} of each {_us(ctx.cycle_ns)} cycle on the GPU "
                  f"({_pct(1 - share)}); the timed phases span {_pct(figures['timed_phases_share'])}: the rest of "
                  f"their time, and {_pct(share)} of the cycle in all, is host time or GPU work outside the graphs: "
                  "the decode loop is host bound. A profile (profile-trace) shows where the host time goes.")
    f = F.Finding(rule, f"host-bound decode loop: the graph replays are {_pct(1 - share)} of the cycle", idle, idle,
                  ctx.cycle_ns, "upper bound: the cycle time outside the CUDA-graph replays", suggestion, figures,
                  tuple(settings))
    return [f], F.RuleCheck(rule, F.TRIGGERED, f"the CUDA-graph replays took {_pct(1 - share)} of the cycle "
                            "on the GPU", figures)


RULE_FUNCTIONS = (rule_verify_dominated, rule_allreduce, rule_host_bound, rule_straggler, rule_draft_extend,
                  rule_speculation, rule_adaptive_steps, rule_draft_steps)
KERNEL_RULES = {rule_allreduce: F.ALLREDUCE, rule_host_bound: F.HOST_BOUND, rule_straggler: F.STRAGGLER}
LIVE_RULES = {rule_host_bound: rule_host_bound_live}
"""A kernel rule's stand-in on a live timing log: its result, or None where the log lacks what it reads."""
"""The rules whose evidence needs kernels or GPU ops (all-reduce kinds and collectives across ranks,
launch gaps and GPU idle): not applicable to a live timing log."""


def live_check(ctx: Context, rule: str) -> F.RuleCheck:
    """A kernel-based rule's check on a live timing log: not applicable, with what the log does measure."""
    figures = {"cycle_ns": ctx.cycle_ns}
    if rule == F.ALLREDUCE:
        ar = ctx.mean("allreduce_ns")
        figures.update(allreduce_ns=ar, allreduce_share=ar / ctx.cycle_ns if ctx.cycle_ns else 0.0)
        why = (f"a live timing log has no kernels (the all-reduce's kind, algorithm and protocol come from kernel "
               f"names); its timed all-reduce is {_pct(figures['allreduce_share'])} of the cycle, inside the phases "
               "that ran it")
    elif rule == F.HOST_BOUND:
        rest = ctx.cycle_ns - ctx.mean("busy_ns")
        figures.update(outside_timed_ns=rest, outside_timed_share=rest / ctx.cycle_ns if ctx.cycle_ns else 0.0)
        why = (f"a live timing log cannot tell GPU idle from untimed GPU work and host time (no kernels, no launch "
               f"gaps): {_pct(figures['outside_timed_share'])} of the cycle is outside the timed phases")
    else:
        why = "a live timing log has no collectives to compare the ranks' arrival by (no kernels)"
    return F.RuleCheck(rule, F.NOT_APPLICABLE, why, figures)


def advise(analysis, *, whatif: bool = True, message_sizes: bool = True, n_boot: int = 0,
           baseline_tps: float | None = None, calibrate_tps: float | None = None, batch: int | None = None,
           request_tokens="auto", calibration_source: dict | None = None) -> F.Advice:
    """Every rule over ``analysis`` (an :class:`analyze.Analysis`): ranked findings and one check per rule.
    ``baseline_tps`` / ``calibrate_tps``: unprofiled tokens/s without speculation / of the profiled
    configuration, for the step-count and speculation rules (see whatif)."""
    if analysis.cycles is None or analysis.cycles.empty:
        checks = [F.RuleCheck(r, F.NO_DATA, "no decode cycles (`decode_cycle` ranges): the rules measure per cycle")
                  for r in F.RULES]
        return F.Advice([], checks, cycle_ns=0.0, cycles=0, ranks=int(analysis.ranks["rank"].nunique())
                        if len(analysis.ranks) else 0, warmup_cycles=0)
    ctx = build_context(analysis, whatif=whatif, message_sizes=message_sizes, n_boot=n_boot,
                        baseline_tps=baseline_tps, calibrate_tps=calibrate_tps, batch=batch,
                        request_tokens=request_tokens, calibration_source=calibration_source)
    found, checks = [], []
    for fn in RULE_FUNCTIONS:
        if ctx.live and fn in KERNEL_RULES:
            live_fn = LIVE_RULES.get(fn)
            live_rule = live_fn(ctx) if live_fn is not None else None
            if live_rule is None:
                checks.append(live_check(ctx, KERNEL_RULES[fn]))
                continue
            f, c = live_rule
            found += f
            checks.append(c)
            continue
        f, c = fn(ctx)
        found += f
        checks.append(c)
    return F.Advice(F.ranked(found), checks, cycle_ns=ctx.cycle_ns, cycles=ctx.n_cycles, ranks=ctx.ranks,
                    warmup_cycles=ctx.warmup_cycles, whatif=ctx.whatif, whatif_error=ctx.whatif_error,
                    cycles_batch=ctx.cycles_batch, live=bool(ctx.live))
