"""Python's cyclic garbage collector paused while the analysis' modules load, the heap frozen when
that load is the process' start-up (memory.modules_load_without_gc; the CLI loads pandas inside it).
What a fresh process does is checked in a fresh interpreter; what a second load in one process
does, in this one."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analyze import memory

ROOT = Path(__file__).resolve().parents[1]
GRAPHS = ROOT / "fixtures" / "real" / "h200_1proc_graphs_graphlevel.sqlite"


def _probe(code: str, cwd: Path = ROOT) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


# a module of 5000 lists loaded inside the context, with pandas (the process' start-up) or without:
# the collector's state inside and after, whether the lists were frozen (frozen objects are not
# among gc.get_objects())
LOAD_PROBE = """
import gc, json, sys
from analyze import memory
frozen_before = gc.get_freeze_count()
with memory.modules_load_without_gc():
    enabled_inside = gc.isenabled()
    import five_thousand_lists
    {startup}
print(json.dumps({{"enabled_inside": enabled_inside, "enabled_after": gc.isenabled(),
                  "frozen_before": frozen_before, "frozen_after": gc.get_freeze_count(),
                  "lists_frozen": not any(o is five_thousand_lists.LISTS[0] for o in gc.get_objects())}}))
"""


@pytest.mark.parametrize("startup", [True, False])
def test_modules_load_without_collections_and_a_start_up_is_frozen(tmp_path, startup):
    (tmp_path / "five_thousand_lists.py").write_text("LISTS = [[i] for i in range(5000)]\n")
    code = LOAD_PROBE.format(startup="import pandas" if startup else "pass")
    seen = _probe(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + code, cwd=tmp_path)
    assert seen["enabled_inside"] is False and seen["enabled_after"] is True
    assert seen["frozen_before"] == 0
    assert seen["lists_frozen"] is startup
    assert (seen["frozen_after"] > 50_000) is startup           # pandas' objects too (about 100k)


def test_a_start_up_after_other_work_freezes_nothing_it_made():
    """This process loaded pandas long ago: a second load (the CLI run again in one process) pauses
    the collector but freezes nothing, so no garbage left by earlier work is pinned."""
    import pandas  # noqa: F401  (the earlier work)

    assert memory.STARTUP_MODULE in sys.modules
    frozen = gc.get_freeze_count()
    with memory.modules_load_without_gc():
        import fractions  # noqa: F401  (loaded or not: no start-up either way)
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_the_collector_comes_back_after_an_error_and_nothing_is_frozen_without_a_load():
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with memory.modules_load_without_gc():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    with pytest.raises(ZeroDivisionError):
        with memory.modules_load_without_gc():
            1 / 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    try:
        with memory.modules_load_without_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


# the collector's state when the CLI first imports pandas, then after a whole run on a real report
CLI_PROBE = """
import gc, importlib.abc, json, sys
seen = {}
class Spy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pandas" and "gc_at_pandas_import" not in seen:
            seen["gc_at_pandas_import"] = gc.isenabled()
        return None
sys.meta_path.insert(0, Spy())
from analyze import cli
seen["pandas_loaded_by_the_cli_import"] = "pandas" in sys.modules
seen["rc"] = cli.main([%r, "-q"])
seen["gc_after"] = gc.isenabled()
seen["frozen_after"] = gc.get_freeze_count()
print(json.dumps(seen))
"""


def test_the_cli_loads_pandas_without_collections():
    seen = _probe(CLI_PROBE % str(GRAPHS))
    frozen = seen.pop("frozen_after")
    assert seen == {"pandas_loaded_by_the_cli_import": False, "gc_at_pandas_import": False, "rc": 0,
                    "gc_after": True}
    assert frozen > 50_000           # pandas, NumPy and Arrow's module objects (about 100k measured)
