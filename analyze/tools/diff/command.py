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

import argparse  # noqa: F401 (ArgumentParser's base)
import json
import sys

from analyze import output_policy
from analyze.errors import ArgumentParser, positive_int
from analyze.tools.diff.model import N_BOOT, diff_results
from analyze.tools.diff.render import plot_diff, render_diff, to_json
from analyze.timeline.cycles import OUTLIER_FACTOR
from analyze.tools.sides import load_side


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="analyze-trace diff", description=__doc__.split("\n\n")[0].replace("``", "") + " " +
                                "Each input: a report, a directory of per-rank reports, or a --json result.")
    side = "a report, a directory of per-rank reports, or a saved analyze-trace --json result"
    p.add_argument("before", help=f"the run before the change: {side}")
    p.add_argument("after", help=f"the run after the change: {side}")
    p.add_argument("--json", metavar="PATH", help="write the comparison as JSON")
    p.add_argument("--plot", metavar="PATH", help="write a figure (PNG/SVG/PDF by extension)")
    p.add_argument("--top", type=positive_int, default=10, help="kernels listed (default 10)")
    p.add_argument("--boot", type=positive_int, default=N_BOOT, help=f"bootstrap resamples (default {N_BOOT})")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--keep-outliers", action="store_true",
                   help=f"keep the outlier cycles (a period over {OUTLIER_FACTOR:g}x the median of the rank's cycles "
                        "of the same batch size); warm-up and lost cycles stay out")
    p.add_argument("--force", action="store_true",
                   help="let an output replace an existing Nsight Systems report (never an input)")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal table")
    return p


def main_diff(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    with output_policy.protect([args.before, args.after], force=args.force):
        output_policy.check_outputs({"--json": args.json, "--plot": args.plot})
        d = diff_results(load_side(args.before), load_side(args.after), n_boot=args.boot, seed=args.seed,
                         top=args.top, keep_outliers=args.keep_outliers)
        if args.json:
            from analyze.atomic import atomic_write
            from analyze.render.outputs import _plain
            with atomic_write(args.json) as f:
                json.dump(to_json(d), f, indent=1, default=_plain)
                f.write("\n")
        if args.plot:
            plot_diff(d, args.plot, top=args.top)
    if not args.quiet:
        output_policy.text_stream(args.json).write(render_diff(d, top=args.top))
    return 0
