"""``python -m spec_workload.sweep_diff A.json B.json``: how far two unprofiled sweeps of the same
configuration disagree, per step count (the stability gate of record_moe_sweep.sh).

Reads rank 0's runs of two ``--sweep-steps`` outputs (``--out-json``) and prints, for each run
(``nospec``, ``steps1``, ...), the mean cycle time and tokens/s of both and the relative
difference of the mean cycle (B - A) / A, then the largest absolute difference.  Exit 0; 2 when a
file cannot be read or the two sweeps hold different runs (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Dict, List


def run_label(run: dict) -> str:
    return "nospec" if run.get("steps") is None else f"steps{run['steps']}"


def sweep_means(doc: dict) -> Dict[str, dict]:
    """label -> {"mean_cycle_ns", "tokens_per_s", "cycles"} of rank 0's runs, in run order."""
    return {run_label(r): {"mean_cycle_ns": float(r["mean_cycle_ns"]), "tokens_per_s": float(r["tokens_per_s"]),
                           "cycles": int(r["cycles"])}
            for r in doc["ranks"][0]["runs"]}


def compare(a: dict, b: dict) -> List[dict]:
    """One row per run in both sweeps: A's and B's mean cycle and tokens/s, and
    ``cycle_diff`` = (B - A) / A of the mean cycle time.  Raises ValueError when the runs differ."""
    ma, mb = sweep_means(a), sweep_means(b)
    if list(ma) != list(mb):
        raise ValueError(f"the sweeps hold different runs: {list(ma)} vs {list(mb)}")
    rows = []
    for label, ra in ma.items():
        rb = mb[label]
        rows.append({"run": label, "a_mean_cycle_ns": ra["mean_cycle_ns"], "b_mean_cycle_ns": rb["mean_cycle_ns"],
                     "a_tokens_per_s": ra["tokens_per_s"], "b_tokens_per_s": rb["tokens_per_s"],
                     "cycle_diff": (rb["mean_cycle_ns"] - ra["mean_cycle_ns"]) / ra["mean_cycle_ns"]})
    return rows


def format_rows(rows: List[dict]) -> str:
    lines = [f"{'run':<8} {'A cycle us':>11} {'B cycle us':>11} {'diff':>7} {'A tok/s':>9} {'B tok/s':>9}"]
    for r in rows:
        lines.append(f"{r['run']:<8} {r['a_mean_cycle_ns'] / 1e3:>11.1f} {r['b_mean_cycle_ns'] / 1e3:>11.1f} "
                     f"{100 * r['cycle_diff']:>+6.1f}% {r['a_tokens_per_s']:>9.1f} {r['b_tokens_per_s']:>9.1f}")
    worst = max(rows, key=lambda r: abs(r["cycle_diff"]))
    lines.append(f"max |diff| {100 * abs(worst['cycle_diff']):.1f}% ({worst['run']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m spec_workload.sweep_diff", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b")
    args = p.parse_args(argv)
    try:
        docs = []
        for path in (args.a, args.b):
            with open(path) as f:
                docs.append(json.load(f))
        rows = compare(*docs)
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        print(f"sweep_diff: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    print(f"A = {args.a}\nB = {args.b}")
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
