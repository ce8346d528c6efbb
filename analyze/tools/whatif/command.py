"""``analyze-trace whatif REPORT [...]``: the command line of the what-if model (docs/whatif.md)."""
from __future__ import annotations

import json
import math
import sys

import pandas as pd

from analyze import output_policy
from analyze.errors import (ArgumentParser, MissingInput, TraceError, UnsuitableInput, UsageError, non_negative_int,
                            positive_int, request_tokens_arg)
from analyze.tools.sides import load_side
from analyze.tools.whatif import acceptance as acc_mod
from analyze.tools.whatif.model import MIN_CYCLES, N_BOOT, check_verify_scaling, live_cut_request_tokens, whatif
from analyze.tools.whatif.render import plot_whatif, render_whatif, to_json


def parse_steps(text: str) -> list[int]:
    """``1..10``, ``1-6``, ``2,3,5`` (a range written high to low, ``6..1``, is the same range)."""
    try:
        out = _step_list(text)
    except ValueError:
        out = []
    if not out or min(out) < 1:
        raise ValueError(f"--steps {text!r}: step counts are integers >= 1, e.g. 1..10")
    return sorted(set(out))


def _step_list(text: str) -> list[int]:
    out = []
    for part in str(text).split(","):
        part = part.strip()
        for sep in ("..", "-", ":"):
            if sep in part:
                a, b = part.split(sep, 1)
                lo, hi = sorted((int(a), int(b)))
                out += list(range(lo, hi + 1))
                break
        else:
            if part:
                out.append(int(part))
    return out


def parse_calibration(text) -> tuple[int | None, float | dict | None]:
    """``--calibrate-tps``: ``X`` or ``K:X`` -> (K or None, X); None -> (None, None). Given several times
    (a list: one ``K:X`` for each profiled step count of separately profiled runs) -> (None, {K: X})."""
    if text is None:
        return None, None
    if isinstance(text, (list, tuple)):
        if len(text) == 1:
            return parse_calibration(text[0])
        pairs = [parse_calibration(t) for t in text]
        ks = [k for k, _ in pairs]
        if None in ks or len(set(ks)) != len(ks):
            raise ValueError("--calibrate-tps given several times: K:X each (tokens/s X at K steps), one a step count")
        return None, {k: x for k, x in pairs}
    k, _, x = str(text).rpartition(":")
    try:
        val = float(x)
        kk = int(k) if k else None
    except ValueError:
        raise ValueError(f"--calibrate-tps {text!r}: give X or K:X (tokens/s, step count)") from None
    if not (val > 0 and math.isfinite(val)) or (kk is not None and kk < 1):
        raise ValueError(f"--calibrate-tps {text!r}: tokens/s a finite number > 0, step count >= 1")
    return kk, val


def sweep_tokens_per_s(data: dict, batch: int | None) -> tuple[dict, float | None]:
    """{steps: tokens/s} and the no-speculation tokens/s of one batch size from a real-SGLang sweep
    (``recipes/sglang_sweep.sh``'s ``sweep.json``: runs of {steps, batches: [{batch, tokens_per_s}]}).
    ``batch`` None: the sweep's only batch size (an error when it has several). Runs of SGLang's adaptive
    mode (an ``adaptive`` record; the recipe files them under ``adaptive_runs``) are no fixed step count:
    left out. Several engines of one step count (a repeat, or the timing-mode recipe's engines): their
    mean (engine-to-engine spread on one machine is 5-15% at small batch sizes: one engine is a draw)."""
    runs = [r for r in data["runs"] if not r.get("adaptive")]
    sizes = sorted({int(b["batch"]) for r in runs for b in r["batches"]})
    if batch is None:
        if len(sizes) != 1:
            raise ValueError(f"the sweep holds batch sizes {sizes}: say which one (--batch M)")
        batch = sizes[0]
    got: dict[int, list[float]] = {}
    for r in runs:
        for b in r["batches"]:
            if int(b["batch"]) == int(batch):
                got.setdefault(int(r["steps"]), []).append(float(b["tokens_per_s"]))
    if not got:
        raise ValueError(f"the sweep has no batch {batch} (batch sizes: {sizes})")
    mean = {k: sum(v) / len(v) for k, v in got.items()}
    return {k: v for k, v in mean.items() if k != 0}, mean.get(0)


def read_measured(path, batch: int | None = None) -> tuple[dict, float | None]:
    """{steps: tokens/s} (+ the no-speculation tokens/s) from a JSON file: ``{"3": 1234.5, ...}``, the
    workload's ``--out-json`` (``ranks[0].runs``: [{mode, steps, tokens_per_s}]), or a real-SGLang sweep
    (:func:`sweep_tokens_per_s`, at ``batch``). A figure that is no finite number >= 0 is a ValueError."""
    out, base = _read_measured(path, batch)
    bad = [x for x in [*out.values(), base] if x is not None and not (math.isfinite(x) and x >= 0)]
    if bad:
        raise ValueError(f"tokens/s {bad[0]!r}: not a finite number >= 0")
    return out, base


def _read_measured(path, batch: int | None = None) -> tuple[dict, float | None]:
    data = json.loads(open(path).read())
    if isinstance(data, dict) and isinstance(data.get("runs"), list) and data["runs"] \
            and isinstance(data["runs"][0], dict) and "batches" in data["runs"][0]:
        return sweep_tokens_per_s(data, batch)
    if isinstance(data, dict) and isinstance(data.get("ranks"), list) and data["ranks"]:
        data = data["ranks"][0]          # spec_workload --out-json: rank 0's runs
    runs = data.get("runs") if isinstance(data, dict) else data
    if isinstance(data, dict) and runs is None:
        for key in ("rank0", "result", "info"):
            if isinstance(data.get(key), dict) and "runs" in data[key]:
                runs = data[key]["runs"]
        if runs is None:
            vals = {int(k): float(v) for k, v in data.items() if str(k).isdigit()}
            return vals, (float(data["nospec"]) if "nospec" in data else None)
    out, base = {}, None
    for run in runs or []:
        if run.get("mode") == "nospec" or run.get("steps") in (None, 0):
            base = float(run["tokens_per_s"])
        else:
            out[int(run["steps"])] = float(run["tokens_per_s"])
    return out, base


def parse_batch_values(text, option: str) -> dict[int, float]:
    """``1=546.5,16=6654`` -> {1: 546.5, 16: 6654.0} (batch sizes >= 1, values > 0)."""
    out: dict[int, float] = {}
    if not text:
        return out
    for part in str(text).split(","):
        m, _, x = part.partition("=")
        try:
            batch, value = int(m), float(x)
        except ValueError:
            raise ValueError(f"{option} {text!r}: give M=X pairs, e.g. 1=546.5,16=6654") from None
        if batch < 1 or not value > 0:
            raise ValueError(f"{option} {text!r}: batch sizes >= 1 and tokens/s > 0")
        out[batch] = value
    return out


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="analyze-trace whatif",
                                description="Predict cycle time, tokens per cycle and tokens/s for each draft "
                                            "step count from profiled EAGLE decode cycles (see docs/whatif.md).")
    p.add_argument("reports", nargs="+", help="profile(s): report, directory of per-rank reports or --json "
                                              "result; several with different step counts refine the model")
    p.add_argument("--steps", default="1..10", help="step counts to predict: a range 1..6 (or 1-6, 1:6), a list 1,3,5, or "
                   "both (default 1..10)")
    p.add_argument("--profiled-steps", default=None,
                   help="draft steps of each profile, comma separated (default: inferred from the trace)")
    p.add_argument("--baseline", metavar="REPORT", help="a no-speculation report (else the baseline is estimated)")
    p.add_argument("--extrapolate", choices=acc_mod.EXTRAPOLATIONS, default="repeat",
                   help="acceptance beyond the profiled positions (default: the last rate repeats)")
    p.add_argument("--measured", metavar="JSON", help="tokens/s measured without the profiler, to compare "
                   "(a {steps: tokens/s} JSON, or recipes/sglang_sweep.sh's sweep.json at --batch)")
    p.add_argument("--batch", metavar="M", type=positive_int, default=None,
                   help="model only the decode cycles of M requests (a profile that holds several batch sizes)")
    p.add_argument("--calibrate-tps", metavar="[K:]X", action="append",
                   help="your tokens/s of the profiled configuration (K steps; default the profiled step count) "
                        "measured WITHOUT the profiler: removes the profiler's overhead from every predicted cycle. "
                        "Profiles of several step counts: give K:X once for each (each run's profiler overhead "
                        "differs) and the overhead is fitted across their unprofiled cycles")
    p.add_argument("--calibrate-live", metavar="LOG",
                   help="calibrate from a live timing log (a SPECPROF_TIMING=1 log file or directory, docs/live.md) "
                        "of the profiled configuration: its tokens/s over its steady cycles at the profile's step "
                        "count (and --batch; with --per-batch, each batch size from its own cycles), a steady rate "
                        "(the rounds' tail stays the model's)")
    p.add_argument("--calibrate-sglang-log", metavar="LOG",
                   help="calibrate from an unprofiled SGLang server's own log of the profiled configuration (run at "
                        "--log-level info): the median 'gen throughput' of its 'Decode batch' lines at --batch M "
                        "running requests, a steady rate (the rounds' tail stays the model's)")
    p.add_argument("--baseline-tps", metavar="Y", type=float,
                   help="no-speculation tokens/s measured without the profiler (instead of --baseline)")
    p.add_argument("--verify-scaling", metavar="F|constant|fit", default=None,
                   help="one profile: how verify time grows with the verified tokens. Default 'fit': a line in the "
                        "verified tokens over the profile's cycles when their batch sizes differ, else constant (said "
                        "so); 'constant'; or F in [0, 1], the fraction of verify time proportional to the tokens")
    p.add_argument("--request-tokens", metavar="N|steady|auto", default="auto", type=request_tokens_arg,
                   help="what the tokens/s is of: rounds of requests of N new tokens started together (a benchmark "
                        "round, which ends with its slowest request); 'steady': requests replaced as they finish (a "
                        "server under load); default 'auto': the profile's own lockstep rounds at --batch when it ran "
                        "in them, else steady")
    p.add_argument("--per-batch", action="store_true",
                   help="the best step count per batch size the profile(s) hold (each modelled from its own cycles)")
    p.add_argument("--batch-tps", metavar="M=X[,M=X...]", default=None,
                   help="with --per-batch: unprofiled tokens/s of the profiled configuration per batch size (calibrates)")
    p.add_argument("--batch-baseline-tps", metavar="M=Y[,M=Y...]", default=None,
                   help="with --per-batch: no-speculation tokens/s measured without the profiler, per batch size")
    p.add_argument("--adaptive-config", metavar="PATH", default=None,
                   help="write SGLang's --speculative-adaptive-config JSON from the per-batch best step counts "
                        "(implies --per-batch)")
    p.add_argument("--json", metavar="PATH", help="write the prediction (or the per-batch table) as JSON ('-': standard "
                                                  "output, the text then goes to standard error)")
    p.add_argument("--plot", metavar="PATH", help="write predicted (and --measured) tokens/s per step count as a figure "
                                                  "(PNG or SVG by the suffix)")
    p.add_argument("--boot", type=non_negative_int, default=N_BOOT,
                   help=f"bootstrap resamples (default {N_BOOT}; 0: point estimates, no intervals)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true",
                   help="let an output replace an existing Nsight Systems report (never an input)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def _per_batch_command(args, steps, ks, scaling, batch_tps, batch_base) -> int:
    from analyze.atomic import atomic_write
    from analyze.render.outputs import _plain, finite, records
    from analyze.tools.whatif import per_batch as PB
    from analyze.tools.whatif.render import render_per_batch

    sides = [load_side(r) for r in args.reports]
    sources = None
    counts = PB.batch_counts(sides)
    sizes = [int(m) for m, n in counts.items() if m >= 1 and n >= PB.MIN_CYCLES]   # the sizes a calibration is for
    if args.calibrate_live:          # each batch size calibrated from the log's steady cycles of that size
        batch_tps, sources = live_calibrations(args.calibrate_live, sides, ks, sizes)
        if not batch_tps:            # as --calibrate-live without --per-batch: one line, exit 12
            from analyze.read.inputs import display_path

            raise UnsuitableInput(f"--calibrate-live {display_path(args.calibrate_live)}: no steady cycle at the "
                                  f"profile's step count of any of its batch sizes ({', '.join(map(str, sizes))})",
                                  args.calibrate_live)
    elif args.calibrate_sglang_log:  # each batch size from the log's lines at that many running requests
        batch_tps, sources = sglang_log_calibrations(args.calibrate_sglang_log, sides, ks, sizes)
    else:       # each batch size from the profile's own clock before its window, where it has one and none is given
        batch_tps, sources = joined_calibrations(
            clock_calibrations(sides, ks, [m for m in sizes if m not in (batch_tps or {})]), batch_tps)
    try:
        if counts.empty:    # no batch size at all: why, in the single prediction's words (no decode cycles, no
            whatif(sides, steps, profiled_steps=ks, n_boot=0)       # accept marks) where it has them
        table = PB.per_batch(sides, steps, profiled_steps=ks, extrapolation=args.extrapolate, n_boot=args.boot,
                             seed=args.seed, verify_scaling=scaling, baselines_tps=batch_base, calibrate=batch_tps,
                             calibration_sources=sources, request_tokens=args.request_tokens)
    except TraceError:
        raise
    except ValueError as exc:
        raise unsuitable(exc, args.reports) from exc
    try:
        cfg = PB.adaptive_config(table) if args.adaptive_config else None
    except ValueError as exc:          # no config to write (nothing pays, no batch size): the table still shows why
        if not args.quiet and not table.empty:
            output_policy.text_stream(args.json, None).write(render_per_batch(table))
        raise UnsuitableInput(str(exc)) from exc
    if args.json:
        with atomic_write(args.json) as f:
            json.dump(finite({"per_batch": records(table), "predictions": table.attrs.get("predictions", {}),
                              "not_modelled": table.attrs.get("not_modelled", {}),
                              "few_timed": table.attrs.get("few_timed", {}),
                              "unused_figures": table.attrs.get("unused_figures", {}), "adaptive_config": cfg}),
                      f, indent=1, default=_plain, allow_nan=False)
            f.write("\n")
    if cfg is not None:
        with atomic_write(args.adaptive_config) as f:
            json.dump(cfg, f, indent=1)
            f.write("\n")
    if not args.quiet:
        output_policy.text_stream(args.json, args.adaptive_config).write(render_per_batch(table, args.adaptive_config)
                                                                         + output_policy.wrote_lines(args.json))
    return 0


def live_sides(sides: list, ks, batch: int | None = None) -> tuple[list, dict, list, list]:
    """Live timing logs (run/live.py) and profiles whose shim marked each cycle's step count that ran at
    several step counts cut into one side per step count (whatif then fits over them as over several
    profiles; with ``batch``, the step counts that ran it), the tokens/s each step count of a live log
    measured ({steps: sides.live_tokens_per_s(...)}, empty when no live log was cut), and the step counts
    left out at ``batch`` because none of their cycles there carries phase times (a sampled log's step count
    that ran B only in untimed cycles), and those left out because they ran fewer than ``MIN_CYCLES`` cycles
    (at ``batch``) where another step count ran more: each [(label, steps, cycles)]."""
    from analyze.tools.sides import cut_by_steps, live_tokens_per_s

    out, measured, untimed, few = [], {}, [], []
    for side in sides:
        parts, no_times, handful = cut_by_steps(side, batch, MIN_CYCLES)
        untimed += no_times
        few += handful
        if len(parts) > 1:
            if ks is not None:
                raise UsageError(f"{side.label}: a {'live timing log' if side.live else 'profile'} of several step "
                                 "counts says each cycle's step count itself: no --profiled-steps")
            for part in parts if side.live else ():     # a profile's tokens/s is the profiled clock's: no truth
                k = int(part.spec_config.steps) if part.spec_config is not None else None
                got = live_tokens_per_s(part.cycles, steps=k, batch=batch)
                if got is not None:
                    measured[k] = got
        out += parts
    return out, measured, untimed, few


def _live_log_and_steps(path, sides: list, ks, cal_k):
    """(the live log's analysis, the step count to calibrate) for ``--calibrate-live PATH``."""
    from analyze.read.inputs import display_path
    from analyze.run import api
    from analyze.run.live import is_live, live_paths
    from analyze.tools.sides import marked_steps
    from analyze.tools.whatif.model import infer_steps

    if live_paths([path]) is None:
        raise UsageError(f"--calibrate-live {display_path(path)}: not a live timing log (a *.parquet file or a "
                         "directory of them)")
    log = api.load(path)
    if not is_live(log):
        raise UsageError(f"--calibrate-live {display_path(path)}: not a live timing log")
    if cal_k is None:
        found = sorted(set(ks)) if ks else sorted({k for k in (infer_steps(s)[0] for s in sides) if k is not None})
        if len(found) > 1 and not ks and all(marked_steps(s) is not None for s in sides):
            # one adaptive profile cut by the step count each cycle ran (spec_steps marks): calibrated at the
            # step count most of its cycles ran, which the live log of the same server ran most too
            cycles = {}
            for s in sides:
                k = infer_steps(s)[0]
                cycles[k] = cycles.get(k, 0) + len(s.cycles)
            found = [max(sorted(cycles), key=lambda k: cycles[k])]
        if len(found) != 1:
            raise UsageError(f"--calibrate-live: the profiles' step count is {found or 'unknown'}: give one profile "
                             "step count (--profiled-steps K)")
        cal_k = found[0]
    return log, int(cal_k)


def live_calibrations(path, sides: list, ks, batches) -> tuple[dict, dict]:
    """``--calibrate-live PATH --per-batch``: ({batch: the log's steady tokens/s at the profiles' step
    count and that batch}, {batch: its source}); a batch size the log has no steady cycle of is left
    out (that row is then not calibrated, and says so)."""
    from analyze.read.inputs import display_path
    from analyze.tools.sides import live_tokens_per_s

    log, k = _live_log_and_steps(path, sides, ks, None)
    tps, sources = {}, {}
    for m in batches:
        got = live_tokens_per_s(log.cycles, steps=k, batch=int(m))
        if got is not None:
            tps[int(m)] = float(got["tokens_per_s"])
            sources[int(m)] = dict(got, kind="live_log", path=display_path(path))
    return tps, sources


def live_calibration(path, sides: list, ks, cal_k, batch) -> tuple[int, float, dict]:
    """(step count, tokens/s, source) for ``--calibrate-live PATH``: the live log's tokens/s over its
    steady cycles at the profiles' step count (``--profiled-steps``, else inferred from the profile)
    and ``batch`` (:func:`analyze.tools.sides.live_tokens_per_s`)."""
    from analyze.read.inputs import display_path
    from analyze.tools.sides import live_step_counts, live_tokens_per_s

    log, cal_k = _live_log_and_steps(path, sides, ks, cal_k)
    got = live_tokens_per_s(log.cycles, steps=cal_k, batch=batch)
    if got is None:
        have = live_step_counts(log.cycles)
        raise UnsuitableInput(f"--calibrate-live {display_path(path)}: no steady cycle at {cal_k} draft steps"
                              + (f" of batch {batch}" if batch is not None else "")
                              + f" (the log's step counts: {', '.join(map(str, have)) or 'none recorded'})", path)
    source = dict(got, kind="live_log", path=display_path(path))
    same = profiled_process(log, sides)
    if same:
        source["profiled_pids"] = same
    return int(cal_k), float(got["tokens_per_s"]), source


SGLANG_LOG_MIN_LINES = 5
"""Fewer 'Decode batch' lines at the batch size than this calibrate nothing (each is one interval of 40 steps)."""


def _sglang_log_steps(sides: list, ks) -> int:
    """The profiles' one step count, the one an SGLang log of the profiled configuration ran."""
    from analyze.tools.whatif.model import infer_steps

    found = sorted(set(ks)) if ks else sorted({k for k in (infer_steps(s)[0] for s in sides) if k is not None})
    if len(found) != 1:
        raise UsageError(f"--calibrate-sglang-log: the profiles' step count is {found or 'unknown'}: give profiles of "
                         "one step count")
    return found[0]


def _sglang_log(path, steps: int):
    """The log (read/sglang_log.py: its decode lines and how many did not read), checked: of one rank, of the
    profiled step count where the server's arguments are in it."""
    from analyze.read.inputs import display_path
    from analyze.read.sglang_log import read_log, signature_kind, what_instead

    shown = display_path(path)

    def not_a_log(what: str) -> UsageError:
        return UsageError(f"--calibrate-sglang-log {shown}: not SGLang's log ({what}): give the server's own output at "
                          "--log-level info (its 'Decode batch' lines)")

    what = signature_kind(path)       # before the file is read line by line
    if what is not None:
        raise not_a_log(what)
    try:
        log = read_log(path)
    except OSError as exc:
        raise MissingInput(f"--calibrate-sglang-log {shown}: {exc.strerror or exc}", path) from exc
    if not len(log.lines) and log.num_steps is None and not log.unreadable:
        what = what_instead(path)
        if what is not None:
            raise not_a_log(what)
    if log.num_steps is not None and log.num_steps != steps:
        raise UsageError(f"--calibrate-sglang-log {shown}: the log's server ran --speculative-num-steps "
                         f"{log.num_steps}, the profile {steps}: give the log of the profiled configuration")
    ranks = sorted(set(log.lines["rank"]))
    if len(ranks) > 1:
        raise UsageError(f"--calibrate-sglang-log {shown}: lines of {len(ranks)} ranks ({', '.join(ranks[:4])}"
                         f"{', ...' if len(ranks) > 4 else ''}), each its own throughput: give one rank's lines "
                         "(e.g. grep 'DP0 ')")
    return log


def _sglang_log_rate(log, path, batch: int, steps: int) -> tuple[float, dict] | None:
    """(the median gen throughput of the steady lines at ``batch`` running requests, its source), None under
    :data:`SGLANG_LOG_MIN_LINES` such lines. Steady (read/sglang_log.py): the previous line ran the same batch and
    no prefill came between, so the interval ran that batch (a round's tail and the gap between rounds are in
    the others)."""
    from analyze.read.inputs import display_path

    lines = log.lines
    at = lines[(lines["running"] == int(batch)) & lines["steady"]]
    if len(at) < SGLANG_LOG_MIN_LINES:
        return None
    acc = at["accept_len"].dropna()
    return float(at["tokens_per_s"].median()), {
        "kind": "sglang_log", "path": display_path(path), "lines": int(len(at)), "batch": int(batch), "steps": steps,
        "accept_len": float(acc.median()) if len(acc) else None,
        "unreadable_lines": log.unreadable}


def _seen(lines) -> str:
    steady = lines[lines["steady"]]["running"].value_counts().sort_index()
    return (" (steady lines by running requests: " + ", ".join(f"{int(m)}: {int(c)}" for m, c in steady.items())
            + ")" if len(steady) else " (none steady)" if len(lines) else
            " (no 'Decode batch' line in the file: SGLang prints them at --log-level info)")


def sglang_log_calibration(path, sides: list, ks, batch) -> tuple[int, float, dict]:
    """(step count, tokens/s, source) for ``--calibrate-sglang-log PATH``: the median ``gen throughput`` of
    SGLang's steady ``Decode batch`` lines at ``batch`` running requests (None: the one batch size the
    profiles' load visits, :func:`per_batch.visited_batches`), at the profiles' one step count."""
    from analyze.read.inputs import display_path
    from analyze.tools.whatif import per_batch as PB

    steps = _sglang_log_steps(sides, ks)
    if batch is None:
        sizes = [int(m) for m in PB.visited_batches(sides).index if m >= 1]
        if not sizes:
            raise UnsuitableInput(f"--calibrate-sglang-log: no batch size in the profile's decode cycles (no accept "
                                  "marks?): nothing to match the log's lines to", path)
        if len(sizes) > 1:
            raise UsageError(f"--calibrate-sglang-log: the profile ran batch sizes {sizes[:8]}"
                             f"{'...' if len(sizes) > 8 else ''} (each in {MIN_CYCLES}+ cycles and "
                             f"{PB.VISITED_SHARE:.0%} of them): give --batch M (the log's lines of M running requests)")
        batch = sizes[0]
    log = _sglang_log(path, steps)
    got = _sglang_log_rate(log, path, int(batch), steps)
    if got is None:
        lines = log.lines
        n = int(((lines["running"] == int(batch)) & lines["steady"]).sum())
        raise UnsuitableInput(f"--calibrate-sglang-log {display_path(path)}: {n} steady 'Decode batch' line(s) at "
                              f"{batch} running requests, fewer than {SGLANG_LOG_MIN_LINES}{_seen(lines)}", path)
    return steps, got[0], got[1]


def sglang_log_calibrations(path, sides: list, ks, sizes) -> tuple[dict, dict]:
    """``--calibrate-sglang-log PATH --per-batch``: ({batch: the log's median steady gen throughput at that many
    running requests}, {batch: its source}) for the batch sizes with enough lines (none: exit 12)."""
    from analyze.read.inputs import display_path

    steps = _sglang_log_steps(sides, ks)
    log = _sglang_log(path, steps)
    tps, sources = {}, {}
    for m in sizes:
        got = _sglang_log_rate(log, path, int(m), steps)
        if got is not None:
            tps[int(m)], sources[int(m)] = got
    if not tps:
        raise UnsuitableInput(f"--calibrate-sglang-log {display_path(path)}: fewer than {SGLANG_LOG_MIN_LINES} steady "
                              f"'Decode batch' lines at each of the profile's batch sizes "
                              f"({', '.join(map(str, sizes))}){_seen(log.lines)}", path)
    return tps, sources


CLOCK_MIN_CYCLES = 100
"""Fewer steady cycles before the capture window than this at the modelled batch size calibrate nothing: a
warm-up request is tens of cycles at a short context (a cycle's period grows with the context: 2.98 to 4.06 ms
over 1,024-token requests at 32 layers, batch 1), no clock of the profiled load."""


def clock_calibration(sides: list, ks, cal_k, batch):
    """(step count, tokens/s, source, batch) from the profile's own clock (its ``clock`` marks: the decode
    cycles the profiled process ran before nsys's capture window opened, nvtx_annotate/clock.py; the source holds
    ``round_gap_ns`` where the marks carry the gaps before rounds of that batch size) when no
    unprofiled figure is given; (cal_k, None, None, batch) unchanged where there is none to use: several
    profiles, no marks, or fewer than :data:`CLOCK_MIN_CYCLES` steady cycles at the batch size (``batch``
    None: the one batch size the profile's load visits, :func:`per_batch.visited_batches`, the rule advise and
    :func:`per_batch.modelled_batch` use; several: none is guessed)."""
    from analyze.tools.sides import clock_round_gap_ns, clock_tokens_per_s, clock_unprofiled
    from analyze.tools.whatif import per_batch as PB

    if len(sides) != 1 or not sides[0].clock or not clock_unprofiled(sides[0]):
        return cal_k, None, None, batch
    m = batch
    if m is None:
        sizes = [int(x) for x in PB.visited_batches(sides).index if x >= 1]
        if len(sizes) != 1:
            return cal_k, None, None, batch
        m = sizes[0]
    got = clock_tokens_per_s(sides[0], m)
    if got is None or got["cycles"] < CLOCK_MIN_CYCLES:
        return cal_k, None, None, batch
    k = ks[0] if ks else None
    source = dict(got, kind="profile_clock", path=sides[0].label, steps=k)
    source.update(clock_round_gap_ns(sides[0], m) or {})     # the rounds' gap on the same clock, where it has one
    return k, float(got["tokens_per_s"]), source, m


def unsuitable(exc: ValueError, reports) -> UnsuitableInput:
    """The one line for a profile that cannot answer: the model's own words (most name the report), and where it has
    no accept marks, the reports and how to record them."""
    from analyze.read.inputs import display_path
    from analyze.tools.whatif.acceptance import NoAcceptMarks

    if not isinstance(exc, NoAcceptMarks):
        return UnsuitableInput(str(exc))
    what = ", ".join(display_path(r) for r in reports)
    return UnsuitableInput(f"{what}: {exc}; the shim writes them: record the server with profile-trace (README "
                           "section 1), or give a live timing log (docs/live.md)", reports[0])


def clock_calibrations(sides: list, ks, sizes) -> tuple[dict | None, dict | None]:
    """``--per-batch`` without an unprofiled figure: ({batch: tokens/s}, {batch: source}) from the profile's own
    clock (:func:`clock_calibration`) for the batch sizes it has one of; (None, None) where none."""
    tps, sources = {}, {}
    for m in sizes:
        k, x, src, _ = clock_calibration(sides, ks, None, int(m))
        if x is not None:
            tps[int(m)], sources[int(m)] = x, src
    return (tps, sources) if tps else (None, None)


def joined_calibrations(clock: tuple | None, given: dict | None, given_sources: dict | None = None) -> tuple:
    """The figures given for some batch sizes (``given``: {batch: tokens/s}; ``given_sources``: where each came from,
    none for a figure typed in) over the profile's own clock's for the others (``clock``: :func:`clock_calibrations`'s
    pair): ({batch: tokens/s}, {batch: source}), each None where empty."""
    clock_tps, clock_sources = clock or (None, None)
    given = given or {}
    tps = {**(clock_tps or {}), **given}
    sources = {b: src for b, src in (clock_sources or {}).items() if b not in given}
    sources.update(given_sources or {})
    return tps or None, sources or None


def profiled_process(log, sides: list) -> list[int]:
    """The process ids the live log shares with the profiles' ranks: a log written by the profiled process
    itself (the timing mode on under nsys) holds the profiled clock's tokens/s, no unprofiled figure."""
    logged = set(int(x) for x in log.cycles["pid"].dropna().unique()) if "pid" in log.cycles.columns else set()
    profiled = {int(p) for s in sides if not s.live for p in s.pids}
    return sorted(logged & profiled)


def main_whatif(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        steps = parse_steps(args.steps)
        try:
            ks = [int(x) for x in args.profiled_steps.split(",")] if args.profiled_steps else None
        except ValueError:
            raise ValueError(f"--profiled-steps {args.profiled_steps!r}: integers, one per report") from None
        if ks is not None and min(ks) < 1:
            raise ValueError(f"--profiled-steps {args.profiled_steps!r}: step counts are integers >= 1")
        if ks is not None and len(ks) == 1:
            ks = ks * len(args.reports)
        if ks is not None and len(ks) != len(args.reports):
            raise ValueError("--profiled-steps: one step count per report")
        cal_k, cal_x = parse_calibration(args.calibrate_tps)
        scaling = check_verify_scaling(args.verify_scaling)
        batch_tps = parse_batch_values(args.batch_tps, "--batch-tps")
        batch_base = parse_batch_values(args.batch_baseline_tps, "--batch-baseline-tps")
        per_batch_mode = args.per_batch or args.adaptive_config is not None
        if (batch_tps or batch_base) and not per_batch_mode:
            raise ValueError("--batch-tps / --batch-baseline-tps go with --per-batch or --adaptive-config")
        if per_batch_mode and (args.batch is not None or args.plot or args.measured):
            raise ValueError("--per-batch / --adaptive-config model every batch size: no --batch, --plot or --measured")
        flat = [f for f, v in (("--calibrate-tps", args.calibrate_tps), ("--baseline-tps", args.baseline_tps),
                               ("--baseline", args.baseline)) if v is not None]
        if per_batch_mode and flat:     # one figure for every batch size would be wrong at all but one of them
            raise ValueError(f"--per-batch / --adaptive-config take unprofiled figures per batch size, not "
                             f"{' / '.join(flat)}: --batch-tps M=X,... and --batch-baseline-tps M=Y,...")
        given = [f for f, v in (("--calibrate-tps", args.calibrate_tps), ("--calibrate-live", args.calibrate_live),
                                ("--calibrate-sglang-log", args.calibrate_sglang_log)) if v]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(given)}: give one of them")
        if given and batch_tps:
            raise ValueError(f"{given[0]} and --batch-tps: give one of them")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    from analyze.run.live import live_paths

    live_paths(args.reports)        # live logs and nsys reports together: one line, as the report refuses them
    with output_policy.protect([*args.reports, args.baseline, args.measured, args.calibrate_live,
                                args.calibrate_sglang_log], force=args.force):
        output_policy.check_outputs({"--json": args.json, "--plot": args.plot, "--adaptive-config": args.adaptive_config})
        if per_batch_mode:
            return _per_batch_command(args, steps, ks, scaling, batch_tps, batch_base)
        sides = [load_side(r) for r in args.reports]
        sides, live_measured, untimed, few = live_sides(sides, ks, args.batch)
        if live_measured:
            ks = None                      # each step count's side carries its own (spec_config)
        request_tokens = live_cut_request_tokens(args.request_tokens, bool(live_measured) and not args.measured)
        baseline = load_side(args.baseline) if args.baseline else None
        measured = measured_base = None
        cal_source, batch = None, args.batch
        chosen = None           # the batch size chosen here: the one most decode cycles ran (advise's rule)
        if batch is None and len(sides) == 1 and not live_measured and args.baseline is None and not (
                args.calibrate_live or args.calibrate_sglang_log or args.measured):
            from analyze.tools.whatif import per_batch as PB

            counts = PB.batch_counts(sides)
            visited, all_cycles = PB.visited_of(counts), PB.request_cycles(counts)
            batch = PB.modelled_batch(visited, None, args.baseline_tps, cal_x, all_cycles)
            chosen = (batch, len(visited), PB.ramp_share(visited, all_cycles)) if batch is not None else None
        if args.calibrate_live:
            cal_k, cal_x, cal_source = live_calibration(args.calibrate_live, sides, ks, cal_k, args.batch)
        elif args.calibrate_sglang_log:
            cal_k, cal_x, cal_source = sglang_log_calibration(args.calibrate_sglang_log, sides, ks, args.batch)
            batch = cal_source["batch"]            # the figure is of that batch size: model it
        elif cal_x is None and not live_measured:
            cal_k, cal_x, cal_source, batch = clock_calibration(sides, ks, cal_k, batch)
        if args.measured:
            try:
                measured, measured_base = read_measured(args.measured, batch)
            except OSError as exc:
                raise MissingInput(f"--measured {args.measured}: {exc.strerror or exc}", args.measured) from exc
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                raise UsageError(f"--measured {args.measured}: not a JSON of measured tokens/s per step count "
                                 f"({type(exc).__name__}: {exc})") from exc
        elif live_measured:               # a live log of several step counts measured each of them
            measured = {k: v["tokens_per_s"] for k, v in live_measured.items()}
        try:
            r = whatif(sides, steps, baseline=baseline, profiled_steps=ks, extrapolation=args.extrapolate,
                       n_boot=args.boot, seed=args.seed, measured=measured, calibrate_tps=cal_x,
                       calibrate_steps=cal_k, baseline_tps=args.baseline_tps, measured_baseline_tps=measured_base,
                       verify_scaling=scaling, batch=batch, calibration_source=cal_source,
                       request_tokens=request_tokens, progress=not args.quiet and sys.stderr.isatty())
            from analyze.tools.sides import clock_unprofiled

            if (r["best"].get("speedup_through_estimate") and batch is None and len(sides) == 1 and sides[0].clock
                    and clock_unprofiled(sides[0])):
                # the review: its own clock calibrates one batch size, none is guessed among several
                r["notes"].append("the profile carries its own clock (the cycles before its capture window): give "
                                  "--batch M for a batch size its load ran to calibrate from it, and the speed-up over "
                                  "the given baseline is then a measured one")
            if live_measured:
                r["notes"].append("measured: tokens/s of the live timing log's steady cycles at each step count it "
                                  "ran (" + ", ".join(f"{k}: {v['tokens_per_s']:,.0f} over {v['cycles']} cycles of "
                                                      f"rank {v['rank']}" for k, v in live_measured.items()) + ")"
                                  + ("; predicted as steady state too (--request-tokens N: rounds of N-token requests)"
                                     if request_tokens == "steady" and args.request_tokens == "auto" else ""))
                r["live_measured"] = live_measured
            if cal_source and cal_source.get("profiled_pids"):
                r["notes"].append(f"--calibrate-live {cal_source['path']}: the log's process "
                                  f"{', '.join(map(str, cal_source['profiled_pids']))} is the profile's: written under "
                                  "the profiler, its tokens/s are the profiled clock's, not unprofiled (give the log of "
                                  "an engine run without the profiler)")
            if chosen is not None:
                r["notes"].append(PB.chosen_said(*chosen))
            for label, k, n in few:
                r["notes"].append(f"{label}: {n} cycles at {k} draft steps"
                                  + (f" at batch {args.batch}" if args.batch is not None else "")
                                  + f", fewer than {MIN_CYCLES} (SGLang's adaptive switches): left out of the cost fit")
            for label, k, n in untimed:
                r["notes"].append(f"{label}: {n} cycles at {k} draft steps"
                                  + (f" at batch {args.batch}" if args.batch is not None else "")
                                  + ", none of them timed with CUDA events (the log times one cycle in N): left out "
                                  "of the model")
        except TraceError:
            raise
        except ValueError as exc:      # the profile cannot answer (no cycles, no accept marks, ...)
            raise unsuitable(exc, args.reports) from exc
        if args.json:
            from analyze.atomic import atomic_write
            from analyze.render.outputs import _plain, finite

            with atomic_write(args.json) as f:
                json.dump(finite(to_json(r)), f, indent=1, default=_plain, allow_nan=False)
                f.write("\n")
        if args.plot:
            plot_whatif(r, args.plot)
    if not args.quiet:
        output_policy.text_stream(args.json).write(render_whatif(r) + output_policy.wrote_lines(args.json, args.plot))
    return 0
