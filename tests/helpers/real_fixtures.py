"""The committed real exports (fixtures/real/*.sqlite, unpacked from .xz by fixtures/unpack.py) that the
every-fixture tests iterate over."""
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"

LARGE = frozenset({"sglang_v2_l64_s3_b4.sqlite"})
"""Real profiles too large for the every-fixture tests inside CI's budget (158 MB, 1.4M kernels: the H200
grid profile); tests/test_whatif_sglang_grid.py reads them."""


def reports(include_large: bool = False) -> list[Path]:
    """The real exports, sorted; without :data:`LARGE` unless asked."""
    return sorted(p for p in REAL.glob("*.sqlite") if include_large or p.name not in LARGE)
