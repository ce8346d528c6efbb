"""``analyze-trace advise REPORT...``: ranked findings with evidence and the settings to try
(docs/advise.md)."""
from __future__ import annotations

import json
import sys

from analyze import output_policy
from analyze.errors import (ArgumentParser, UnsuitableInput, UsageError, positive_float, positive_int,
                            request_tokens_arg)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="analyze-trace advise",
                                description="From the numbers to advice: findings ranked by the decode-cycle time "
                                            "they could save, each with its evidence from the trace, the ceiling "
                                            "of the gain and the settings to try (see docs/advise.md).")
    p.add_argument("reports", nargs="+", help="nsys SQLite exports or directories of them (one per rank), analysed "
                                              "together like `analyze-trace REPORT...`")
    p.add_argument("--config", metavar="FILE", help="phase definitions (TOML or JSON): docs/reference.md, section Phases")
    p.add_argument("--phase", action="append", default=[], metavar="NAME=ranges:A,B;kernels:PAT")
    p.add_argument("--json", metavar="PATH", help="write the advice as JSON (findings, checks)")
    p.add_argument("--no-whatif", action="store_true", help="do not run the step-count prediction")
    p.add_argument("--baseline-tps", metavar="Y", type=positive_float, default=None,
                   help="tokens/s WITHOUT speculation, measured without the profiler (else the baseline is estimated "
                        "from the profile: off either way, a verdict near 1x is then said to be uncertain)")
    p.add_argument("--calibrate-tps", metavar="X|K:X", type=_calibration, default=None,
                   help="tokens/s of the profiled configuration measured without the profiler (whatif's --calibrate-tps: "
                        "K:X says the step count K it was measured at, which must be the profile's)")
    p.add_argument("--calibrate-sglang-log", metavar="LOG",
                   help="the same figure from an unprofiled SGLang server's own log (whatif's --calibrate-sglang-log: "
                        "its 'Decode batch' lines at --batch M running requests)")
    p.add_argument("--no-evidence", action="store_true", help="leave the evidence lines out of the terminal output")
    p.add_argument("--batch", metavar="M", type=positive_int, default=None,
                   help="the step-count and speculation rules model only the decode cycles of M requests (whatif's --batch)")
    p.add_argument("--request-tokens", metavar="N|steady|auto", default="auto", type=request_tokens_arg,
                   help="what tokens/s the step-count and speculation rules weigh (whatif's --request-tokens): rounds "
                        "of requests of N new tokens started together; 'steady'; default 'auto' (the profile's own "
                        "lockstep rounds at --batch when it ran in them, else steady)")
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N")
    p.add_argument("--force", action="store_true",
                   help="let --json replace an existing Nsight Systems report (never an input of this run)")
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def _calibration(text: str) -> tuple[int | None, float]:
    """``--calibrate-tps``: ``X`` or ``K:X`` (whatif's form) -> (K or None, X)."""
    from analyze.tools.whatif.command import parse_calibration

    try:
        return parse_calibration(text)
    except ValueError as exc:
        import argparse

        raise argparse.ArgumentTypeError(str(exc).removeprefix("--calibrate-tps ")) from None


def main_advise(argv: list[str]) -> int:
    from analyze import command_inputs
    from analyze.render.advice import text_lines
    from analyze.run import api
    from analyze.tools.advise.model import advise, whatif_side

    args = build_parser().parse_args(argv)
    if args.calibrate_tps is not None and args.calibrate_sglang_log:
        raise UsageError("--calibrate-tps and --calibrate-sglang-log: give one of them")
    config = command_inputs.phase_config(args.config, args.phase)
    _, protected = command_inputs.report_inputs(args.reports, args.config)
    with output_policy.protect([*protected, args.calibrate_sglang_log], force=args.force):
        output_policy.check_outputs({"--json": args.json})
        result = api.load(args.reports, config, jobs=command_inputs.worker_count(args.jobs), progress=False)
        cal_k, calibrate_tps = args.calibrate_tps or (None, None)
        batch, source = args.batch, None
        if cal_k is not None and not args.no_whatif:      # K:X: K must be the profile's step count (one profile here)
            from analyze.tools.whatif.model import infer_steps

            k = infer_steps(whatif_side(result))[0]
            if k is not None and cal_k != k:    # an unknown step count: whatif says so itself
                raise UsageError(f"--calibrate-tps {cal_k}:{calibrate_tps:g}: measured at {cal_k} steps, but the profile "
                                 f"ran {k}: give the tokens/s of the profiled configuration ({k}:X, or X)")
        if args.calibrate_sglang_log and not args.no_whatif:   # the figure at its batch size (whatif's rule)
            from analyze.tools.whatif.command import sglang_log_calibration

            _, calibrate_tps, source = sglang_log_calibration(args.calibrate_sglang_log, [whatif_side(result)], None,
                                                              batch)
            batch = source["batch"]
        try:
            adv = advise(result, whatif=not args.no_whatif, baseline_tps=args.baseline_tps,
                         calibrate_tps=calibrate_tps, batch=batch, calibration_source=source,
                         request_tokens=args.request_tokens).to_dict()
        except ValueError as exc:  # the trace cannot answer the rules' questions
            raise UnsuitableInput(str(exc)) from exc
        if args.json:
            from analyze.atomic import atomic_write

            from analyze.render.outputs import finite

            with atomic_write(args.json) as f:
                json.dump(finite(adv), f, indent=1, allow_nan=False)
                f.write("\n")
    if not args.quiet:
        inputs = ", ".join(i["path"] for i in result.inputs[:2]) + (" ..." if len(result.inputs) > 2 else "")
        from analyze.render.text import terminal_width

        from analyze.run.live import is_live

        live = ["(a live timing log: no kernel tables; the rules that need kernels are not applicable)"] \
            if is_live(result) else []
        lines = ["specprof advise: " + inputs, *live, ""] + text_lines(adv, evidence=not args.no_evidence,
                                                                 width=terminal_width())
        output_policy.text_stream(args.json).write("\n".join(lines).rstrip() + "\n" + output_policy.wrote_lines(args.json))
    return 0
