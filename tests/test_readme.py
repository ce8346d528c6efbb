"""Every command the README shows after a `$` (its ```console blocks) is run here, from the repository
root, and the lines the README shows under it must appear in its output: contiguous runs of lines
between `...` lines, in order, each line exactly (trailing spaces aside)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def console_blocks(text: str) -> list[tuple[str, list[list[str]]]]:
    """(command, chunks of expected lines) per ```console block."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        assert lines[0].startswith("$ "), lines[0]
        chunks, cur = [], []
        for line in lines[1:]:
            if line.strip() == "...":
                if cur:
                    chunks.append(cur)
                cur = []
            else:
                cur.append(line.rstrip())
        if cur:
            chunks.append(cur)
        out.append((lines[0][2:], chunks))
    return out


def contains_in_order(output: list[str], chunks: list[list[str]]) -> str | None:
    """None when every chunk appears as contiguous lines of ``output``, in order; else the first chunk
    that does not, as text."""
    pos = 0
    for chunk in chunks:
        n = len(chunk)
        for i in range(pos, len(output) - n + 1):
            if output[i:i + n] == chunk:
                pos = i + n
                break
        else:
            return "\n".join(chunk)
    return None


BLOCKS = console_blocks(README.read_text())


def test_the_readme_shows_commands_and_is_a_guide():
    assert len(BLOCKS) >= 5
    assert len(README.read_text().splitlines()) <= 300


@pytest.mark.parametrize("command, chunks", BLOCKS, ids=[c[:60] for c, _ in BLOCKS])
def test_readme_command_prints_what_the_readme_shows(command, chunks):
    paths = re.findall(r"fixtures/real/\S+", command)
    if not all((ROOT / p).exists() for p in paths):
        pytest.skip("fixtures not unpacked")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    output = [line.rstrip() for line in r.stdout.splitlines()]
    missing = contains_in_order(output, chunks)
    assert missing is None, f"not in the output of `{command}`:\n{missing}\n--- output ---\n{r.stdout}"


def test_contains_in_order():
    out = ["a", "b", "c", "d"]
    assert contains_in_order(out, [["a", "b"], ["d"]]) is None
    assert contains_in_order(out, [["b", "d"]]) == "b\nd"
    assert contains_in_order(out, [["c"], ["a"]]) == "a"
