"""The shim's ``.pth`` hook for processes a test starts, without touching site-packages.

``pip install specprof`` puts ``specprof_nvtx.pth`` into site-packages; an editable install or a
source checkout does not have it (``python -m nvtx_annotate install-pth`` is the explicit opt-in,
and profile-trace writes nothing there). A test that profiles spawned interpreters gets the same
effect from ``hook_pythonpath``: a directory whose ``sitecustomize.py`` adds a site dir holding
exactly that line.
"""
from __future__ import annotations

import os
from pathlib import Path

from nvtx_annotate.pth import PTH_LINE


def hook_pythonpath(tmp_path: Path, *more: str) -> str:
    """A PYTHONPATH value (the boot directory first, then ``more``) under which every Python
    process runs the .pth hook."""
    site_dir, boot = tmp_path / "pth_site", tmp_path / "pth_boot"
    site_dir.mkdir(exist_ok=True)
    boot.mkdir(exist_ok=True)
    (site_dir / "specprof_nvtx.pth").write_text(PTH_LINE)
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    return os.pathsep.join([str(boot), *more])
