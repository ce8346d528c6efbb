"""The committed real exports (fixtures/real/*.sqlite, unpacked from .xz by fixtures/unpack.py) that the
every-fixture tests iterate over."""
from pathlib import Path

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "real"

LARGE = frozenset({"sglang_v2_l64_s3_b4.sqlite", "sglang_h100_v2_l48_s3.sqlite", "sglang_h100_v2_l48_s3_gap.sqlite"})
"""Real profiles too large for the every-fixture tests inside CI's budget (the default run <= 8 minutes on 2 cores)
whose kind other fixtures cover there: the H200 grid profile (158 MB, 1.4M kernels; tests/test_whatif_sglang_grid.py
reads it) and the 48-layer configuration's two H100 profiles (177 and 161 MB; SGLang 0.5.17 with CUDA graphs on an H100
under nsys 2025.3.1 is in them through the 32- and 128-layer profiles; tests/test_whatif_sglang_v2_l48.py reads both)."""


def reports(include_large: bool = False) -> list[Path]:
    """The real exports, sorted; without :data:`LARGE` unless asked."""
    return sorted(p for p in REAL.glob("*.sqlite") if include_large or p.name not in LARGE)
