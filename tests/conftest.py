"""Unpacks the xz-compressed real fixtures once, before collection (module-level skipif checks
look for ``fixtures/real/*.sqlite``)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from fixtures.unpack import unpack_all  # noqa: E402

unpack_all()
