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


HOST_COLUMNS = ("draft_host_ns", "verify_host_ns", "draft_extend_host_ns")
REPLAY_COLUMNS = ("draft_replay_ns", "verify_replay_ns", "draft_extend_replay_ns")


def raw_summary(log: str, columns) -> pd.DataFrame | None:
    """Per batch size, the median (us) of the log's ``columns`` that it has (None: none of them), over
    the steady cycles (those the cycle table does not flag warm-up or outlier, as :func:`summary`)."""
    raw, _ = live.read_raw([log])
    have = [x for x in columns if x in raw.columns and raw[x].notna().any()]
    if not have:
        return None
    cyc = live.load_live([log]).cycles
    steady = cyc.loc[~cyc["warmup"].astype(bool), ["rank", "pid", "shim_cycle"]].astype("int64")
    raw = raw.merge(steady.rename(columns={"shim_cycle": "cycle"}), on=["rank", "pid", "cycle"])
    g = raw.groupby(pd.to_numeric(raw["requests"], errors="coerce"))
    return g[have].median().div(1e3).round(1)


def host_summary(log: str) -> pd.DataFrame | None:
    """Per batch size, the median host time (us) between each phase's entry and exit (the log's
    ``<phase>_host_ns``; None for a log written before they were logged): where it is as long as the
    phase's event time, the phase was host bound and its events timed its Python too (docs/live.md)."""
    raw, _ = live.read_raw([log])
    have = [x for x in HOST_COLUMNS if x in raw.columns]
    if not have:
        return None
    g = raw.groupby(pd.to_numeric(raw["requests"], errors="coerce"))
    return g[have].median().div(1e3).round(1)


def main(log: str, profile: str) -> None:
    lv = summary(live.load_live([log]).cycles)
    ns = summary(sides.load_side(profile).cycles)
    print("live log\n", lv, "\n\nnsys export\n", ns, "\n\nlive / nsys - 1 (%)\n",
          (lv.drop(columns="cycles") / ns.drop(columns="cycles") - 1).mul(100).round(1), sep="")
    host = host_summary(log)
    if host is not None:
        print("\nlive log, host time between each phase's entry and exit (us)\n", host, sep="")
    replay = raw_summary(log, REPLAY_COLUMNS)
    if replay is not None:
        print("\nlive log, the phases' CUDA-graph replays alone (us)\n", replay, "\n\nreplay / nsys phase - 1 (%)\n",
              pd.DataFrame({c: (replay[c] / ns[c.replace("_replay", "")] - 1).mul(100).round(1)
                            for c in replay.columns}), sep="")


if __name__ == "__main__":
    main(*sys.argv[1:3])
