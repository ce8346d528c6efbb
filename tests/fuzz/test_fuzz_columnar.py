"""Hostile columnar exports (nsys's ``parquetdir``): a real H200 export written as a parquetdir
(fixtures/columnar.py), then one of its table files truncated, bit-flipped, zeroed in a range, emptied,
deleted or swapped for another table's file. Every case either analyses consistently or ends with one
documented error line (tests/fuzz/mutations.check: no internal error, no hang, finite times); the
export is never changed (its SQLite copy goes beside it, a new file).

The default run applies each damage once, then 16 random cases (``SPECPROF_FUZZ_EXAMPLES=N``: N of
them); `pytest -m slow tests/fuzz` runs a long one."""
import hashlib
import random
import shutil
from pathlib import Path

import pytest

from fixtures import columnar as write_columnar
from tests.fuzz import mutations as M

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "fixtures" / "real" / "h200_sweep_steps3.sqlite"
need = pytest.mark.skipif(not SOURCE.exists(), reason="fixtures not unpacked")
# the tables the analysis reads most, chosen more often than the rest
HOT = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
       "TARGET_INFO_SESSION_START_TIME", "META_DATA_EXPORT", "CUPTI_ACTIVITY_KIND_MEMCPY")


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    if not SOURCE.exists():
        pytest.skip("fixtures not unpacked")
    return write_columnar.write(SOURCE, tmp_path_factory.mktemp("pq") / "base_pqtdir")


def tree(path: Path) -> dict:
    return {q.name: hashlib.sha256(q.read_bytes()).hexdigest() for q in sorted(path.iterdir()) if q.is_file()}


KINDS = (*M.BYTE_KINDS, "delete", "swap")


def mutate(export_dir: Path, rng: random.Random, kind: str | None = None) -> str:
    """A table file of the export (a hot one more often) damaged as ``kind`` (:data:`KINDS`; at random when
    None)."""
    files = sorted(export_dir.glob("*.parquet"))
    hot = [f for f in files if f.stem in HOT]
    f = rng.choice(hot) if hot and rng.random() < 0.7 else rng.choice(files)
    kind = kind or rng.choice(KINDS)
    if kind in M.BYTE_KINDS:
        M.damage_bytes(f, kind, rng)
    elif kind == "delete":
        f.unlink()
    else:
        other = rng.choice([g for g in files if g != f])
        shutil.copy(other, f)
    return f"{f.stem}: {kind}"


def case(tmp_path, export, seed, kind=None):
    rng = random.Random(seed)
    d = tmp_path / f"case{seed}_pqtdir"
    shutil.copytree(export, d)
    what = mutate(d, rng, kind)
    before = tree(d)
    code, err = M.check(d, tmp_path / f"case{seed}.json")
    assert tree(d) == before, f"{what}: the export changed"
    return what, code, err


@need
@pytest.mark.parametrize("kind", KINDS)
def test_each_columnar_damage_once(tmp_path, export, kind):
    case(tmp_path, export, KINDS.index(kind), kind)


@need
@pytest.mark.parametrize("seed", M.seeds(16))
def test_columnar_fuzz_case(tmp_path, export, seed):
    case(tmp_path, export, seed)


@need
def test_a_truncated_kernel_table_is_exit_6_and_names_the_table(tmp_path, export):
    d = tmp_path / "t_pqtdir"
    shutil.copytree(export, d)
    f = d / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    code, err = M.check(d, tmp_path / "t.json")
    assert code == 6 and "CUPTI_ACTIVITY_KIND_KERNEL" in err


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1000, 1150))
def test_columnar_fuzz_long(tmp_path, export, seed):
    case(tmp_path, export, seed)
