"""Regenerate the README's screenshots: the HTML report's first screen in headless Chromium
(report.png) and the figures shown beside it (decode.png, phases.png, timeline.png,
allreduce_wait.png).

    python docs/screenshots/make.py                      # fixtures/real/h200_shim_graphs_node.sqlite
    python docs/screenshots/make.py REPORT

Needs
``/usr/bin/chromium`` (``apt-get install -y chromium``) and the fixtures unpacked
(``python -m fixtures.unpack``).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEFAULT = "fixtures/real/h200_shim_graphs_node.sqlite"     # relative to the repository: shown on the page
SYNTH8 = dict(ranks=8, cycles=5, straggler={5: {"cycle": 3, "phase": "verify", "delay_ns": 400_000}})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("report", nargs="?", default=str(DEFAULT))
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--height", type=int, default=1000)
    args = p.parse_args(argv)
    import os

    os.chdir(ROOT)
    from analyze.render import html, plots

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("no chromium on PATH (apt-get install -y chromium)", file=sys.stderr)
        return 2
    import analyze

    a = analyze.load(args.report)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        html.write_html(a, page)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={args.width},{args.height}", f"--screenshot={HERE / 'report.png'}",
                        page.as_uri()], check=True, capture_output=True, timeout=180)
    (HERE / "decode.png").write_bytes(plots.to_bytes(plots.decode_bars(a)))
    (HERE / "phases.png").write_bytes(plots.to_bytes(plots.phase_bars(a)))
    (HERE / "timeline.png").write_bytes(plots.to_bytes(plots.cycle_timeline(a)))
    sys.path.insert(0, str(ROOT))
    from fixtures.synth import TraceSpec, write_trace     # collectives: the synthetic 8-rank trace

    with tempfile.TemporaryDirectory() as tmp:
        paths, _ = write_trace(TraceSpec(**SYNTH8), tmp)
        (HERE / "allreduce_wait.png").write_bytes(plots.to_bytes(plots.allreduce_heatmap(analyze.load(paths))))
    print("wrote", ", ".join(str(HERE / n) for n in ("report.png", "decode.png", "phases.png", "timeline.png",
                                                    "allreduce_wait.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
