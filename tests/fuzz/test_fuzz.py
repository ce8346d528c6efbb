"""A bounded, seeded run of the fuzzer (tests/fuzz/mutations.py) on a real H200 export: every case
either analyses consistently or ends with one documented error line; no internal error, no hang,
no changed input.

The default run applies each row/schema mutation and each file damage once, then 24 random cases of one
or two mutations (``SPECPROF_FUZZ_EXAMPLES=N``: N of them)
and the seeds that found a defect; `pytest -m slow tests/fuzz` runs a long one."""
import random
import shutil
from pathlib import Path

import pytest

from tests.fuzz import mutations as M

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "fixtures" / "real" / n for n in ("h200_sweep_steps3.sqlite", "sglang_v2_l8_s0.sqlite")]
need = pytest.mark.skipif(not all(p.exists() for p in SOURCES), reason="fixtures not unpacked")


def _case(tmp_path, seed, file_kind=None):
    """A copy of one of the sources damaged as a file (``file_kind``), or at random (``seed``), then checked."""
    rng = random.Random(seed)
    src = SOURCES[seed % len(SOURCES)]
    path = tmp_path / f"case{seed}.sqlite"
    shutil.copy(src, path)
    if file_kind or rng.random() < 0.25:
        what = M.mutate_file(path, rng, file_kind)
    else:
        what = M.mutate_sql(path, rng)
    code, err = M.check(path, tmp_path / f"case{seed}.json")
    return what, code


REGRESSIONS = [1022]
"""Seeds of the long run that found a defect (1022: a zeroed page read deep inside the analysis raised
SQLite's 'database disk image is malformed' as an internal error; now exit 6)."""


@need
@pytest.mark.parametrize("seed", list(M.seeds(24)) + REGRESSIONS)
def test_fuzz_case(tmp_path, seed):
    _case(tmp_path, seed)


@need
@pytest.mark.parametrize("kind", M.FILE_KINDS)
def test_each_file_damage_once(tmp_path, kind):
    _case(tmp_path, M.FILE_KINDS.index(kind), kind)       # the sources in turn


@need
@pytest.mark.parametrize("mutation", M.ROW_AND_SCHEMA, ids=[m.__name__ for m in M.ROW_AND_SCHEMA])
def test_each_mutation_family_once(tmp_path, mutation):
    """Every row/schema mutation on its own (the cases issue 45 listed: each crashed or hung before)."""
    path = M.edited_copy(SOURCES[0], tmp_path / "m.sqlite", lambda c: mutation(c, random.Random(0)))
    M.check(path, tmp_path / "m.json")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1300))
def test_fuzz_long(tmp_path, seed):
    _case(tmp_path, seed)


def test_graph_level_trace_without_its_kernel_table_is_exit_7(tmp_path):
    """Issue 45: a graph-level trace whose kernel table is gone (its 298 kernels launched outside
    graphs lost) gave exit 0 with kernel_ns 0 and no note."""
    src = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"
    if not src.exists():
        pytest.skip("fixture not unpacked")
    path = M.edited_copy(src, tmp_path / "g.sqlite", lambda c: c.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL"))
    code, err = M.check(path, tmp_path / "g.json")
    assert code == 7 and "298 kernel launches (outside CUDA graphs)" in err


@need
@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS", "StringIds"])
def test_lower_case_table_names_read_as_sqlite_resolves_them(tmp_path, table):
    """Issue 45: a lower-case kernel table silently gave kernel time 0, a lower-case nvtx_events was
    ignored: SQLite's names are case-insensitive, and so are ours now (the same result)."""
    import json

    path = M.edited_copy(SOURCES[0], tmp_path / "l.sqlite", lambda c: c.executescript(
        f"ALTER TABLE {table} RENAME TO t_tmp; ALTER TABLE t_tmp RENAME TO {table.lower()};"))
    assert M.check(path, tmp_path / "l.json")[0] == 0
    assert M.check(SOURCES[0], tmp_path / "o.json")[0] == 0
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("l.json", "o.json"))
    assert a["phases"] == b["phases"] and a["totals"] == b["totals"]


@pytest.mark.parametrize("value", [2 ** 63 - 1, "x", 1.5, "1e400"])
def test_odd_graph_node_ids_are_null_not_a_crash(tmp_path, value):
    """A held-out fuzz case: graphNodeId = 2**63-1 on 5 kernel rows crashed ('cannot safely cast
    non-equivalent float64 to int64'); such an id is no node (NULL), the kernel is counted."""
    src = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"
    if not src.exists():
        pytest.skip("fixture not unpacked")
    def odd_ids(c):
        M._loose(c, "CUPTI_ACTIVITY_KIND_KERNEL")
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = ? WHERE rowid IN "
                  "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 5)", (value,))

    path = M.edited_copy(src, tmp_path / "g.sqlite", odd_ids)
    assert M.check(path, tmp_path / "g.json")[0] == 0
