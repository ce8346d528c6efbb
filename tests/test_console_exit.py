"""The analyze-trace command ends its process without the interpreter's teardown (cli.console_main):
what it printed arrives whole, the atexit handlers still run, the exit status is main()'s, and a
reader that goes away early costs no traceback."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "fixtures" / "real" / "h200_4proc_eager.sqlite"


def _run(code: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, **kw)


def test_output_arrives_whole_and_atexit_runs(tmp_path):
    flag = tmp_path / "atexit_ran"
    code = (f"import atexit, sys; atexit.register(lambda: open({str(flag)!r}, 'w').write('ran')); "
            f"sys.argv = ['analyze-trace', {str(REPORT)!r}, '--top', '3']; "
            "from analyze.cli import console_main; console_main()")
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    assert flag.read_text() == "ran"
    # the same report as main() prints in a process that tears down normally
    normal = subprocess.run([sys.executable, "-c", f"import sys; from analyze.cli import main; "
                             f"sys.exit(main([{str(REPORT)!r}, '--top', '3']))"],
                            capture_output=True, text=True, timeout=300)
    assert normal.returncode == 0 and proc.stdout == normal.stdout and len(proc.stdout) > 1000


def test_exit_status_is_mains(tmp_path):
    missing = tmp_path / "missing.sqlite"
    from analyze.cli import main
    want = main([str(missing), "-q"])
    assert want not in (0, None)
    proc = _run(f"import sys; sys.argv = ['analyze-trace', {str(missing)!r}, '-q']; "
                "from analyze.cli import console_main; console_main()")
    assert proc.returncode == want, proc.stderr


def test_a_reader_that_leaves_early_costs_no_traceback():
    proc = subprocess.run(f"{sys.executable} -m analyze.cli {REPORT} | head -n 2", shell=True, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0
    assert len(proc.stdout.splitlines()) == 2
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
