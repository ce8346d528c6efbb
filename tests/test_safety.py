"""Opening reports (analyze/read/connection.py, inputs.py, nsys_export.py), errors (analyze/errors.py) and
atomic outputs (analyze/atomic.py): every error class from a real file situation, the read-only
guarantees, and atomic outputs."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from analyze.atomic import _umask
from fixtures import nsys_record
from analyze.atomic import atomic_dir_write, atomic_path, atomic_write
from analyze.errors import CorruptReport, MissingInput, NoCudaActivity, NotNsysExport, NotSqlite, NsysRepGiven, OutputError, SchemaWarning, TraceError
from analyze.errors import EXIT_INTERNAL_ERROR
from analyze.read.connection import NSYS_REP_MAGIC, reading, table_names
from analyze.read.connection import export_schema_version, open_report, table_columns
from analyze.read.inputs import find_reports
from analyze.read.nsys_export import export_nsys_rep

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
GRAPHS = REAL / "h200_1proc_graphs_graphlevel.sqlite"
EAGER = REAL / "h200_4proc_eager.sqlite"
PUBLIC = ROOT.parent / "shared" / "public-traces"
AMIR = PUBLIC / "amir-ghz_DynamicViT__nsys_profile.sqlite"
AMIR_2022 = PUBLIC / "amir-ghz_DynamicViT__nsys_profile__reexport_2022.4.sqlite"
MFU = PUBLIC / "GindaChen_nsys-ai__mfu_2gpu_before.sqlite"
MOCK = PUBLIC / "GindaChen_nsys-ai__mock.sqlite"


def need(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"{p} not present")
    return p


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def leftovers(d: Path) -> list[str]:
    return sorted(q.name for q in d.iterdir() if q.name.startswith(".") or q.name.endswith(".tmp"))


# ------------------------------------------------------------------ error classes


def test_exit_codes_are_distinct_and_documented():
    classes = [MissingInput, NsysRepGiven, NotSqlite, NotNsysExport, CorruptReport,
               NoCudaActivity, OutputError]
    codes = [c.exit_code for c in classes]
    assert codes == [2, 3, 4, 5, 6, 7, 8]
    assert TraceError.exit_code == EXIT_INTERNAL_ERROR == 1
    doc = (ROOT / "docs" / "bad_input.md").read_text()
    for c in classes:
        assert f"| {c.exit_code} | `{c.__name__}`" in doc
    # every error class of analyze/errors.py is in the table, with its own code or under its parent's
    from analyze import errors

    every = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, TraceError) and c is not TraceError]
    assert len(every) == 15
    # the exit-code table, both ways: every class has its row with its code, every class-named row
    # is a class of analyze/errors.py with that code
    import re
    table = doc.split("## Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(2): int(m.group(1)) for m in re.finditer(r"^\| (\d+) \| `(\w+)` \|", table, re.M)}
    assert rows == {c.__name__: c.exit_code for c in every}


def test_message_is_one_line():
    e = CorruptReport("a\nb\n  c", "/x")
    assert str(e) == "a b c" and e.path == "/x" and e.exit_code == 6


def test_missing_path(tmp_path):
    with pytest.raises(MissingInput) as ei:
        open_report(tmp_path / "nope.sqlite")
    assert ei.value.exit_code == 2
    assert "nope.sqlite: no such file" in str(ei.value)


def test_broken_symlink(tmp_path):
    (tmp_path / "link.sqlite").symlink_to(tmp_path / "gone.sqlite")
    with pytest.raises(MissingInput, match="broken symbolic link"):
        open_report(tmp_path / "link.sqlite")


def test_directory_without_reports(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(MissingInput, match="directory holds no .sqlite report"):
        open_report(tmp_path)
    with pytest.raises(MissingInput):
        find_reports(tmp_path)


def test_directory_with_reports_lists_them(tmp_path):
    shutil.copy(GRAPHS, tmp_path / "b.sqlite")
    shutil.copy(GRAPHS, tmp_path / "a.sqlite")
    (tmp_path / "c.txt").write_text("x")
    assert [p.name for p in find_reports(tmp_path)] == ["a.sqlite", "b.sqlite"]
    with pytest.raises(MissingInput, match="holding 2 report"):
        open_report(tmp_path)


def test_nsys_rep_given(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"NVIDIA Tegra Profiler" + b"\0" * 100)
    with pytest.raises(NsysRepGiven) as ei:
        open_report(rep)
    assert ei.value.exit_code == 3
    assert f"nsys export --type sqlite -o {tmp_path}/run.sqlite {tmp_path}/run.nsys-rep" \
        in str(ei.value)
    qd = tmp_path / "old.qdrep"
    qd.write_bytes(b"x")
    with pytest.raises(NsysRepGiven, match=r"-o \S*/old\.sqlite"):
        open_report(qd)


def test_nsys_rep_renamed_to_sqlite_is_recognised_by_content(tmp_path):
    fake = tmp_path / "report.sqlite"
    fake.write_bytes(NSYS_REP_MAGIC + b"filer\0" + b"\1" * 4000)
    with pytest.raises(NsysRepGiven):
        open_report(fake)


def test_directory_with_only_nsys_rep(tmp_path):
    (tmp_path / "r0.nsys-rep").write_bytes(b"x")
    with pytest.raises(NsysRepGiven, match="nsys export --type sqlite"):
        find_reports(tmp_path)


def test_text_file_is_not_sqlite(tmp_path):
    t = tmp_path / "trace.sqlite"
    t.write_text("Time (%),Total Time (ns)\n12.5,1000\n")
    with pytest.raises(NotSqlite) as ei:
        open_report(t)
    assert ei.value.exit_code == 4 and "a text file" in str(ei.value)
    with pytest.raises(NotSqlite):
        open_report(ROOT / "fixtures" / "real" / "h200_4proc_eager.stats_nvtx_sum.csv")


def test_binary_file_is_not_sqlite(tmp_path):
    b = tmp_path / "x.sqlite"
    b.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(NotSqlite, match="binary data"):
        open_report(b)


def test_sqlite_that_is_not_nsys(tmp_path):
    db = tmp_path / "other.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT)")
    c.execute("INSERT INTO users(name) VALUES ('x')")
    c.commit()
    c.close()
    with pytest.raises(NotNsysExport) as ei:
        open_report(db)
    assert ei.value.exit_code == 5 and "users" in str(ei.value)


def test_truncated_copy_is_corrupt(tmp_path):
    data = GRAPHS.read_bytes()
    half = tmp_path / "half.sqlite"
    half.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorruptReport) as ei:
        open_report(half)
    assert ei.value.exit_code == 6
    assert f"{len(data) // 2} bytes but its header says {len(data) // 4096} pages" in str(ei.value)


def test_truncated_mid_page_is_corrupt(tmp_path):
    odd = tmp_path / "odd.sqlite"
    odd.write_bytes(GRAPHS.read_bytes()[:10_000])
    with pytest.raises(CorruptReport):
        open_report(odd)


def test_header_only_is_corrupt(tmp_path):
    short = tmp_path / "short.sqlite"
    short.write_bytes(GRAPHS.read_bytes()[:60])
    with pytest.raises(CorruptReport, match="shorter than its 100-byte header"):
        open_report(short)


def test_zero_byte_file_is_corrupt(tmp_path):
    z = tmp_path / "empty.sqlite"
    z.write_bytes(b"")
    with pytest.raises(CorruptReport, match="empty file"):
        open_report(z)


def test_damaged_pages_are_corrupt(tmp_path):
    """Same size, valid header, garbage in the schema page: caught by the probe."""
    data = bytearray(GRAPHS.read_bytes())
    data[100:4096] = b"\xa5" * (4096 - 100)
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptReport):
        open_report(bad)


def test_damaged_data_page_found_by_quick_check(tmp_path):
    data = bytearray(EAGER.read_bytes())
    page = 4096
    # a page in the middle of the file (table data), size and header left intact
    mid = (len(data) // page // 2) * page
    data[mid: mid + page] = b"\x0d" + b"\xff" * (page - 1)
    bad = tmp_path / "mid.sqlite"
    bad.write_bytes(bytes(data))
    with pytest.raises(CorruptReport):
        conn = open_report(bad)
        # if the probe missed it, reading everything must still end in CorruptReport
        with reading(bad):
            for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
                conn.execute(f'SELECT * FROM "{t}"').fetchall()


def test_reading_turns_database_error_into_corrupt_report():
    with pytest.raises(CorruptReport, match="x.sqlite: cannot read the report"):
        with reading("x.sqlite"):
            raise sqlite3.DatabaseError("database disk image is malformed")


# ------------------------------------------------------------------ good inputs


def test_real_fixtures_open_read_only():
    for f in (GRAPHS, EAGER):
        before = sha256(f)
        mtime = f.stat().st_mtime_ns
        conn = open_report(f)
        assert export_schema_version(conn) == (3, 20, 3)
        assert conn.schema_version == (3, 20, 3) and conn.path == str(f)
        assert conn.immutable is True
        n_kernels = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        assert n_kernels > 0
        for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
            conn.execute(f'SELECT * FROM "{t}"').fetchall()
        assert conn.execute("PRAGMA query_only").fetchone()[0] == 1
        assert conn.execute("PRAGMA trusted_schema").fetchone()[0] == 0
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO StringIds(id, value) VALUES (999999, 'x')")
        if hasattr(conn, "load_extension"):  # Python built with extension support
            with pytest.raises(sqlite3.OperationalError):
                conn.load_extension("/nonexistent/libx")
        conn.close()
        assert sha256(f) == before and f.stat().st_mtime_ns == mtime


def test_real_fixture_counts():
    conn = open_report(EAGER)
    # 2728 = sum of Instances in nsys' own cuda_gpu_kern_sum CSV next to the fixture
    assert conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 2728
    marks = [r[0] for r in conn.execute(
        "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON n.textId = s.id "
        "WHERE n.eventType = 34 ORDER BY s.value")]
    assert marks == ["rank=0 world=4", "rank=1 world=4", "rank=2 world=4", "rank=3 world=4"]


def test_table_columns():
    conn = open_report(GRAPHS)
    cols = table_columns(conn, "NVTX_EVENTS")
    assert cols[:3] == ["start", "end", "eventType"] and "textId" in cols and "domainId" in cols
    assert "graphId" in table_columns(conn, "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
    assert table_columns(conn, "NO_SUCH_TABLE") == []
    assert table_columns(conn, 'x"; DROP TABLE StringIds; --') == []


def test_journal_next_to_report_disables_immutable(tmp_path):
    copy = tmp_path / "r.sqlite"
    shutil.copy(GRAPHS, copy)
    (tmp_path / "r.sqlite-journal").write_bytes(b"")
    conn = open_report(copy)
    assert conn.immutable is False
    assert conn.execute("SELECT count(*) FROM StringIds").fetchone()[0] == 384


def test_path_with_uri_special_characters(tmp_path):
    d = tmp_path / "a b?c#d%20"
    d.mkdir()
    copy = d / "r&x=1.sqlite"
    shutil.copy(GRAPHS, copy)
    conn = open_report(copy)
    assert conn.execute("SELECT count(*) FROM StringIds").fetchone()[0] == 384


def test_amir_no_metadata_and_invalid_utf8():
    f = need(AMIR)
    before = sha256(f)
    conn = open_report(f)
    assert export_schema_version(conn) is None
    values = [v for (v,) in conn.execute("SELECT value FROM StringIds")]
    assert len(values) == 573 and all(isinstance(v, str) for v in values)
    # the GpuInfo row of TARGET_INFO_SYSTEM_ENV is a protobuf blob in a TEXT column: invalid
    # UTF-8 (byte 0xea), which must decode with U+FFFD instead of raising
    gpu_info = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name='GpuInfo'"
                            ).fetchone()[0]
    assert gpu_info.startswith("\n\ufffd\x01") and "NVIDIA RTX A2000 12GB" in gpu_info
    raw = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    raw.text_factory = bytes
    blob = raw.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name='GpuInfo'"
                       ).fetchone()[0]
    raw.close()
    with pytest.raises(UnicodeDecodeError):
        blob.decode("utf-8")
    for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        conn.execute(f'SELECT * FROM "{t}"').fetchall()
    conn.close()
    assert sha256(f) == before


def test_2022_reexport_schema_3_0():
    conn = open_report(need(AMIR_2022))
    assert export_schema_version(conn) == (3, 0, 0)
    assert "EXPORT_META_DATA" in table_names(conn)


def test_schema_3_25_accepted_without_warning():
    f = need(MFU)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        conn = open_report(f)
    assert export_schema_version(conn) == (3, 25, 0)
    assert not [x for x in w if issubclass(x.category, SchemaWarning)]
    assert conn.execute("SELECT count(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL"
                        ).fetchone()[0] == 2


def test_newer_schema_warns(tmp_path):
    copy = tmp_path / "new.sqlite"
    shutil.copy(GRAPHS, copy)
    c = sqlite3.connect(copy)
    c.execute("UPDATE META_DATA_EXPORT SET value='3.31.2' WHERE name='EXPORT_SCHEMA_VERSION'")
    c.commit()
    c.close()
    with pytest.warns(SchemaWarning, match="3.31.2 is newer than the newest tested"):
        conn = open_report(copy)
    assert conn.schema_version == (3, 31, 2)


# ------------------------------------------------------------------ nsys export


def test_export_without_nsys_gives_command(tmp_path, monkeypatch):
    rep = tmp_path / "x.nsys-rep"
    rep.write_bytes(b"x")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(NsysRepGiven, match=r"nsys is not on PATH; run `nsys export --type sqlite"):
        export_nsys_rep(rep)


def test_export_failure_leaves_nothing(tmp_path):
    if not shutil.which("nsys"):
        pytest.skip("nsys not on PATH")
    rep = tmp_path / "broken.nsys-rep"
    rep.write_bytes(b"this is not a report")
    with pytest.raises(NsysRepGiven, match="nsys export. failed"):
        export_nsys_rep(rep, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.nsys-rep"]


def test_nsys_tests_run_one_at_a_time():
    """While one test process holds the nsys lock, another cannot take it (it would wait): the suite's
    workers never start two `nsys profile` at once (fixtures/nsys_record.one_profile_at_a_time)."""
    probe = ("import fcntl, tempfile, pathlib, sys\n"
             "from fixtures.nsys_record import LOCK_NAME\n"
             "fh = open(pathlib.Path(tempfile.gettempdir()) / LOCK_NAME, 'a')\n"
             "try:\n    fcntl.flock(fh, fcntl.LOCK_EX | (fcntl.LOCK_NB if sys.argv[1] == 'now' else 0))\n"
             "except BlockingIOError:\n    sys.exit(3)\n")
    with nsys_record.one_profile_at_a_time():
        held = subprocess.run([sys.executable, "-c", probe, "now"], cwd=ROOT, timeout=60)
    # released: a waiting taker gets it (another worker's nsys test may hold it a while first)
    later = subprocess.run([sys.executable, "-c", probe, "wait"], cwd=ROOT, timeout=600)
    assert (held.returncode, later.returncode) == (3, 0)


def test_an_nsys_run_is_retried_once_after_its_own_transient_failure():
    """nsys 2022.4 now and then fails on its agent connection and writes no report ('Connection reset by peer', 'Local
    Endpoint is not available'): the run goes once more, in a fresh place; any other result is returned at once."""
    def proc(rc, err=""):
        return subprocess.CompletedProcess([], rc, "", err)
    seen = []

    def flaky(attempt):
        seen.append(attempt)
        return proc(1, "Connection reset by peer") if attempt == 0 else proc(0)
    assert nsys_record.with_retry(flaky).returncode == 0 and seen == [0, 1]
    seen.clear()
    assert nsys_record.with_retry(lambda a: seen.append(a) or proc(1, "no such file")).returncode == 1 and seen == [0]
    seen.clear()
    always = nsys_record.with_retry(lambda a: seen.append(a) or proc(1, "Local Endpoint is not available"))
    assert always.returncode == 1 and seen == [0, 1]
    seen.clear()
    lost = nsys_record.with_retry(lambda a: seen.append(a) or proc(1 - a, "Connection to the Agent lost"))
    assert lost.returncode == 0 and seen == [0, 1]
    seen.clear()
    eof = nsys_record.with_retry(lambda a: seen.append(a) or proc(1 - a, "End of file\nerror: nsys wrote no report"))
    assert eof.returncode == 0 and seen == [0, 1]
    seen.clear()

    def hung_once(attempt):
        seen.append(attempt)
        if attempt == 0:
            raise subprocess.TimeoutExpired(["nsys"], 600)
        return proc(0)
    assert nsys_record.with_retry(hung_once).returncode == 0 and seen == [0, 1]
    seen.clear()

    def always_hung(attempt):
        seen.append(attempt)
        raise subprocess.TimeoutExpired(["nsys"], 600)
    with pytest.raises(subprocess.TimeoutExpired):
        nsys_record.with_retry(always_hung)
    assert seen == [0, 1]


@pytest.mark.nsys
def test_export_real_report(tmp_path):
    if not shutil.which("nsys"):
        pytest.skip("nsys not on PATH")
    prof, rep = nsys_record.record(tmp_path / "tiny", ["sleep", "0.1"], trace="osrt")
    if prof.returncode != 0 or not rep.exists():
        pytest.skip(f"nsys profile does not work here: {prof.stderr[-300:]}")
    with pytest.raises(NsysRepGiven):
        open_report(rep)
    out = export_nsys_rep(rep, progress=False)
    assert out == tmp_path / "tiny.sqlite"
    conn = open_report(out)
    assert conn.execute("SELECT count(*) FROM StringIds").fetchone()[0] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.nsys-rep", "tiny.sqlite"]
    # an existing export is reused, not redone
    mtime = out.stat().st_mtime_ns
    assert export_nsys_rep(rep, progress=False) == out and out.stat().st_mtime_ns == mtime


# ------------------------------------------------------------------ atomic outputs


def test_atomic_write_success(tmp_path):
    p = tmp_path / "out.csv"
    with atomic_write(p) as f:
        f.write("a,b\n1,2\n")
        assert not p.exists()  # nothing visible before the block ends
    assert p.read_text() == "a,b\n1,2\n"
    assert leftovers(tmp_path) == []
    mode = p.stat().st_mode & 0o777
    assert mode == 0o666 & ~_umask()


def test_atomic_write_failure_keeps_old_file(tmp_path):
    p = tmp_path / "out.csv"
    p.write_text("old\n")
    with pytest.raises(ZeroDivisionError):
        with atomic_write(p) as f:
            f.write("new, partial")
            1 / 0
    assert p.read_text() == "old\n"
    assert leftovers(tmp_path) == []


def test_atomic_write_failure_leaves_no_file(tmp_path):
    p = tmp_path / "fresh.json"
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(p, "wb") as f:
            f.write(b"{")
            raise KeyboardInterrupt
    assert not p.exists() and list(tmp_path.iterdir()) == []


def test_atomic_write_under_a_file_is_output_error(tmp_path):
    blocker = tmp_path / "iam_a_file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as ei:
        with atomic_write(blocker / "sub" / "out.csv") as f:
            f.write("x")
    assert ei.value.exit_code == 8 and "\n" not in str(ei.value)
    assert blocker.read_text() == "x"


def test_atomic_write_unwritable_proc(tmp_path):
    with pytest.raises(OutputError, match="cannot write"):
        with atomic_write("/proc/specprof_no_such_dir/out.csv") as f:
            f.write("x")
    with pytest.raises(OutputError):
        with atomic_write("/proc/version") as f:
            f.write("x")


def test_atomic_write_onto_directory(tmp_path):
    with pytest.raises(OutputError, match="is a directory"):
        with atomic_write(tmp_path) as f:
            f.write("x")


def test_atomic_path_for_sqlite_writer(tmp_path):
    p = tmp_path / "db.sqlite"
    with atomic_path(p) as tmp:
        assert tmp.parent == tmp_path and tmp != p
        c = sqlite3.connect(tmp)
        c.execute("CREATE TABLE t(x)")
        c.commit()
        c.close()
    assert sqlite3.connect(p).execute("SELECT count(*) FROM t").fetchone()[0] == 0
    assert leftovers(tmp_path) == []


def test_atomic_dir_write(tmp_path):
    out = tmp_path / "report"
    with atomic_dir_write(out) as d:
        d.open("a.csv").write("a\n")
        with d.open("b.bin", "wb") as f:
            f.write(b"\x00\x01")
        d.path("c.txt").write_text("c")
        assert sorted(q.name for q in out.iterdir() if not q.name.startswith(".")) == []
    assert (out / "a.csv").read_text() == "a\n"
    assert (out / "b.bin").read_bytes() == b"\x00\x01"
    assert (out / "c.txt").read_text() == "c"
    assert leftovers(out) == []


def test_atomic_dir_write_failure_keeps_old_files(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "a.csv").write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_dir_write(out) as d:
            d.open("a.csv").write("new")
            d.open("b.csv").write("new")
            raise RuntimeError("boom")
    assert sorted(q.name for q in out.iterdir()) == ["a.csv"]
    assert (out / "a.csv").read_text() == "old"


def test_atomic_dir_write_into_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        with atomic_dir_write(f):
            pass
    with pytest.raises(OutputError):
        with atomic_dir_write(f / "sub"):
            pass
    with pytest.raises(ValueError):
        with atomic_dir_write(tmp_path / "ok") as d:
            d.open("../escape.csv")


def test_a_report_with_a_wal_is_read_without_touching_its_sidecars(tmp_path):
    """Issue 45: a report with a real -wal and a garbage -shm: SQLite rewrote the -shm; with a -wal and
    no -shm a new -shm appeared. Such a report is read from a private snapshot: no byte beside it
    changes and no file appears; the WAL's rows are read."""
    import hashlib
    import os
    import shutil
    import sqlite3

    import analyze

    src = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200_sweep_steps1.sqlite"
    if not src.exists():
        pytest.skip("fixture not unpacked")
    work = tmp_path / "w.sqlite"
    shutil.copy(src, work)
    c = sqlite3.connect(work)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA wal_autocheckpoint=0")
    c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 2 = 0")     # lives in the WAL only
    c.commit()
    rep = tmp_path / "r.sqlite"
    shutil.copy(work, rep)
    shutil.copy(str(work) + "-wal", str(rep) + "-wal")
    c.close()
    whole = analyze.load(str(src))

    def files():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.glob("r.sqlite*")}

    for shm in (os.urandom(32768), None):
        if shm is not None:
            (tmp_path / "r.sqlite-shm").write_bytes(shm)
        else:
            (tmp_path / "r.sqlite-shm").unlink()
        before = files()
        a = analyze.load(str(rep))
        assert files() == before
        assert 0 < len(a.gpu_ops) < len(whole.gpu_ops)        # the WAL's deletions were read
