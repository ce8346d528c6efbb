"""SGLang's own decode log lines: what an unprofiled server says of its tokens/s.

SGLang 0.5.17's scheduler (``srt/managers/scheduler_components/metrics_reporter.py``), at ``--log-level info``,
prints every ``--decode-log-interval`` decode steps (40 by default) on its logging rank::

    [2026-12-06 07:03:50] Decode batch, #running-req: 16, #token: 1351, token usage: 0.00, accept len: 1.43,
    accept rate: 0.14, cuda graph: True, gen throughput (token/s): 7298.70, #queue-req: 0

``gen throughput`` is the tokens generated since the previous such line over the wall time since it (a steady
decode rate: no round's tail, but any prefill run in between), ``#running-req`` the batch at the line,
``accept len`` (speculative runs only) the accepted tokens a request a cycle, the bonus token included.
"""
from __future__ import annotations

import re

import pandas as pd

DECODE_LINE = re.compile(r"Decode batch\b.*?#running-req: (?P<running>\d+),"
                         r"(?:.*?accept len: (?P<accept_len>[\d.]+),)?"
                         r".*?gen throughput \(token/s\): (?P<tokens_per_s>[\d.]+)")
"""One ``Decode batch`` line of SGLang's scheduler log (the fields whatif reads)."""

COLUMNS = ("running", "accept_len", "tokens_per_s")


def decode_lines(lines) -> pd.DataFrame:
    """The ``Decode batch`` lines among ``lines`` (text lines of a log), in order: :data:`COLUMNS` (``accept_len``
    NaN where the server ran without speculation). Other lines are skipped."""
    rows = []
    for line in lines:
        m = DECODE_LINE.search(line)
        if m is not None:
            acc = m.group("accept_len")
            rows.append((int(m.group("running")), float(acc) if acc is not None else float("nan"),
                         float(m.group("tokens_per_s"))))
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"running": "int64", "accept_len": "float64",
                                                             "tokens_per_s": "float64"})


def read_decode_lines(path) -> pd.DataFrame:
    """:func:`decode_lines` of a log file (undecodable bytes replaced: a log is text of any origin)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return decode_lines(f)
