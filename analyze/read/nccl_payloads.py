"""NCCL's NVTX payloads: the message size of every ``ncclAllReduce`` (and other collective) range,
where nsys exported it.

NCCL (>= 2.19, with NVTX) pushes a range per API call (``ncclAllReduce`` in domain ``NCCL``) carrying
a typed payload: communicator id, ``Message size [bytes]``, reduction op. nsys writes the payload
schemas to ``NVTX_PAYLOAD_SCHEMAS`` / ``NVTX_PAYLOAD_SCHEMA_ENTRIES`` (name, type, byte ``offset``; the
first entry's offset is NULL, i.e. 0) and each event's bytes to ``NVTX_EVENTS.binaryData``: a
32-byte header (u32, u32, u32 schema id, u32, u64 payload size, u64 total size) then the payload
(the layout nsys-ai documents for nsys 2026.2 exports). The real exports in this project (nsys
2025.3.1, 2026.2.1) carry the schemas but leave ``binaryData`` empty for every event: then there is
no message size and :func:`message_sizes` says so (``reason``); a blob that does not decode is
counted (``undecoded``), never guessed.
"""
from __future__ import annotations

import contextlib
import sqlite3
import struct

import numpy as np
import pandas as pd

from analyze.read.connection import has_table, open_report, table_columns

MESSAGE_SIZE = "Message size [bytes]"
HEADER = struct.Struct("<IIIIQQ")
COLUMNS = ["global_tid", "start_ns", "end_ns", "name", "message_bytes"]
INFO = "nccl_payloads"
"""The key of a report's meta that holds :func:`read_message_sizes`' info."""


def _blob(value) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):          # a TEXT column holding hex
        try:
            return bytes.fromhex(value)
        except ValueError:
            return None
    return None


def decode_message_size(blob, offsets: dict[int, int]) -> int | None:
    """The message size in one event's payload; ``offsets``: schema id -> byte offset of the
    ``Message size [bytes]`` entry. None when the blob is short or of another schema."""
    b = _blob(blob)
    if b is None or len(b) < HEADER.size:
        return None
    _, _, schema, _, size, _ = HEADER.unpack_from(b, 0)
    off = offsets.get(int(schema))
    if off is None or off + 8 > size or HEADER.size + off + 8 > len(b):
        return None
    return int(struct.unpack_from("<Q", b, HEADER.size + off)[0])


def empty_frame(input_column: bool = False) -> pd.DataFrame:
    """No sized NCCL range (:data:`COLUMNS`, typed; ``input_column``: and the analysis' ``input``)."""
    return pd.DataFrame({c: pd.Series(dtype="int64" if c not in ("name", "input") else "object")
                         for c in COLUMNS + (["input"] if input_column else [])})


def message_sizes(path) -> tuple[pd.DataFrame, dict]:
    """:func:`read_message_sizes` of the export at ``path`` (opened read-only for it)."""
    with contextlib.closing(open_report(path, quick_check=False)) as conn:
        return read_message_sizes(conn)


def read_message_sizes(conn) -> tuple[pd.DataFrame, dict]:
    """(ranges with a decoded message size, info) of an open export (read_report reads them with the
    report's other tables: once per report, in the map step): info has ``reason`` (None when sizes were
    read), ``events`` (payload-carrying events seen) and ``undecoded``. A payload read that SQLite
    refuses is no error of the analysis: no sizes, and the reason says why."""
    empty = empty_frame()
    try:
        if not has_table(conn, "NVTX_PAYLOAD_SCHEMA_ENTRIES") or not has_table(conn, "NVTX_EVENTS"):
            return empty, {"reason": "no NVTX payload schemas in the export", "events": 0, "undecoded": 0}
        if "binaryData" not in table_columns(conn, "NVTX_EVENTS"):
            return empty, {"reason": "the export has no NVTX_EVENTS.binaryData column", "events": 0, "undecoded": 0}
        offsets = {int(sid): int(off or 0) for sid, off in conn.execute(
            'SELECT schemaId, "offset" FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name = ?', (MESSAGE_SIZE,))}
        if not offsets:
            return empty, {"reason": "no payload schema with a message size (NCCL without NVTX payloads)",
                           "events": 0, "undecoded": 0}
        rows = conn.execute(
            "SELECT e.globalTid, e.start, e.\"end\", COALESCE(e.text, s.value), e.binaryData FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.binaryData IS NOT NULL "
            "AND e.eventType IN (59, 60)").fetchall() if has_table(conn, "StringIds") else []
    except (sqlite3.Error, ValueError, TypeError) as exc:
        return empty, {"reason": f"the NVTX payloads could not be read ({exc})", "events": 0, "undecoded": 0}
    if not rows:
        return empty, {"reason": "nsys exported the payload schemas but no payload bytes (NVTX_EVENTS.binaryData "
                                 "is empty)", "events": 0, "undecoded": 0}
    out, bad = [], 0
    for tid, start, end, name, blob in rows:
        size = decode_message_size(blob, offsets)
        if size is None:
            bad += 1
            continue
        out.append((tid, start, end if end is not None else start, name, size))
    frame = pd.DataFrame(out, columns=COLUMNS) if out else empty
    if len(frame):
        frame = frame.astype({"global_tid": "int64", "start_ns": "int64", "end_ns": "int64", "message_bytes": "int64"})
    return frame, {"reason": None if len(frame) else "no payload decoded", "events": len(rows), "undecoded": bad}


def size_summary(sizes: np.ndarray) -> dict:
    """count, min, median, max of message sizes (bytes)."""
    sizes = np.asarray(sizes, dtype="float64")
    if not len(sizes):
        return {"count": 0}
    return {"count": int(len(sizes)), "min_bytes": int(sizes.min()), "median_bytes": float(np.median(sizes)),
            "max_bytes": int(sizes.max())}


def combined_info(infos: list[dict], sized: bool) -> dict:
    """The payload info of an analysis of several reports (the reducer): events and undecoded summed;
    ``reason`` None where some report had sizes (``sized``), else the first report's."""
    reasons = [i.get("reason") for i in infos if i and i.get("reason")]
    return {"reason": None if sized else (reasons[0] if reasons else "no NCCL payloads"),
            "events": sum(int(i.get("events") or 0) for i in infos if i),
            "undecoded": sum(int(i.get("undecoded") or 0) for i in infos if i)}
