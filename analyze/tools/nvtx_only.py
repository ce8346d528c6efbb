"""Exports with NVTX but no CUDA activity (a CPU-only capture, or `-t nvtx` without `cuda`).

There is no GPU time to attribute, so the analysis fails with exit code 7, but what the report does
hold is still shown: the processes with their ranks (from the shim's marks) and the CPU-side NVTX
range statistics (``nsys stats -r nvtx_sum``), so a user can check the shim reached every worker.
"""
from __future__ import annotations

import pandas as pd

from analyze.ranks.identify import identify_ranks
from analyze.read import report
from analyze.views.nvtx import nvtx_range_summary


class NvtxOverview:
    def __init__(self, path: str, ranks: pd.DataFrame, nvtx_sum: pd.DataFrame, marks: int, meta: dict):
        self.path, self.ranks, self.nvtx_sum, self.marks, self.meta = path, ranks, nvtx_sum, marks, meta


def overview(path: str) -> NvtxOverview:
    tables = report.read_report(path)
    pids = pd.concat([tables.ranges["global_pid"], tables.marks["global_pid"]]).drop_duplicates()
    pseudo_ops = pd.DataFrame({"global_pid": pids.astype("int64").to_numpy(), "device_id": -1})
    ranks = identify_ranks(pseudo_ops, tables.marks, tables.ranges, tables.processes, str(path))
    return NvtxOverview(str(path), ranks, nvtx_range_summary(tables.ranges), len(tables.marks),
                        tables.meta)


def render(ov: NvtxOverview) -> str:
    from analyze.render.text import ms, table

    lines = [f"specprof: {ov.path} holds NVTX but no CUDA activity (nsys {ov.meta.get('nsys_version') or '?'}, "
             f"schema {ov.meta.get('schema_version') or '?'}): NVTX ranges only", "", "Processes"]
    lines += table(["rank", "pid", "source"], [[r.rank, r.pid, r.source] for r in ov.ranks.itertuples()])
    lines += ["", f"NVTX ranges (CPU time, all processes; {ov.marks} marks)"]
    lines += table(["range", "style", "instances", "total ms", "median ms"],
                   [[r.range[:60], r.style, r.instances, ms(r.total_ns), ms(r.median_ns)]
                    for r in ov.nvtx_sum.itertuples()], "llrrr")
    return "\n".join(lines) + "\n"


def to_json_dict(ov: NvtxOverview) -> dict:
    from analyze.render.outputs import JSON_SCHEMA, records

    return {"schema": JSON_SCHEMA, "gpu_activity": False,
            "inputs": [{"path": ov.path, "schema_version": ov.meta.get("schema_version"),
                        "nsys_version": ov.meta.get("nsys_version")}],
            "ranks": records(ov.ranks), "nvtx_sum": records(ov.nvtx_sum), "phases": [], "kernels": [],
            "totals": [], "nvtx_projection": [], "cycles": [], "collectives": []}
