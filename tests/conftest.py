"""Unpacks the xz-compressed real fixtures once, before collection (module-level skipif checks
look for ``fixtures/real/*.sqlite``)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fixtures.unpack import unpack_all  # noqa: E402

unpack_all()


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch):
    """Every test sees the terminal width analyze-trace picks without COLUMNS (120 off a terminal) unless it
    sets COLUMNS itself: pytest-xdist's workers inherit COLUMNS=80, a narrow shell may export another."""
    monkeypatch.delenv("COLUMNS", raising=False)
