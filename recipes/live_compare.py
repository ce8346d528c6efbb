"""Issue 43: a live timing log beside the nsys export of the same run (recipes/sglang_live.sh writes both):
per batch size, the median per-cycle phase times (us) of each, over their steady cycles, and the live
log's difference in %.

  python recipes/live_compare.py LOGDIR PROFILE.sqlite
"""
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyze.run import live  # noqa: E402
from analyze.tools import sides  # noqa: E402

COLUMNS = ("period_ns", "draft_ns", "verify_ns", "draft_extend_ns")


def summary(cycles: pd.DataFrame) -> pd.DataFrame:
    c = cycles[~cycles["warmup"].astype(bool)]
    g = c.groupby(pd.to_numeric(c["requests"], errors="coerce"))
    out = g[[x for x in COLUMNS if x in c.columns]].median().div(1e3).round(1)
    out["cycles"] = g.size()
    return out


def main(log: str, profile: str) -> None:
    lv = summary(live.load_live([log]).cycles)
    ns = summary(sides.load_side(profile).cycles)
    print("live log\n", lv, "\n\nnsys export\n", ns, "\n\nlive / nsys - 1 (%)\n",
          (lv.drop(columns="cycles") / ns.drop(columns="cycles") - 1).mul(100).round(1), sep="")


if __name__ == "__main__":
    main(*sys.argv[1:3])
