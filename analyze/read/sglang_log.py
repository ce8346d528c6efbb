"""SGLang's own decode log lines: what an unprofiled server says of its tokens/s.

SGLang 0.5.17's scheduler (``srt/managers/scheduler_components/metrics_reporter.py``), at ``--log-level info``,
prints every ``--decode-log-interval`` decode steps (40 by default) on its logging rank(s)::

    [2026-12-06 07:03:50] Decode batch, #running-req: 16, #token: 1351, token usage: 0.00, accept len: 1.43,
    accept rate: 0.14, cuda graph: True, gen throughput (token/s): 7298.70, #queue-req: 0

``gen throughput`` is the decode tokens generated since the previous such line over all the wall time since it
(prefill, idle time and a round's tail included), ``#running-req`` the batch of the interval's last step,
``accept len`` (speculative runs only) the accepted tokens a request a cycle, the bonus token included. A line
is *steady* when the previous decode line had the same ``#running-req`` and no ``Prefill batch`` line came
between them: its interval ran that batch throughout (or nearly). With data parallel attention each rank logs
its own lines, tagged ``DP<n>`` (``TP<n>``, ``PP<n>``) in the bracket before the message. The server's
arguments are logged once (``server_args=ServerArgs(... speculative_num_steps=N ...)``).
"""
from __future__ import annotations

import json
import os
import re
from typing import NamedTuple

import pandas as pd

DECODE_LINE = re.compile(r"Decode batch\b.*?#running-req: (?P<running>\d{1,9}),"
                         r"(?:.*?accept len: (?P<accept_len>\d{1,9}(?:\.\d+)?),)?"
                         r".*?gen throughput \(token/s\): (?P<tokens_per_s>\d{1,12}(?:\.\d+)?)(?![\d.])")
"""One ``Decode batch`` line of SGLang's scheduler log (the fields whatif reads; numbers as SGLang prints them)."""
DECODE_LIKE = re.compile(r"Decode batch\b.*gen throughput")
"""A line that says it is a decode line: one that :data:`DECODE_LINE` does not read is counted, never summed."""
PREFILL_LINE = re.compile(r"\bPrefill batch\b")
RANK_TAGS = re.compile(r"\b(?:DP|TP|PP|EP|CP)\d+\b")
SERVER_STEPS = re.compile(r"server_args=ServerArgs\(.*?\bspeculative_num_steps=(?P<steps>\d+|None)\b")

COLUMNS = ("running", "accept_len", "tokens_per_s", "steady", "rank")


class SGLangLog(NamedTuple):
    lines: pd.DataFrame            # the decode lines, :data:`COLUMNS`
    num_steps: int | None          # the server's --speculative-num-steps where its arguments were logged
    unreadable: int = 0            # decode lines whose fields do not read as numbers (a damaged log): left out


def _rank(line: str, start: int) -> str:
    """The rank tags of the bracket before a message (``"DP1 TP0"``), "" without any."""
    head = line[:start]
    return " ".join(RANK_TAGS.findall(head[head.rfind("["):] if "[" in head else ""))


def parse_log(lines) -> SGLangLog:
    """The ``Decode batch`` lines among ``lines`` (text lines of a log), in order, and the server's step count.
    ``steady``: the previous decode line of the same rank had the same ``running`` and no prefill line of that
    rank came between (a rank's first line is never steady)."""
    rows, steps, unreadable = [], None, 0
    last: dict[str, tuple[int, bool]] = {}     # rank -> (its previous line's running, a prefill since)
    for line in lines:
        if steps is None and "server_args=" in line:
            m = SERVER_STEPS.search(line)
            if m is not None and m.group("steps") != "None":
                steps = int(m.group("steps"))
        p = PREFILL_LINE.search(line)
        if p is not None:
            r = _rank(line, p.start())
            if r in last:
                last[r] = (last[r][0], True)
            continue
        m = DECODE_LINE.search(line)
        if m is None:
            unreadable += DECODE_LIKE.search(line) is not None
            continue
        acc = m.group("accept_len")
        if acc is None and "accept len:" in line[m.start():]:
            unreadable += 1             # an accept length that does not read: the line left out, not half-read
            continue
        r, running = _rank(line, m.start()), int(m.group("running"))
        prev = last.get(r)
        rows.append((running, float(acc) if acc is not None else float("nan"), float(m.group("tokens_per_s")),
                     prev is not None and prev[0] == running and not prev[1], r))
        last[r] = (running, False)
    frame = pd.DataFrame(rows, columns=list(COLUMNS)).astype(
        {"running": "int64", "accept_len": "float64", "tokens_per_s": "float64", "steady": "bool", "rank": "object"})
    return SGLangLog(frame, steps, unreadable)


JSON_CHECK_BYTES = 64 << 20
"""A file no larger than this that starts like JSON is parsed to tell JSON from a log whose lines start with '['."""


def signature_kind(path) -> str | None:
    """What a file is by its first bytes' signature (an SQLite file, Parquet or an Arrow stream), else None: asked
    before the file is read line by line (a 150 MB report given as the log was parsed whole before it was named)."""
    try:
        with open(path, "rb") as f:
            return _signature(f.read(64))
    except OSError:
        return None


def _signature(head: bytes) -> str | None:
    from analyze.read.columnar import ARROW_STREAM_MAGIC, PARQUET_MAGIC
    from analyze.read.connection import SQLITE_MAGIC

    if head.startswith(SQLITE_MAGIC):
        return "an SQLite file: a report?"
    if head.startswith(PARQUET_MAGIC) or head.startswith(ARROW_STREAM_MAGIC):
        return "a Parquet or Arrow file: a live timing log goes to --calibrate-live"
    return None


def what_instead(path) -> str | None:
    """What a file with no line of SGLang's log is instead: :func:`signature_kind`, other binary data (a NUL in its
    first 4 KiB: asked only after no decode line was found, as a log copied by logrotate's copytruncate can start with
    NULs), JSON (a text file that parses as JSON), or None (text: a log without decode lines)."""
    head = b""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        kind = _signature(head)
        if kind is not None:
            return kind
        if head.lstrip()[:1] in (b"{", b"[") and os.path.getsize(path) <= JSON_CHECK_BYTES:
            # SGLang's own lines start with "[2026-...": JSON only if it parses
            with open(path, "rb") as f:
                json.loads(f.read())
            return "JSON: a sweep's figures go to --measured"
    except (OSError, ValueError):
        pass
    return "binary data" if b"\0" in head else None


def read_log(path) -> SGLangLog:
    """:func:`parse_log` of a log file (undecodable bytes replaced: a log is text of any origin)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse_log(f)
