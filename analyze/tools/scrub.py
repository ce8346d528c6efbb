"""Share a trace safely: blank the profiling machine's environment and identity in a COPY of an
nsys SQLite export, leave every timing row untouched.

    from analyze.tools.scrub import scrub
    rep = scrub("run.sqlite", "run.scrubbed.sqlite")
    print("\\n".join(rep.lines()))

What is blanked, and why, is listed in docs/bad_input.md ("Sharing a trace"). In short:

* META_DATA_CAPTURE: environment variables, command, arguments, working directory, user name,
  host name of the capture; other values get the generic text rules below.
* META_DATA_EXPORT / EXPORT_META_DATA: export host and user; paths -> basename.
* TARGET_INFO_SYSTEM_ENV: DeviceEnvironment (the whole environment), Hostname; paths -> basename.
* StringIds: environment blobs/entries, the program's captured stdout/stderr, command lines,
  absolute paths (-> basename), host and user names. Strings that the analysis reads (kernel
  names, CUDA API names, NVTX texts, thread names, OS runtime function names) keep their text
  unless the whole string is an absolute path.
* DIAGNOSTIC_EVENT.text, ANALYSIS_FILE.filename, PROCESSES.name: generic text rules.
* NVTX_EVENTS.text: only a text that is entirely an absolute path (-> basename).
* NVTX_EVENTS.jsonText and the StringIds its jsonTextId points to (NVTX payload JSON, not read by
  the analysis): the generic text rules on every string value inside the JSON.
* TARGET_INFO_GPU.uuid: replaced by a same-length pseudonym (consistently, also inside
  TARGET_INFO_SYSTEM_ENV) unless ``keep_names``.

Generic text rules: an environment blob (NUL- or ';'-separated ``KEY=VALUE``) or a single
``KEY=VALUE`` entry -> ``<scrubbed>``; a command line -> ``<scrubbed>``; every absolute path ->
its basename; host and user names found elsewhere in the report -> ``<host>`` / ``<user>``.

``keep_names=True`` keeps host names, user names and GPU uuids (environment, command lines and
directories are still removed).

The input is opened read-only through :func:`analyze.open_report` and copied with the
SQLite backup API; only the copy is edited, then VACUUMed (with ``secure_delete``) so the old
bytes do not survive in free pages, and renamed onto the output path atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path

from analyze import output_policy
from analyze.atomic import atomic_path
from analyze.errors import ArgumentParser, OutputError, TraceError
from analyze.read.connection import has_table, open_report, table_columns

__all__ = ["scrub", "ScrubReport", "main_scrub", "scrub_text", "scrub_json_text", "SCRUBBED", "HOST", "USER"]

SCRUBBED = "<scrubbed>"
HOST = "<host>"
USER = "<user>"

# columns (in any table) that hold StringIds ids the analysis reads: their text is kept
PROTECTED_ID_COLUMNS = {"nameId", "textId", "demangledName", "shortName",
                        "mangledName", "symbol", "domainNameId", "categoryNameId"}
# columns holding StringIds ids of NVTX payload JSON (not read by the analysis): every string value
# inside the JSON gets the generic text rules (scrub_json_text)
JSON_ID_COLUMNS = {"jsonTextId"}
# StringIds ids of the program's own stdout/stderr contents (ProcessStreams, ANALYSIS_FILE)
STREAM_CONTENT_COLUMNS = (("ProcessStreams", "contentId"), ("ANALYSIS_FILE", "contentId"))

CAPTURE_BLANK = re.compile(
    r"(^|:)(ENVIRONMENT_VARIABLE|COMMAND|ARGUMENT_\d+|WORKING_DIR|COMMAND_LINE|ENV_VARS?)$")
CAPTURE_IDENTITY = re.compile(r"(^|:)(USER_NAME|DEVICE_DISPLAY_NAME|HOST_?NAME)$")
EXPORT_IDENTITY = {"EXPORT_HOST", "EXPORT_USER"}
SYSENV_BLANK = {"DeviceEnvironment", "EnvironmentVariables", "CommandLine"}
SYSENV_IDENTITY = {"Hostname", "HostName", "UserName"}

_ENV_KEY = r"[A-Za-z_][A-Za-z0-9_.]*"
ENV_ENTRY = re.compile(rf"^\s*{_ENV_KEY}=")
ENV_LIST = re.compile(rf"^{_ENV_KEY}=[^;]*(;{_ENV_KEY}=[^;]*)+;?$", re.S)
# a path: "/" preceded by start, space, quote, ':', '=', '(' ... and followed by a name
POSIX_PATH = re.compile(r"(?<![\w.~\-/])(~?/[^\s:;,'\"()=\[\]{}<>|\x00]*)")
WIN_PATH = re.compile(r"(?<![\w])([A-Za-z]:\\[^\s:;,'\"()=\[\]{}<>|\x00]*)")
HOME_USER = re.compile(r"(?:/home/|/Users/|\\Users\\)([^/\\\s:;'\"\x00]+)")
ENV_USER = re.compile(r"(?:^|[\x00;\s\"'])(?:USER|LOGNAME|USERNAME)=\"?([^\x00;\s\"']+)")
COMMAND_LINE = re.compile(r"\s--?[A-Za-z][\w-]*(=\S*)?(\s|$)")
SENTENCE = re.compile(r"[.!?]\s+[A-Z]|[.!?]$")
UUID = re.compile(r"^(GPU-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                  r"[0-9a-fA-F]{12}$")
NOT_SECRET_NAMES = {"", "root", "user", "users", "localhost", "none", "unknown", "local",
                    "true", "false"}


def _basename(path: str) -> str:
    p = path.rstrip("/\\")
    if not p:
        return path
    return re.split(r"[/\\]", p)[-1] or p


def _is_whole_path(s: str) -> bool:
    """The whole string is one absolute path (spaces allowed: '/root/.config/NVIDIA Co/x'),
    not a message or a command line that starts with one."""
    if not s or "\n" in s or "\x00" in s:
        return False
    if not (s.startswith("/") or s.startswith("~/") or re.match(r"^[A-Za-z]:\\", s)):
        return False
    return not re.search(r":\s|\s/|\s-|\s[A-Za-z]:\\", s)


def _replace_tokens(s: str, tokens: dict[str, str]) -> str:
    for tok, repl in tokens.items():
        if tok and tok in s:
            s = re.sub(rf"(?<![\w-]){re.escape(tok)}(?![\w-])", repl, s)
    return s


def scrub_text(s: str, tokens: dict[str, str] | None = None, *, protected: bool = False) -> str:
    """The generic text rules (see the module docstring). ``protected`` strings (names the
    analysis matches on) are changed only when the whole string is an absolute path."""
    if s is None or not isinstance(s, str) or not s:
        return s
    if protected:
        return _basename(s) if _is_whole_path(s) else s
    if "=" in s and ("\x00" in s or ENV_ENTRY.match(s) or ENV_LIST.match(s)):
        return SCRUBBED
    if _is_whole_path(s):
        out = _basename(s)
    else:
        if (COMMAND_LINE.search(s) and "\n" not in s.strip() and s[:1] not in "{["
                and not SENTENCE.search(s)):
            return SCRUBBED
        out = POSIX_PATH.sub(lambda m: _basename(m.group(1)) if "/" in m.group(1) else
                             m.group(1), s)
        out = WIN_PATH.sub(lambda m: _basename(m.group(1)), out)
    return _replace_tokens(out, tokens or {})


def scrub_json_text(s: str, tokens: dict[str, str] | None = None) -> str:
    """NVTX payload JSON (``NVTX_EVENTS.jsonText``): the generic text rules applied to every string
    value inside it, keys and numbers kept; text that is not JSON gets the generic rules whole.
    Unchanged values keep their exact bytes."""
    if s is None or not isinstance(s, str) or not s:
        return s
    try:
        doc = json.loads(s)
    except ValueError:
        return scrub_text(s, tokens)

    changed = False

    def walk(v):
        nonlocal changed
        if isinstance(v, str):
            new = scrub_text(v, tokens)
            changed |= new != v
            return new
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    doc = walk(doc)
    return json.dumps(doc, ensure_ascii=False) if changed else s


@dataclass
class ScrubReport:
    input: str
    output: str
    keep_names: bool
    changed: dict[str, int] = field(default_factory=dict)   # "table.column" -> values changed
    residual: dict[str, int] = field(default_factory=dict)  # left-over path/env-looking values
    hosts_found: int = 0
    users_found: int = 0
    bytes_in: int = 0
    bytes_out: int = 0

    @property
    def total(self) -> int:
        return sum(self.changed.values())

    def lines(self) -> list[str]:
        out = [f"scrubbed {self.input} -> {self.output}",
               f"  {self.total} value(s) blanked or shortened; host names found: "
               f"{self.hosts_found}, user names found: {self.users_found}"]
        for k in sorted(self.changed):
            out.append(f"  {k:<40} {self.changed[k]:>7}")
        for k in sorted(self.residual):
            out.append(f"  kept (analysis needs it, check by hand): {k}: {self.residual[k]}")
        out.append(f"  size {self.bytes_in} -> {self.bytes_out} bytes")
        return out


# --------------------------------------------------------------------------------------------


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text_rows(conn: sqlite3.Connection, table: str, cols: list[str]):
    sel = ", ".join(_quote(c) for c in cols)
    return conn.execute(f"SELECT rowid, {sel} FROM {_quote(table)}").fetchall()


def _collect_identity(conn: sqlite3.Connection, keep_names: bool) -> tuple[dict, int, int]:
    """Host and user names that appear in dedicated fields, to be replaced everywhere."""
    if keep_names:
        return {}, 0, 0
    hosts: set[str] = set()
    users: set[str] = set()
    texts: list[str] = []
    if {"name", "value"} <= set(table_columns(conn, "TARGET_INFO_SYSTEM_ENV")):
        for n, v in conn.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"):
            if n in SYSENV_IDENTITY and v and n != "UserName":
                hosts.add(v.strip())
            elif n == "UserName" and v:
                users.add(v.strip())
            if v:
                texts.append(v)
    for table in ("META_DATA_CAPTURE", "META_DATA_EXPORT", "EXPORT_META_DATA"):
        if {"name", "value"} <= set(table_columns(conn, table)):
            for n, v in conn.execute(f"SELECT name, value FROM {table}"):
                if not v:
                    continue
                texts.append(v)
                if n in ("EXPORT_HOST",) or re.search(r"(^|:)(DEVICE_DISPLAY_NAME|HOST_?NAME)$", n):
                    hosts.add(v.strip())
                if n in ("EXPORT_USER",) or re.search(r"(^|:)USER_NAME$", n):
                    users.add(v.strip())
    if has_table(conn, "StringIds"):
        texts.extend(v for (v,) in conn.execute(
            "SELECT value FROM StringIds WHERE value LIKE '%USER%=%' OR value LIKE '%/home/%'"
            " OR value LIKE '%/Users/%' OR value LIKE '%LOGNAME=%'"))
    for t in texts:
        users.update(m.group(1) for m in HOME_USER.finditer(t))
        users.update(m.group(1) for m in ENV_USER.finditer(t))
    hosts = {h for h in hosts if len(h) >= 3 and h.lower() not in NOT_SECRET_NAMES}
    users = {u for u in users if len(u) >= 3 and u.lower() not in NOT_SECRET_NAMES} - hosts
    tokens = {h: HOST for h in sorted(hosts, key=len, reverse=True)}
    tokens.update({u: USER for u in sorted(users, key=len, reverse=True)})
    return tokens, len(hosts), len(users)


def _protected_string_ids(conn: sqlite3.Connection, columns=PROTECTED_ID_COLUMNS) -> set[int]:
    """StringIds ids referenced from ``columns`` of any table."""
    ids: set[int] = set()
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    for t in tables:
        if t == "StringIds" or t.startswith("ENUM_"):
            continue
        for c in table_columns(conn, t):
            if c in columns:
                ids.update(r[0] for r in conn.execute(
                    f"SELECT DISTINCT {_quote(c)} FROM {_quote(t)} "
                    f"WHERE typeof({_quote(c)})='integer'"))
    return ids


def _stream_content_ids(conn: sqlite3.Connection) -> set[int]:
    ids: set[int] = set()
    for t, c in STREAM_CONTENT_COLUMNS:
        if c in table_columns(conn, t):
            ids.update(r[0] for r in conn.execute(
                f"SELECT DISTINCT {_quote(c)} FROM {_quote(t)} WHERE {_quote(c)} IS NOT NULL"))
    return ids


def _gpu_uuid_map(conn: sqlite3.Connection, keep_names: bool) -> dict[str, str]:
    if keep_names or "uuid" not in table_columns(conn, "TARGET_INFO_GPU"):
        return {}
    out: dict[str, str] = {}
    for (u,) in conn.execute("SELECT DISTINCT uuid FROM TARGET_INFO_GPU WHERE uuid IS NOT NULL"):
        if u and UUID.match(u) and u not in out:
            n = len(out)
            out[u] = f"00000000-0000-0000-0000-{n:012d}"
    return out


class _Editor:
    def __init__(self, conn: sqlite3.Connection, report: ScrubReport):
        self.conn = conn
        self.report = report

    def update_rowid(self, table: str, col: str, rowid: int, old, new) -> None:
        if new == old:
            return
        self.conn.execute(f"UPDATE {_quote(table)} SET {_quote(col)}=? WHERE rowid=?",
                          (new, rowid))
        key = f"{table}.{col}"
        self.report.changed[key] = self.report.changed.get(key, 0) + 1


def _scrub_name_value(ed: _Editor, table: str, tokens: dict, rule) -> None:
    cols = table_columns(ed.conn, table)
    if "name" not in cols or "value" not in cols:
        return
    for rowid, name, value in _text_rows(ed.conn, table, ["name", "value"]):
        if not isinstance(value, str):
            continue
        ed.update_rowid(table, "value", rowid, value, rule(name or "", value))


def _scrub_column(ed: _Editor, table: str, col: str, fn) -> None:
    if col not in table_columns(ed.conn, table):
        return
    for rowid, value in _text_rows(ed.conn, table, [col]):
        if isinstance(value, str):
            ed.update_rowid(table, col, rowid, value, fn(value))


def _swap_bytes_in_invalid_utf8(ed: _Editor, table: str, col: str, mapping: dict) -> None:
    """Values that are not valid UTF-8 (nsys 2021-2022 store protobuf blobs such as GpuInfo in
    TEXT columns) cannot round-trip through str: swap same-length byte strings in place."""
    if col not in table_columns(ed.conn, table):
        return
    old_tf = ed.conn.text_factory
    ed.conn.text_factory = bytes
    try:
        rows = ed.conn.execute(f"SELECT rowid, {_quote(col)} FROM {_quote(table)} "
                               f"WHERE typeof({_quote(col)})='text'").fetchall()
    finally:
        ed.conn.text_factory = old_tf
    for rowid, raw in rows:
        try:
            raw.decode("utf-8")
            continue
        except UnicodeDecodeError:
            pass
        new = raw
        for a, b in mapping.items():
            new = new.replace(a.encode(), b.encode())
        if new != raw:
            ed.conn.execute(f"UPDATE {_quote(table)} SET {_quote(col)}=CAST(? AS TEXT) "
                            "WHERE rowid=?", (new, rowid))
            key = f"{table}.{col}"
            ed.report.changed[key] = ed.report.changed.get(key, 0) + 1


def _edit_copy(conn: sqlite3.Connection, report: ScrubReport, keep_names: bool) -> None:
    tokens, report.hosts_found, report.users_found = _collect_identity(conn, keep_names)
    uuids = _gpu_uuid_map(conn, keep_names)
    ed = _Editor(conn, report)

    def generic(v: str) -> str:
        return scrub_text(v, tokens)

    def capture_rule(name: str, value: str) -> str:
        if CAPTURE_BLANK.search(name):
            return SCRUBBED if value else value
        if CAPTURE_IDENTITY.search(name):
            return value if keep_names or not value else (HOST if "USER" not in name else USER)
        return generic(value)

    def export_rule(name: str, value: str) -> str:
        if name in EXPORT_IDENTITY:
            return value if keep_names or not value else SCRUBBED
        if name == "EXPORT_SCHEMA_VERSION" or name.startswith("EXPORT_SCHEMA_VERSION_"):
            return value
        return generic(value)

    def sysenv_rule(name: str, value: str) -> str:
        if name in SYSENV_BLANK:
            return SCRUBBED if value else value
        if name in SYSENV_IDENTITY:
            return value if keep_names or not value else HOST
        if "\ufffd" in value:
            return value  # invalid UTF-8 (binary protobuf): handled byte-wise below
        for u, p in uuids.items():
            value = value.replace(u, p)
        if name in ("GpuInfo",) or "\x00" in value or not value.isprintable():
            return value  # binary protobuf: only the same-length uuid swap above
        return generic(value)

    _scrub_name_value(ed, "META_DATA_CAPTURE", tokens, capture_rule)
    _scrub_name_value(ed, "META_DATA_EXPORT", tokens, export_rule)
    _scrub_name_value(ed, "EXPORT_META_DATA", tokens, export_rule)
    _scrub_name_value(ed, "TARGET_INFO_SYSTEM_ENV", tokens, sysenv_rule)
    if uuids:
        _swap_bytes_in_invalid_utf8(ed, "TARGET_INFO_SYSTEM_ENV", "value", uuids)

    if has_table(conn, "StringIds"):
        protected = _protected_string_ids(conn)
        streams = _stream_content_ids(conn) - protected
        payloads = _protected_string_ids(conn, JSON_ID_COLUMNS) - protected
        for sid, value in conn.execute("SELECT id, value FROM StringIds").fetchall():
            if not isinstance(value, str):
                continue
            if sid in streams:
                new = SCRUBBED if value else value
            elif sid in payloads:
                new = scrub_json_text(value, tokens)
            else:
                new = scrub_text(value, tokens, protected=sid in protected)
            if new != value:
                conn.execute("UPDATE StringIds SET value=? WHERE id=?", (new, sid))
                report.changed["StringIds.value"] = report.changed.get("StringIds.value", 0) + 1

    _scrub_column(ed, "DIAGNOSTIC_EVENT", "text", generic)
    _scrub_column(ed, "ANALYSIS_FILE", "filename", generic)
    _scrub_column(ed, "PROCESSES", "name", generic)
    _scrub_column(ed, "NVTX_EVENTS", "text", lambda v: scrub_text(v, protected=True))
    _scrub_column(ed, "NVTX_EVENTS", "jsonText", lambda v: scrub_json_text(v, tokens))
    if uuids:
        _scrub_column(ed, "TARGET_INFO_GPU", "uuid", lambda v: uuids.get(v, v))


def _residual(conn: sqlite3.Connection) -> dict[str, int]:
    """Text left anywhere (any TEXT value of any non-ENUM table) that still looks like an
    environment entry or a multi-level absolute path: reported for a human to check, not
    changed. Expected only in the name columns scrub keeps on purpose (NVTX text, kernel and API
    names) or in tables no export seen so far had."""
    out: dict[str, int] = {}
    path_re = re.compile(r"(?<![\w.~\-/])/[^\s/]+/[^\s/]+/")
    for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if t.startswith("ENUM_"):
            continue
        for c in table_columns(conn, t):
            q = _quote(c)
            n = 0
            for (v,) in conn.execute(f"SELECT {q} FROM {_quote(t)} WHERE typeof({q})='text' AND "
                                     f"({q} LIKE '%/%/%' OR {q} LIKE '%=%')"):
                if isinstance(v, str) and "\ufffd" not in v and (
                        path_re.search(v) or (ENV_ENTRY.match(v)
                                              and v.split("=", 1)[0].strip().isupper())):
                    n += 1
            if n:
                out[f"{t}.{c}"] = n
    return out


def scrub(in_path: str | os.PathLike, out_path: str | os.PathLike, *,
          keep_names: bool = False, force: bool = False) -> ScrubReport:
    """Write a scrubbed copy of the nsys export ``in_path`` to ``out_path`` and say what changed.

    The input is never written (read-only connection; its bytes are unchanged). The output is
    written to a temporary file next to ``out_path`` and renamed into place when complete.
    Raises the TraceError subclasses of :func:`open_report` for a bad input and OutputError when
    ``out_path`` cannot be written, is the input itself (or a link to it), or exists and ``force``
    is not given (analyze/output_policy.py)."""
    src_p, dst_p = Path(in_path), Path(out_path)
    src = open_report(in_path)          # as given: Path("") would be the current directory
    try:
        with output_policy.protect([src_p], force=force):
            output_policy.check_output(dst_p, overwrite="never")
            return _scrub_into(src, src_p, dst_p, keep_names)
    finally:
        src.close()


def _scrub_into(src: sqlite3.Connection, src_p: Path, dst_p: Path, keep_names: bool) -> ScrubReport:
    report = ScrubReport(str(src_p), str(dst_p), keep_names, bytes_in=src_p.stat().st_size)
    with atomic_path(dst_p, overwrite="never") as tmp:
        dst = sqlite3.connect(str(tmp))
        try:
            src.backup(dst)
            dst.text_factory = lambda b: b.decode("utf-8", errors="replace")
            dst.execute("PRAGMA trusted_schema=OFF")
            dst.execute("PRAGMA secure_delete=ON")
            dst.execute("PRAGMA journal_mode=MEMORY")
            with dst:
                _edit_copy(dst, report, keep_names)
            report.residual = _residual(dst)
            dst.execute("VACUUM")
        except sqlite3.Error as e:
            raise OutputError(f"cannot write {dst_p}: SQLite error while scrubbing ({e})", dst_p) from None
        finally:
            dst.close()
    report.bytes_out = dst_p.stat().st_size if dst_p.is_file() else report.bytes_out
    return report


def main_scrub(argv: list[str] | None = None) -> int:
    """``analyze-trace scrub IN -o OUT [--keep-names]``; returns the exit code."""
    ap = ArgumentParser(prog="analyze-trace scrub",
                                 description="Write a copy of an nsys SQLite export with the "
                                 "profiling machine's environment, paths and names blanked; "
                                 "timing rows are unchanged.")
    ap.add_argument("input", help="nsys SQLite export (.sqlite)")
    ap.add_argument("-o", "--output", required=True, help="scrubbed copy to write")
    ap.add_argument("--keep-names", action="store_true",
                    help="keep host names, user names and GPU uuids")
    ap.add_argument("--force", action="store_true", help="replace OUT when it exists (never the input)")
    args = ap.parse_args(argv)
    try:
        rep = scrub(args.input, args.output, keep_names=args.keep_names, force=args.force)
    except TraceError as e:
        print(f"analyze-trace: error: {e}", file=sys.stderr)      # the one error line of every command
        return e.exit_code
    print("\n".join(rep.lines()))
    return 0
