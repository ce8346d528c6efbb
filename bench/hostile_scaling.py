"""Time of ``analyze-trace FILE`` (advice and whatif included) on two pathological shapes of a real
H200 export, at growing sizes: NVTX nesting depth on one thread, and draft kernels per decode cycle
(issue 45: 200k nested ranges took > 60 s, the real server fixture's kernels x40 > 60 s). Linear
growth is the claim; the printed table says whether it holds.

usage: python -m bench.hostile_scaling [--depths 25000,50000,100000,200000] [--repeats 1,10,20,40]
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "fixtures" / "real" / "h200_sweep_steps3.sqlite"
SERVER = ROOT / "fixtures" / "real" / "sglang_server.sqlite"


def nested(path: Path, depth: int) -> None:
    """``depth`` NVTX ranges nested inside the longest range of the export, on its thread."""
    c = sqlite3.connect(path)
    tid, s0, e0 = c.execute("SELECT globalTid, start, end FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL "
                            "ORDER BY end - start DESC LIMIT 1").fetchone()
    names = ("draft", "verify", "draft_step", "allreduce")
    c.executemany("INSERT INTO NVTX_EVENTS(eventType, start, end, globalTid, text) VALUES (59, ?, ?, ?, ?)",
                  [(s0 + i, e0 - i, tid, names[i % 4]) for i in range(depth)])
    c.commit()
    c.close()


def more_draft_kernels(path: Path, times: int) -> None:
    """Each draft kernel of the export repeated ``times`` times back to back (within its own span)."""
    c = sqlite3.connect(path)
    cols = [r[1] for r in c.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rows = c.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    si, ei = cols.index("start"), cols.index("end")
    out = []
    for r in rows:
        s, e = r[si], r[ei]
        step = max((e - s) // times, 1)
        for k in range(1, times):
            row = list(r)
            row[si], row[ei] = s + k * step // 2, s + k * step // 2 + 1
            out.append(row)
    c.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({', '.join('?' * len(cols))})", out)
    c.commit()
    c.close()


def timed(path: Path) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "analyze.cli", str(path), "-q", "--json", str(path) + ".json", "--force"],
                   check=True, timeout=600)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="25000,50000,100000,200000")
    ap.add_argument("--repeats", default="1,10,20,40")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        print("nesting depth  seconds")
        for depth in [int(x) for x in a.depths.split(",")]:
            p = Path(d) / f"n{depth}.sqlite"
            shutil.copy(BASE, p)
            nested(p, depth)
            print(f"{depth:>13,}  {timed(p):7.2f}", flush=True)
        print("kernels x  seconds")
        for k in [int(x) for x in a.repeats.split(",")]:
            p = Path(d) / f"k{k}.sqlite"
            shutil.copy(SERVER, p)
            if k > 1:
                more_draft_kernels(p, k)
            print(f"{k:>9}  {timed(p):7.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
