"""The ``.pth`` hook: one line in site-packages that, in every Python process started with
SPECPROF_NVTX=1, imports ``nvtx_annotate._boot`` (which installs the post-import hook).
With the variable unset it costs one ``os.environ.get`` at interpreter start."""

from __future__ import annotations

import os
import site
import sysconfig
from typing import Optional

PTH_NAME = "specprof_nvtx.pth"
PTH_LINE = (
    "import os, sys; exec('try:\\n import nvtx_annotate._boot\\nexcept Exception as e:\\n "
    "print(\"nvtx_annotate: .pth hook failed:\", e, file=sys.stderr)') "
    "if os.environ.get('SPECPROF_NVTX', '') not in ('', '0') else None\n"
)


def default_site_dir() -> str:
    return sysconfig.get_paths()["purelib"]


def pth_path(site_dir: Optional[str] = None) -> str:
    return os.path.join(site_dir or default_site_dir(), PTH_NAME)


def is_installed(site_dir: Optional[str] = None) -> bool:
    dirs = [site_dir] if site_dir else _site_dirs()
    for d in dirs:
        p = os.path.join(d, PTH_NAME)
        if os.path.isfile(p):
            with open(p) as f:
                if f.read() == PTH_LINE:
                    return True
    return False


def _site_dirs():
    dirs = [default_site_dir()]
    try:
        dirs += list(site.getsitepackages())
    except AttributeError:  # pragma: no cover - old virtualenv
        pass
    return [d for d in dict.fromkeys(dirs) if d]


def install_pth(site_dir: Optional[str] = None) -> str:
    path = pth_path(site_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(PTH_LINE)
    return path


def uninstall_pth(site_dir: Optional[str] = None) -> Optional[str]:
    path = pth_path(site_dir)
    if os.path.exists(path):
        os.remove(path)
        return path
    return None
