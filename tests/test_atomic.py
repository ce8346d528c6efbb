"""analyze.atomic's helper for derived files (temp_beside, replace_when_done)."""
from __future__ import annotations

import os

import pytest


def test_replace_when_done_renames_on_success_and_removes_on_failure(tmp_path):
    """The derived-file helper (an export's SQLite copy): renamed into place complete with the usual
    permissions (mkstemp makes 0600), or removed, leaving the target as it was, on any exception."""
    from analyze.atomic import replace_when_done, temp_beside

    target = tmp_path / "x.sqlite"
    tmp = temp_beside(target, ".tmp.sqlite")
    assert tmp.parent == tmp_path and tmp.name.startswith(".x.sqlite.") and tmp.name.endswith(".tmp.sqlite")
    with replace_when_done(tmp, target):
        tmp.write_text("done")
    assert target.read_text() == "done" and not tmp.exists()
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask
    tmp2 = temp_beside(target)
    with pytest.raises(KeyboardInterrupt):
        with replace_when_done(tmp2, target):
            tmp2.write_text("half")
            raise KeyboardInterrupt
    assert target.read_text() == "done" and not tmp2.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.sqlite"]
