"""Python's cyclic garbage collector paused while the analysis' modules load, what they made then
frozen (memory.modules_load_without_gc; the CLI loads pandas inside it). What a fresh process does is
checked in a fresh interpreter; what a second load in one process does, in this one."""
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


# a module of 5000 lists, loaded inside the context: the collector's state inside and after, the
# objects frozen
LOAD_PROBE = """
import gc, json, sys
from analyze import memory
frozen_before = gc.get_freeze_count()
with memory.modules_load_without_gc():
    enabled_inside = gc.isenabled()
    import five_thousand_lists
print(json.dumps({"enabled_inside": enabled_inside, "enabled_after": gc.isenabled(),
                  "frozen_before": frozen_before, "frozen_after": gc.get_freeze_count(),
                  "lists_frozen": gc.is_tracked(five_thousand_lists.LISTS[0])}))
"""


def test_a_module_loads_without_collections_and_what_it_made_is_frozen(tmp_path):
    (tmp_path / "five_thousand_lists.py").write_text("LISTS = [[i] for i in range(5000)]\n")
    seen = _probe(f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + LOAD_PROBE, cwd=tmp_path)
    assert seen["enabled_inside"] is False and seen["enabled_after"] is True
    assert seen["frozen_before"] == 0
    assert seen["frozen_after"] >= 5000 + 1          # the lists and the list holding them, at least
    assert seen["lists_frozen"] is True              # frozen objects stay tracked, never scanned


def test_nothing_is_frozen_when_no_module_loads_and_the_collector_comes_back():
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with memory.modules_load_without_gc():
        assert not gc.isenabled()
        garbage = [[i] for i in range(100)]
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    del garbage
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
