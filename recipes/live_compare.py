"""Issue 43: a live timing log beside the nsys export of the same run (recipes/sglang_live.sh writes both):
per batch size, the median per-cycle phase times (us) of each, over their steady cycles, and the live
log's difference in %; the log's graph-replay times beside nsys's span of the same graph launches' kernels
(first kernel start to last kernel end of each ``cudaGraphLaunch`` inside a ``graph_replay_*`` range: the
stream time a CUDA event pair around the launch measures).

In eager mode (no graph launches) it sets each timed cycle's phase event time beside nsys's stream span of the
same cycle's phase (:func:`eager_spans`).

  python recipes/live_compare.py LOGDIR PROFILE.sqlite [--spans-json OUT]
"""
import json
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


PHASES = ("draft", "verify", "draft_extend")


def eager_spans(profile: str) -> pd.DataFrame:
    """Per decode cycle (the shim's cycle number, the ``decode_cycle`` range's payload), process and phase, nsys's
    stream span of the phase (us), the figure a CUDA event pair around an eager phase measures: the start event is
    recorded just after the phase's range opens, on the stream its kernels run on, and completes once that stream
    reaches it (the range's start, or the end of the stream's last kernel before the phase's first); the end event is
    recorded after the range closes and completes once the phase's last kernel on that stream has (the later of the
    range's end and that kernel's). With the phase's kernels' count and busy time (that stream's)."""
    con = sqlite3.connect(f"file:{profile}?mode=ro", uri=True)
    names = dict(con.execute("SELECT id, value FROM StringIds").fetchall())
    nv = pd.read_sql("SELECT start, end, globalTid, text, textId, int64Value, uint64Value FROM NVTX_EVENTS "
                     "WHERE end IS NOT NULL", con)
    rt = pd.read_sql("SELECT start AS call, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME", con)
    k = pd.read_sql("SELECT start, end, correlationId, streamId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL", con)
    con.close()
    nv["name"] = nv["text"].fillna(nv["textId"].map(names))
    # nsys: bits 24-47 of a global thread/process id are the OS pid; a correlation id is unique per process
    rt["pid"] = (rt["globalTid"].astype("int64") // (1 << 24)) % (1 << 24)
    k["pid"] = (k["globalPid"].astype("int64") // (1 << 24)) % (1 << 24)
    every = k.sort_values("start")      # any kernel keeps its stream busy, launched from this thread or not
    k = k.merge(rt[["call", "globalTid", "correlationId", "pid"]], on=["correlationId", "pid"]).sort_values("start")
    cyc = nv[nv["name"] == "decode_cycle"].copy()
    cyc["cycle"] = cyc["int64Value"].fillna(cyc["uint64Value"])
    rows = []
    for phase in PHASES:
        for s, e, tid in nv.loc[nv["name"] == phase, ["start", "end", "globalTid"]].to_numpy():
            c = cyc[(cyc["globalTid"] == tid) & (cyc["start"] <= s) & (cyc["end"] >= e)]
            kk = k[(k["globalTid"] == tid) & (k["call"] >= s) & (k["call"] <= e)]
            if c.empty or kk.empty:
                continue
            stream, pid = kk["streamId"].iloc[0], kk["pid"].iloc[0]
            kk = kk[kk["streamId"] == stream]
            on_stream = every[(every["streamId"] == stream) & (every["pid"] == pid)]
            before = on_stream.loc[on_stream["start"] < kk["start"].iloc[0], "end"]
            start = max(int(s), int(before.max())) if len(before) else int(s)
            end = max(int(e), int(kk["end"].max()))
            rows.append({"pid": int(pid), "cycle": int(c["cycle"].iloc[0]), "phase": phase,
                         "span_us": (end - start) / 1e3, "kernels": len(kk),
                         "busy_us": (kk["end"] - kk["start"]).sum() / 1e3})
    return pd.DataFrame(rows)


def eager_compare(log: str, spans: pd.DataFrame) -> pd.DataFrame:
    """The live log's timed cycles' ``<phase>_ns`` (us) beside :func:`eager_spans`' span of the same process, cycle
    and phase: one row per (pid, cycle, phase) with the log's requests and ``diff_pct`` = live / span - 1."""
    raw, _ = live.read_raw([log])
    raw = raw[raw["timed"].astype(bool)]
    lv = raw.melt(id_vars=["pid", "cycle", "requests"], value_vars=[f"{p}_ns" for p in PHASES], var_name="phase",
                  value_name="live_us").dropna()
    lv["phase"] = lv["phase"].str[:-3]
    lv["live_us"] = lv["live_us"].astype("float64") / 1e3
    out = lv.merge(spans, on=["pid", "cycle", "phase"])
    out["diff_pct"] = 100 * (out["live_us"] / out["span_us"] - 1)
    return out.sort_values(["pid", "phase", "cycle"]).reset_index(drop=True)


def main(log: str, profile: str, spans_json: str | None = None) -> None:
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
    else:       # eager: no replays; each timed cycle's phase beside nsys's stream span of it
        spans = eager_spans(profile)
        both = eager_compare(log, spans)
        print("\neager: each timed cycle's phase event time beside nsys's stream span of it (us)\n",
              both.round(2).to_string(index=False), sep="")
        if spans_json:
            timed = set(both["cycle"])
            doc = {"source": f"recipes/live_compare.py eager_spans() of {Path(profile).name}",
                   "spans": spans[spans["cycle"].isin(timed)].round(3).to_dict(orient="records")}
            Path(spans_json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    args = sys.argv[1:]
    out = args[args.index("--spans-json") + 1] if "--spans-json" in args else None
    main(args[0], args[1], out)
