"""analyze.tools.scrub: secrets gone (down to the bytes), timing rows and analysis names unchanged,
input untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from analyze.errors import NotSqlite, OutputError
from analyze.read.connection import export_schema_version, open_report, table_columns
from analyze.tools.scrub import HOST, SCRUBBED, main_scrub, scrub, scrub_json_text, scrub_text
from helpers import cli_process

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "fixtures" / "real"
GRAPHS = REAL / "h200_1proc_graphs_graphlevel.sqlite"
EAGER = REAL / "h200_4proc_eager.sqlite"
PUBLIC = ROOT.parent / "shared" / "public-traces"
AMIR = PUBLIC / "amir-ghz_DynamicViT__nsys_profile.sqlite"
AMIR_2022 = PUBLIC / "amir-ghz_DynamicViT__nsys_profile__reexport_2022.4.sqlite"
MOCK = PUBLIC / "GindaChen_nsys-ai__mock.sqlite"
MFU = PUBLIC / "GindaChen_nsys-ai__mfu_2gpu_before.sqlite"

# text columns scrub may change; everything else must be identical row for row
SCRUBBED_COLUMNS = {
    ("StringIds", "value"), ("META_DATA_CAPTURE", "value"), ("META_DATA_EXPORT", "value"),
    ("EXPORT_META_DATA", "value"), ("TARGET_INFO_SYSTEM_ENV", "value"),
    ("DIAGNOSTIC_EVENT", "text"), ("ANALYSIS_FILE", "filename"), ("PROCESSES", "name"),
    ("NVTX_EVENTS", "text"), ("NVTX_EVENTS", "jsonText"), ("TARGET_INFO_GPU", "uuid"),
}


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def available(*paths: Path) -> list[Path]:
    return [p for p in paths if p.exists()]


ALL = available(GRAPHS, EAGER, AMIR, AMIR_2022, MOCK, MFU)


def rows(conn, table, cols):
    sel = ", ".join(f'"{c}"' for c in cols)
    return conn.execute(f'SELECT {sel} FROM "{table}" ORDER BY rowid').fetchall()


def tables(conn):
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]


@pytest.fixture(scope="module")
def scrubbed(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("scrubbed")
    for f in ALL:
        before = sha256(f)
        rep = scrub(f, d / f.name)
        assert sha256(f) == before, f"input {f.name} changed"
        out[f.name] = (f, d / f.name, rep)
    return out


@pytest.mark.parametrize("name", [p.name for p in ALL])
def test_every_row_outside_scrubbed_columns_identical(scrubbed, name):
    src, dst, rep = scrubbed[name]
    a, b = open_report(src), open_report(dst)
    assert tables(a) == tables(b)
    checked = 0
    for t in tables(a):
        cols = table_columns(a, t)
        assert table_columns(b, t) == cols
        keep = [c for c in cols if (t, c) not in SCRUBBED_COLUMNS]
        if keep:
            ra, rb = rows(a, t, keep), rows(b, t, keep)
            assert ra == rb, f"{t} changed"
            checked += len(ra)
    assert checked > 0
    for t in tables(a):
        if t.startswith("CUPTI_ACTIVITY_KIND_") or t in ("OSRT_API", "ThreadNames"):
            cols = table_columns(a, t)
            assert rows(a, t, cols) == rows(b, t, cols)  # all columns, text included


@pytest.mark.parametrize("name", [p.name for p in ALL])
def test_analysis_names_unchanged(scrubbed, name):
    src, dst, rep = scrubbed[name]
    a, b = open_report(src), open_report(dst)
    queries = []
    if "CUPTI_ACTIVITY_KIND_KERNEL" in tables(a):
        for col in ("demangledName", "shortName", "mangledName"):
            if col in table_columns(a, "CUPTI_ACTIVITY_KIND_KERNEL"):
                queries.append(f"SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               f"JOIN StringIds s ON k.{col} = s.id ORDER BY k.rowid")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables(a):
        queries.append("SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                       "JOIN StringIds s ON r.nameId = s.id ORDER BY r.rowid")
    if "NVTX_EVENTS" in tables(a):
        queries.append("SELECT n.text, s.value FROM NVTX_EVENTS n "
                       "LEFT JOIN StringIds s ON n.textId = s.id ORDER BY n.rowid")
    if "ThreadNames" in tables(a):
        queries.append("SELECT s.value FROM ThreadNames t JOIN StringIds s ON t.nameId = s.id "
                       "ORDER BY t.rowid")
    for q in queries:
        assert a.execute(q).fetchall() == b.execute(q).fetchall(), q
    assert export_schema_version(a) == export_schema_version(b)
    if "META_DATA_CAPTURE" in tables(a):
        q = ("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE "
             "'%CUDA_GRAPH_TRACE_OPTIONS:MODE' ORDER BY rowid")
        assert a.execute(q).fetchall() == b.execute(q).fetchall()


def test_real_fixture_names_and_marks_survive(scrubbed):
    src, dst, rep = scrubbed[EAGER.name]
    b = open_report(dst)
    marks = [r[0] for r in b.execute(
        "SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON n.textId = s.id "
        "WHERE n.eventType = 34 ORDER BY s.value")]
    assert marks == ["rank=0 world=4", "rank=1 world=4", "rank=2 world=4", "rank=3 world=4"]
    domains = sorted({r[0] for r in b.execute("SELECT text FROM NVTX_EVENTS WHERE eventType=75")})
    assert domains == ["sglang"]
    assert b.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] == 2728


def test_real_fixture_what_was_blanked(scrubbed):
    src, dst, rep = scrubbed[EAGER.name]
    b = open_report(dst)
    cap = dict(b.execute("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS_0:%'"
                         " AND (name LIKE '%COMMAND' OR name LIKE '%ARGUMENT_%' OR "
                         "name LIKE '%WORKING_DIR')"))
    assert cap == {"PROCESS_0:COMMAND": SCRUBBED, "PROCESS_0:ARGUMENT_0": SCRUBBED,
                   "PROCESS_0:ARGUMENT_1": SCRUBBED, "PROCESS_0:WORKING_DIR": SCRUBBED}
    env = dict(b.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
    assert env["Hostname"] == HOST
    assert env["TargetInstallDir"] == "target-linux-x64"
    assert env["CpuCores"] == "16" and env["NvDriverVersion"]  # hardware facts kept
    assert b.execute("SELECT uuid FROM TARGET_INFO_GPU").fetchone()[0] == \
        "00000000-0000-0000-0000-000000000000"
    assert b.execute("SELECT value FROM StringIds WHERE id=22").fetchone()[0] == "python3.12"
    assert b.execute("SELECT value FROM StringIds WHERE id=80").fetchone()[0] == "libc.so.6"
    # the program's stdout (ProcessStreams.contentId 359) is blanked
    assert b.execute("SELECT value FROM StringIds WHERE id=359").fetchone()[0] == SCRUBBED
    diag = [r[0] for r in b.execute("SELECT text FROM DIAGNOSTIC_EVENT WHERE text LIKE 'Loaded%'")]
    assert diag == ["Loaded CUPTI library: libcupti.so.13.0"] * 4
    # 73 whole absolute paths -> basename, the captured stdout, one "Loaded CUPTI library" message
    n_paths = open_report(src).execute(
        "SELECT count(*) FROM StringIds WHERE value LIKE '/%'").fetchone()[0]
    assert n_paths == 73
    assert rep.changed["StringIds.value"] == n_paths + 2 == 75
    assert rep.changed["TARGET_INFO_GPU.uuid"] == 1
    assert rep.residual == {}
    raw = dst.read_bytes()
    for secret in (b"/home/user/run", b"spec_workload", b"/venv/lib/python3.12",
                   b"eacce5e1-171c-5a80-fae1-4642c755c295"):
        assert secret in src.read_bytes() and secret not in raw, secret


def test_keep_names(tmp_path):
    rep = scrub(GRAPHS, tmp_path / "k.sqlite", keep_names=True)
    b = open_report(tmp_path / "k.sqlite")
    env = dict(b.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"))
    assert env["Hostname"] == "vm"
    assert b.execute("SELECT uuid FROM TARGET_INFO_GPU").fetchone()[0] == \
        "eacce5e1-171c-5a80-fae1-4642c755c295"
    assert dict(b.execute("SELECT name, value FROM META_DATA_CAPTURE"))[
        "PROCESS_0:WORKING_DIR"] == SCRUBBED
    assert "TARGET_INFO_GPU.uuid" not in rep.changed


def _plant(path: Path) -> None:
    c = sqlite3.connect(path)
    gvid = c.execute("SELECT globalVid FROM TARGET_INFO_SYSTEM_ENV LIMIT 1").fetchone()[0]
    c.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV(globalVid, devStateName, name, nameEnum, value)"
              " VALUES (?, 'Local (CLI)', 'DeviceEnvironment', 610, "
              "'SPECPROF_TEST_SECRET=hunter2;HOME=/home/alice_secret')", (gvid,))
    top = c.execute("SELECT max(id) FROM StringIds").fetchone()[0]
    c.executemany("INSERT INTO StringIds(id, value) VALUES (?, ?)", [
        (top + 1, "SPECPROF_TEST_SECRET=hunter2"),
        (top + 2, "/home/alice_secret/project/train.py"),
        (top + 3, "python3 /home/alice_secret/project/train.py --token=hunter2"),
        (top + 4, "USER=alice_secret\x00SPECPROF_TEST_SECRET=hunter2\x00PATH=/usr/bin"),
        (top + 5, "deleted row hunter3 kept in a free page"),
        (top + 6, '{"dir": "/home/alice_secret/ckpt/step_9", "env": "SPECPROF_TEST_SECRET=hunter2"}'),
    ])
    # NVTX payload JSON, inline and through jsonTextId (the analysis reads neither)
    c.execute("UPDATE NVTX_EVENTS SET jsonText=?, jsonTextId=? WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS)",
              ('{"file": "/home/alice_secret/data/shard.bin", "note": "SPECPROF_TEST_SECRET=hunter2", '
               '"n": 3, "cmd": ["python3 /home/alice_secret/x.py --token=hunter2"]}', top + 6))
    c.execute("INSERT INTO META_DATA_CAPTURE(name, value) VALUES "
              "('PROCESS_0:ENVIRONMENT_VARIABLE', 'SPECPROF_TEST_SECRET=\"hunter2\"')")
    c.execute("INSERT INTO DIAGNOSTIC_EVENT(timestamp, timestampType, source, severity, text, "
              "globalPid) VALUES (1, 1, 1, 1, 'cannot open /home/alice_secret/cfg.ini', 0)")
    c.execute("UPDATE PROCESSES SET name='/home/alice_secret/.venv/bin/python' "
              "WHERE rowid = (SELECT max(rowid) FROM PROCESSES)")
    c.commit()
    c.execute("PRAGMA secure_delete=OFF")  # this SQLite build defaults to ON
    c.execute("DELETE FROM StringIds WHERE id=?", (top + 5,))  # leaves bytes in a free page
    c.commit()
    c.close()


@pytest.mark.parametrize("fixture", [GRAPHS, EAGER])
def test_planted_secrets_are_gone_from_the_bytes(tmp_path, fixture):
    planted = tmp_path / "planted.sqlite"
    shutil.copy(fixture, planted)
    _plant(planted)
    data_in = planted.read_bytes()
    assert b"hunter2" in data_in and b"alice_secret" in data_in
    assert b"hunter3" in data_in  # deleted, but still in the file's free space
    before = sha256(planted)
    out = tmp_path / "out" / "shared.sqlite"
    rep = scrub(planted, out)
    assert sha256(planted) == before
    data_out = out.read_bytes()
    for secret in (b"hunter2", b"hunter3", b"alice_secret", b"SPECPROF_TEST_SECRET"):
        assert secret not in data_out, secret
    b = open_report(out)
    assert b.execute("SELECT value FROM StringIds WHERE value LIKE '%train.py'").fetchall() == \
        [("train.py",)]
    assert b.execute("SELECT text FROM DIAGNOSTIC_EVENT WHERE timestamp=1").fetchone()[0] == \
        "cannot open cfg.ini"
    assert b.execute("SELECT name FROM PROCESSES WHERE rowid = (SELECT max(rowid) FROM PROCESSES)"
                     ).fetchone()[0] == "python"
    assert rep.users_found == 1
    payload, payload_id = b.execute("SELECT jsonText, jsonTextId FROM NVTX_EVENTS "
                                    "WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS)").fetchone()
    assert json.loads(payload) == {"file": "shard.bin", "note": SCRUBBED, "n": 3, "cmd": [SCRUBBED]}
    assert json.loads(b.execute("SELECT value FROM StringIds WHERE id=?", (payload_id,)).fetchone()[0]) == \
        {"dir": "step_9", "env": SCRUBBED}
    assert b.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["shared.sqlite"]


def test_public_traces_secrets_removed(scrubbed):
    checks = {
        MOCK.name: [b"rich-wsl", b"DESKTOP-KBEMEQS", b"GEMINI_CLI_IDE_AUTH_TOKEN",
                    b"VSCODE_GIT_IPC_AUTH_TOKEN", b"100.109.103.51", b"/home/"],
        MFU.name: [b"MODAL_TASK_ID", b"ta-01KSHMNARCWAQ00A0543TVYVJR", b"/tmp/fv_mfu_training.py",
                   b"GPU-672a921d-c216-dbaa-78b2-9b40581eedb6", b"quadd_session_"],
        AMIR.name: [b"amirahsaei", b"INVOCATION_ID", b"/home/", b"73532419-2617-0daf-4605"],
        AMIR_2022.name: [b"amirahsaei", b"INVOCATION_ID", b"73532419-2617-0daf-4605"],
    }
    done = 0
    for name, secrets in checks.items():
        if name not in scrubbed:
            continue
        src, dst, rep = scrubbed[name]
        raw_in, raw_out = src.read_bytes(), dst.read_bytes()
        for s in secrets:
            assert s in raw_in, (name, s)
            assert s not in raw_out, (name, s)
        done += 1
    if not done:
        pytest.skip("public traces not present")


def test_protobuf_gpuinfo_stays_valid_bytes(scrubbed):
    if AMIR.name not in scrubbed:
        pytest.skip("public traces not present")
    src, dst, rep = scrubbed[AMIR.name]
    read = []
    for p in (src, dst):
        c = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        c.text_factory = bytes
        read.append(c.execute("SELECT value, typeof(value) FROM TARGET_INFO_SYSTEM_ENV "
                              "WHERE name='GpuInfo'").fetchone())
        c.close()
    (a, ta), (b, tb) = read
    assert ta == tb == b"text" and len(a) == len(b)
    assert a.replace(b"73532419-2617-0daf-4605-77e1778f3067",
                     b"00000000-0000-0000-0000-000000000000") == b


def test_scrub_text_rules():
    assert scrub_text("/usr/lib/x86_64-linux-gnu/libc.so.6") == "libc.so.6"
    assert scrub_text("/root/.config/NVIDIA Corporation/nsys-config.ini") == "nsys-config.ini"
    assert scrub_text("PATH=/usr/bin:/bin") == SCRUBBED
    assert scrub_text("A=1;B=2") == SCRUBBED
    assert scrub_text("python3 train.py --lr 3") == SCRUBBED
    assert scrub_text("Buffers will be flushed. See --flush-on-cudaprofilerstop") == \
        "Buffers will be flushed. See --flush-on-cudaprofilerstop"
    assert scrub_text("see /tmp/a/pid_1_stdout.log and stderr.log") == \
        "see pid_1_stdout.log and stderr.log"
    assert scrub_text(r"C:\Users\bob\run\trace.nsys-rep") == "trace.nsys-rep"
    assert scrub_text("job on gpu-host-7 done", {"gpu-host-7": "<host>"}) == "job on <host> done"
    assert scrub_text("kworker/R-rcu_gp") == "kworker/R-rcu_gp"
    # protected (analysis) names: only whole absolute paths change
    assert scrub_text("rank=0 world=4", protected=True) == "rank=0 world=4"
    assert scrub_text("void at::native::f<float>(T1 /* x */)", protected=True) == \
        "void at::native::f<float>(T1 /* x */)"
    assert scrub_text("/data/secret/range", protected=True) == "range"
    # NVTX payload JSON: every string value, keys and numbers kept; untouched JSON keeps its bytes
    assert json.loads(scrub_json_text('{"path": "/home/u/a.bin", "k": [1, "HF_TOKEN=x"], "ok": "fine"}')) == \
        {"path": "a.bin", "k": [1, SCRUBBED], "ok": "fine"}
    assert scrub_json_text('{"a":  1,"b":"x"}') == '{"a":  1,"b":"x"}'
    assert scrub_json_text("not json /home/u/a.bin") == "not json a.bin"


def test_output_equal_to_input_refused(tmp_path):
    copy = tmp_path / "r.sqlite"
    shutil.copy(GRAPHS, copy)
    before = sha256(copy)
    with pytest.raises(OutputError, match="it is an input of this run"):
        scrub(copy, copy)
    with pytest.raises(OutputError, match="it is an input of this run"):
        scrub(copy, copy, force=True)          # --force never makes an input an output
    assert sha256(copy) == before


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OutputError) as ei:
        scrub(GRAPHS, blocker / "out.sqlite")
    assert ei.value.exit_code == 8


def test_main_scrub_cli(tmp_path, capsys):
    out = tmp_path / "o.sqlite"
    assert main_scrub([str(GRAPHS), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"scrubbed {GRAPHS} -> {out}" in text
    assert "META_DATA_CAPTURE.value" in text and "TARGET_INFO_SYSTEM_ENV.value" in text
    assert out.exists()
    bad = tmp_path / "notes.sqlite"
    bad.write_text("hello")
    assert main_scrub([str(bad), "-o", str(tmp_path / "x.sqlite")]) == NotSqlite.exit_code
    assert "error: " in capsys.readouterr().err
    assert not (tmp_path / "x.sqlite").exists()


def test_scrubbed_copy_analyzes_identically_through_the_cli(tmp_path):
    """`analyze-trace scrub IN -o OUT`: the analysis of OUT equals that of IN, and IN is unchanged."""
    import hashlib

    import analyze

    src = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "h200_4proc_eager.sqlite"
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    out = tmp_path / "shared.sqlite"
    proc = cli_process.run(["scrub", str(src), "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    a, b = analyze.load(src), analyze.load(out)
    for name in ("phases", "totals", "kernels", "cycles"):
        assert a.table(name).equals(b.table(name)), name
    assert a.nvtx_projection.drop(columns="input").equals(b.nvtx_projection.drop(columns="input"))
    assert a.ranks.drop(columns="input").equals(b.ranks.drop(columns="input"))
