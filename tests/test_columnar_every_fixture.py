"""Issue 42's "Parquet input: every command on every real fixture gives the results of its SQLite twin":
every real export in fixtures/real written as nsys's ``parquetdir`` (fixtures/columnar.py: nsys's
column types, text as binary, ids unsigned), then the report (--json), whatif (--json), advise (--json)
and ``diff EXPORT SQLITE`` run on both. Equal JSON (paths aside), or the same exit code and the same
one-line refusal where a command cannot answer a fixture (whatif on a trace without speculation), and a
diff without any change. Slow (every fixture converted and read twice: minutes): ``-m slow``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import columnar as write_columnar
from helpers import cli_process

pytestmark = pytest.mark.slow

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
FIXTURES = sorted(p.name for p in REAL.glob("*.sqlite"))
COMMANDS = ([], ["whatif", "--steps", "1..4"], ["advise"])


def run_cli(*args) -> tuple[int, str, str]:
    proc = cli_process.run([*map(str, args)])
    return proc.returncode, proc.stdout, proc.stderr


def as_sqlite(text: str, src: Path, export: Path, copy: Path) -> str:
    """The export's output with its paths and names as the SQLite input's (the copy's path, then the
    export's, then their names: a report's label is its file's stem)."""
    for a, b in ((copy, src), (export, src)):
        text = text.replace(json.dumps(str(a))[1:-1], json.dumps(str(b))[1:-1])
    return text.replace(copy.name, src.name).replace(export.name, src.stem)


@pytest.mark.skipif(not FIXTURES, reason="fixtures not unpacked (python -m fixtures.unpack)")
@pytest.mark.parametrize("name", FIXTURES)
def test_every_command_on_the_parquet_twin_of_a_real_fixture(tmp_path, name):
    src = REAL / name
    export = write_columnar.write(src, tmp_path / (src.stem + "_pqtdir"))
    copy = export.with_name(export.name + ".sqlite")
    for cmd in COMMANDS:
        got = []
        for k, report in enumerate((export, src)):
            out = tmp_path / f"{(cmd or ['report'])[0]}_{k}.json"
            argv = cmd[:1] + [report] + cmd[1:] + (["-q"] if not cmd else []) + ["--json", out]
            rc, _, err = run_cli(*argv)
            body = out.read_text() if rc == 0 else err.strip()
            got.append((rc, as_sqlite(body, src, export, copy) if k == 0 else body))
        assert got[0] == got[1], (cmd, got[0][0], got[1][0])
    rc, _, err = run_cli("diff", export, src, "--json", tmp_path / "diff.json")
    if rc == 0:
        summary = json.loads((tmp_path / "diff.json").read_text())["summary"]
        assert all(r["delta"] == 0 and r["before"] == r["after"] for r in summary)
    else:      # a fixture diff cannot compare (no decode cycles): the same refusal for the twin as for itself
        rc2, _, err2 = run_cli("diff", src, src)
        assert rc == rc2 and as_sqlite(err.strip(), src, export, copy) == err2.strip()
