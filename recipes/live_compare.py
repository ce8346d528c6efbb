"""Issue 43: a live timing log beside the nsys export of the same run (recipes/sglang_live.sh writes both):
per batch size, the median per-cycle phase times (us) of each, over their steady cycles, and the live
log's difference in %; the log's graph-replay times beside nsys's span of the same graph launches' kernels
(first kernel start to last kernel end of each ``cudaGraphLaunch`` inside a ``graph_replay_*`` range: the
stream time a CUDA event pair around the launch measures).

  python recipes/live_compare.py LOGDIR PROFILE.sqlite
"""
import sqlite3
import sys
from pathlib import Path

import numpy as np
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


def graph_spans(profile: str) -> pd.DataFrame:
    """Per batch size (the steady cycles' requests), the median per cycle of nsys's span of the kernels of
    the graph launches inside each ``graph_replay_<phase>`` range (us), columns ``<phase>_replay_ns``."""
    con = sqlite3.connect(f"file:{profile}?mode=ro", uri=True)
    names = dict(con.execute("SELECT id, value FROM StringIds").fetchall())
    nv = pd.read_sql("SELECT start, end, globalTid, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL", con)
    nv["name"] = nv["text"].fillna(nv["textId"].map(names))
    rt = pd.read_sql("SELECT start, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME", con)
    rt = rt[rt["nameId"].map(names).fillna("").str.startswith("cudaGraphLaunch")]
    k = pd.read_sql("SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL", con)
    con.close()
    kk = k.groupby("correlationId").agg(kstart=("start", "min"), kend=("end", "max"))
    rt = rt.join(kk, on="correlationId", how="inner").sort_values("start")
    cyc = sides.load_side(profile).cycles
    cyc = cyc[~cyc["warmup"].astype(bool)].sort_values("cpu_start_ns")
    c0, c1 = cyc["cpu_start_ns"].to_numpy("int64"), cyc["cpu_end_ns"].to_numpy("int64")
    creq = pd.to_numeric(cyc["requests"], errors="coerce").to_numpy()
    out = {}
    for phase in ("draft", "verify", "draft_extend"):
        rows = []
        for tid, rr in nv[nv["name"] == f"graph_replay_{phase}"].groupby("globalTid"):
            x = rt[rt["globalTid"] == tid]
            st = x["start"].to_numpy()
            for s, e in rr[["start", "end"]].to_numpy():
                a, b = np.searchsorted(st, s), np.searchsorted(st, e)
                i = np.searchsorted(c0, s, side="right") - 1
                if b > a and i >= 0 and s < c1[i]:
                    y = x.iloc[a:b]
                    rows.append((creq[i], c0[i], int(y["kend"].max() - y["kstart"].min())))
        f = pd.DataFrame(rows, columns=["requests", "cycle", "span"]).groupby(["requests", "cycle"])["span"].sum()
        out[f"{phase}_replay_ns"] = f.groupby("requests").median().div(1e3).round(1)
    return pd.DataFrame(out)


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
        spans = graph_spans(profile)
        print("\nnsys, the span of the graph launches' kernels (us)\n", spans,
              "\n\nreplay / nsys graph span - 1 (%)\n", (replay / spans - 1).mul(100).round(1), sep="")


if __name__ == "__main__":
    main(*sys.argv[1:3])
