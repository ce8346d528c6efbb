"""Hostile live timing logs (the shim's Parquet log, docs/live.md, read by analyze-trace like a report): a
real one (the H200 log of fixtures/real, a sampled, gated run of real SGLang) rewritten with hostile values
(negative, huge or null times, an end before its start, duplicated or shuffled cycles, odd counts, odd
metadata, a column of the wrong type, no rows) or damaged as bytes (truncated, bit-flipped, zeroed,
emptied). Every case either analyses consistently or ends with one documented error line
(tests/fuzz/mutations.check: no internal error, no hang, finite and non-negative durations); whatif and
advise on it likewise; the log is never changed.

The default run applies each value mutation and each byte damage once, then 8 random cases
(``SPECPROF_FUZZ_EXAMPLES=N``: N of them); `pytest -m slow tests/fuzz` runs a long one."""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import cli_process
from tests.fuzz import mutations as M

ROOT = Path(__file__).resolve().parents[2]
SOURCE = sorted((ROOT / "fixtures" / "real" / "sglang_live_h200_v2_l64_s3_gated.live").glob("*.parquet"))[0]
TIMES = ("host_start_ns", "host_end_ns", "draft_ns", "verify_ns", "draft_extend_ns", "draft_replay_ns",
         "verify_replay_ns", "draft_host_ns")
COUNTS = ("accepted_tokens", "requests", "steps", "batch_size", "verified_tokens", "timed")


def _rows(df, rng, share=0.05):
    n = len(df)
    return rng.sample(range(n), max(1, int(n * share))) if n else []


def m_negative_times(df, meta, rng):
    col = rng.choice(TIMES)
    df.loc[_rows(df, rng), col] = -rng.randint(1, 10**9)
    return col


def m_huge_times(df, meta, rng):
    col = rng.choice(TIMES)
    df.loc[_rows(df, rng), col] = rng.choice([2**62, 2**63 - 1, 10**18])
    return col


def m_null_times(df, meta, rng):
    col = rng.choice(TIMES)
    df.loc[_rows(df, rng, 0.3), col] = None
    return col


def m_end_before_start(df, meta, rng):
    rows = _rows(df, rng)
    df.loc[rows, "host_end_ns"] = df.loc[rows, "host_start_ns"] - rng.randint(1, 10**7)
    return "host_end_ns"


def m_duplicate_cycles(df, meta, rng):
    rows = _rows(df, rng, 0.2)
    return "dup", df.iloc[rows]


def m_shuffled_cycles(df, meta, rng):
    cyc = df["cycle"].to_numpy().copy()
    rng.shuffle(cyc)
    df["cycle"] = cyc
    return "cycle"


def m_odd_cycle_numbers(df, meta, rng):
    df.loc[_rows(df, rng), "cycle"] = rng.choice([-1, 0, 2**62, -(2**62)])
    return "cycle"


def m_odd_counts(df, meta, rng):
    col = rng.choice(COUNTS)
    df.loc[_rows(df, rng), col] = rng.choice([-1, 0, 7, 2**40, None])
    return col


def m_odd_ranks(df, meta, rng):
    df.loc[_rows(df, rng), "rank"] = rng.choice([-1, 2**31, None])
    return "rank"


def m_every_phase_null(df, meta, rng):
    for c in ("draft_ns", "verify_ns", "draft_extend_ns", "allreduce_ns"):
        df[c] = None
    return "phases"


def m_no_rows(df, meta, rng):
    return "empty", df.iloc[:0]


def m_odd_metadata(df, meta, rng):
    key = rng.choice([b"specprof.spec_config", b"specprof.rank", b"specprof.pid", b"specprof.wall_offset_ns"])
    meta[key] = rng.choice([b"{not json", b"-", b"", b"[1, 2]", b"null", b"99999999999999999999999"])
    return key.decode()


def m_schema_version(df, meta, rng):
    meta[b"specprof.schema_version"] = rng.choice([b"abc", b"2", b"", b"-1"])
    return "schema_version"


def m_string_column(df, meta, rng):
    """A column as text: a required one (refused, exit 12) or an optional one (read as numbers where it holds
    them, its other values nulled and counted)."""
    col = rng.choice(["verify_ns", "cycle", "requests", "host_start_ns", "draft_host_ns", "verify_replay_ns",
                      "batch_size", "gpu_span_ns"])
    text = df[col].astype("string")
    if rng.random() < 0.5:
        text = text.mask(pd.Series([rng.random() < 0.2 for _ in range(len(df))], index=df.index), "n/a")
    df[col] = text
    return col


VALUES = [m_negative_times, m_huge_times, m_null_times, m_end_before_start, m_duplicate_cycles, m_shuffled_cycles,
          m_odd_cycle_numbers, m_odd_counts, m_odd_ranks, m_every_phase_null, m_no_rows, m_odd_metadata,
          m_schema_version, m_string_column]


def rewrite(src: Path, dst: Path, mutation, rng) -> str:
    """``src`` read, one value mutation applied, written to ``dst`` with its schema metadata."""
    table = pq.read_table(src)
    meta = dict(table.schema.metadata or {})
    df = table.to_pandas(types_mapper=lambda t: pd.Int64Dtype() if pa.types.is_integer(t) else None)
    out = mutation(df, meta, rng)
    if isinstance(out, tuple):
        what, extra = out
        df = extra if what == "empty" else pd.concat([df, extra], ignore_index=True)
    else:
        what = out
    new = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(new.replace_schema_metadata(meta), dst)
    return f"{mutation.__name__}: {what}"


def damage(f: Path, rng, kind: str | None = None) -> str:
    kind = kind or rng.choice(M.BYTE_KINDS)
    M.damage_bytes(f, kind, rng)
    return f"bytes: {kind}"


def digest(d: Path) -> dict:
    return {q.name: hashlib.sha256(q.read_bytes()).hexdigest() for q in sorted(d.iterdir()) if q.is_file()}


def tool(args: list[str], timeout_s: float = 60.0) -> subprocess.CompletedProcess:
    try:
        return cli_process.run(args, timeout=timeout_s, env=dict(os.environ, PYTHONHASHSEED="0"))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hang: {args}") from None


def case(tmp_path: Path, seed: int, mutation=None, damage_kind: str | None = None) -> tuple[str, int, str]:
    """The log rewritten by ``mutation``, or damaged as bytes (``damage_kind``), or either at random (``seed``);
    then the analysis, whatif and advise on it."""
    rng = random.Random(seed)
    d = tmp_path / f"log{seed}"
    d.mkdir()
    f = d / SOURCE.name
    if damage_kind or (mutation is None and rng.random() < 0.25):
        f.write_bytes(SOURCE.read_bytes())
        what = damage(f, rng, damage_kind)
    else:
        what = rewrite(SOURCE, f, mutation or rng.choice(VALUES), rng)
    before = digest(d)
    code, err = M.check(d, tmp_path / f"case{seed}.json")      # asserts the invariants itself
    for args in (["whatif", str(d), "--steps", "1..4", "--boot", "20"], ["advise", str(d)]):   # a short bootstrap: its code runs
        r = tool(args)
        assert r.returncode in M.DOCUMENTED_EXITS | {10}, f"{what}: {args[0]} exit {r.returncode}: {r.stderr[-600:]}"
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, f"{what}: {r.stderr[-600:]}"
        if r.returncode != 0:
            assert len([ln for ln in r.stderr.splitlines() if ln.startswith("analyze-trace")]) == 1, r.stderr
    assert digest(d) == before, f"{what}: the log changed"
    return what, code, err


@pytest.mark.parametrize("mutation", VALUES, ids=[m.__name__ for m in VALUES])
def test_each_live_log_mutation_once(tmp_path, mutation):
    case(tmp_path, 7, mutation)


@pytest.mark.parametrize("col", ["draft_host_ns", "verify_replay_ns", "gpu_span_ns"])
def test_an_optional_column_of_text_is_read_as_numbers_and_the_rest_counted(tmp_path, col):
    """An optional column written as text (a hand-made log) is no internal error: its numbers are read, the
    values that are none are nulled and counted (note live_log_bad_values)."""
    from analyze.run import live

    table = pq.read_table(SOURCE)
    df = table.to_pandas(types_mapper=lambda t: pd.Int64Dtype() if pa.types.is_integer(t) else None)
    text = df[col].astype("string")
    have = int(text.notna().sum())
    text.iloc[:10] = "n/a"
    df[col] = text
    d = tmp_path / "log"
    d.mkdir()
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(table.schema.metadata),
                   d / SOURCE.name)
    raw, _ = live.read_raw([d])
    from analyze.read import live_log

    clean, counts = live_log.clean_rows(raw)
    first = sum(x is not None for x in table.column(col).to_pylist()[:10])
    assert counts["values"] == 10 and int(clean[col].notna().sum()) == have - first
    code, err = M.check(d, tmp_path / "o.json")
    assert code == 0


@pytest.mark.parametrize("kind", M.BYTE_KINDS)
def test_each_byte_damage_of_a_log_once(tmp_path, kind):
    case(tmp_path, 7, damage_kind=kind)


@pytest.mark.parametrize("seed", M.seeds(8))
def test_live_log_fuzz_case(tmp_path, seed):
    case(tmp_path, seed)


def test_a_log_whose_verify_column_is_text_is_one_line_exit_12(tmp_path):
    d = tmp_path / "log"
    d.mkdir()
    table = pq.read_table(SOURCE)
    i = table.schema.get_field_index("verify_ns")
    bad = table.set_column(i, "verify_ns", pa.array([str(x) for x in table.column(i).to_pylist()]))
    pq.write_table(bad.replace_schema_metadata(table.schema.metadata), d / SOURCE.name)
    code, err = M.check(d, tmp_path / "o.json")
    assert code == 12 and "verify_ns" in err and "non-integer" in err


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1100))
def test_live_log_fuzz_long(tmp_path, seed):
    case(tmp_path, seed)


def test_the_base_log_reads_as_it_is(tmp_path):
    d = tmp_path / "log"
    d.mkdir()
    (d / SOURCE.name).write_bytes(SOURCE.read_bytes())
    code, _ = M.check(d, tmp_path / "o.json")
    assert code == 0
    doc = json.loads((tmp_path / "o.json").read_text())
    assert doc["decode_breakdown"]


def _as_stream(dst: Path) -> None:
    """The base log written as the shim writes its open file: an Arrow IPC stream, batches of 200 cycles."""
    table = pq.read_table(SOURCE)
    with pa.OSFile(str(dst), "wb") as f:
        writer = pa.ipc.new_stream(f, table.schema)
        for batch in table.to_batches(max_chunksize=200):
            writer.write_batch(batch)


@pytest.mark.parametrize("seed", range(10))
def test_a_damaged_open_stream_reads_or_is_one_line(tmp_path, seed):
    """The open file a killed process leaves (``*.arrows``), damaged as bytes: its whole batches read, or the
    file read as none (counted in the note), or one documented error; never an internal error."""
    rng = random.Random(seed)
    d = tmp_path / "log"
    d.mkdir()
    f = d / (SOURCE.stem + ".arrows")
    _as_stream(f)
    M.damage_bytes(f, M.BYTE_KINDS[seed % len(M.BYTE_KINDS)], rng)
    before = digest(d)
    M.check(d, tmp_path / "o.json")
    assert digest(d) == before


@pytest.mark.parametrize("suffix", [".parquet", ".arrows"])
def test_a_column_name_that_is_no_utf8_is_one_line(tmp_path, suffix):
    """A log whose schema holds a name that does not decode (a damaged footer or schema message: pyarrow raised
    UnicodeDecodeError from the schema, an internal error, found by fuzzing): one line, exit 6 (CorruptReport)."""
    d = tmp_path / "log"
    d.mkdir()
    f = d / (SOURCE.stem + suffix)
    if suffix == ".arrows":
        _as_stream(f)
    else:
        f.write_bytes(SOURCE.read_bytes())
    data = f.read_bytes()
    name = b"draft_extend_replay_ns"
    assert name in data
    f.write_bytes(data.replace(name, b"\xff" + name[1:]))     # no UTF-8 text holds the byte 0xff
    code, err = M.check(d, tmp_path / "o.json")
    if suffix == ".parquet":
        assert code == 6 and "not a readable Parquet file" in err, err
    else:       # the stream's schema does not read: no rows at all (the directory holds no other file)
        assert code == 2 and "no cycle in the timing log" in err, err
