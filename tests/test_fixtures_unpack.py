"""``python -m fixtures.unpack [NAME ...]``: every committed fixture (about 1 GB unpacked), or the named ones."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*names):
    return subprocess.run([sys.executable, "-m", "fixtures.unpack", *names], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_a_named_fixture_alone_and_an_unknown_name_is_one_line():
    r = run("sglang_v2_l64_s3")
    assert r.returncode == 0 and r.stdout.split() == [str(ROOT / "fixtures" / "real" / "sglang_v2_l64_s3.sqlite")]
    bad = run("sglang_v2_l64_s3", "no_such_fixture")
    assert bad.returncode == 1 and bad.stderr.strip() == ("fixtures.unpack: no compressed fixture named no_such_fixture "
                                                          "in fixtures/real/")


def test_no_name_unpacks_every_fixture():
    r = run()
    from fixtures.unpack import compressed

    assert r.returncode == 0 and len(r.stdout.split()) == len(compressed())


def test_help_is_usage_not_a_fixture_name():
    proc = run("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m fixtures.unpack [NAME ...]")
