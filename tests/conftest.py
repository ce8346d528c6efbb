"""Unpacks the xz-compressed real fixtures once, before collection (module-level skipif checks
look for ``fixtures/real/*.sqlite``)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fixtures.nsys_record import one_profile_at_a_time  # noqa: E402
from fixtures.unpack import unpack_all  # noqa: E402

unpack_all()


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch):
    """Every test sees the terminal width analyze-trace picks without COLUMNS (120 off a terminal) unless it
    sets COLUMNS itself: pytest-xdist's workers inherit COLUMNS=80, a narrow shell may export another."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _one_nsys_at_a_time(request):
    """A test marked ``nsys`` (one that starts `nsys profile`) runs while no other worker's does: two nsys
    2022.4 launches at once now and then leave no report (fixtures/nsys_record.one_profile_at_a_time)."""
    if request.node.get_closest_marker("nsys") is None:
        yield
        return
    with one_profile_at_a_time():
        yield


def pytest_collection_finish(session):
    """What analyze is before any test runs: the shared loads (tests/helpers/shared_loads.py) analyse fresh
    while a test has any of it patched."""
    from helpers import shared_loads

    shared_loads.snapshot()
