"""``analyze-trace``: the command line.

    analyze-trace [REPORT.sqlite | DIR ...] [--json F] [--csv DIR] [--parquet DIR] [--phase ...]
    analyze-trace scrub IN.sqlite -o OUT.sqlite
    analyze-trace diff BEFORE AFTER
    analyze-trace whatif REPORT [--steps 1..10] [--baseline REPORT]
    analyze-trace advise REPORT... [--json F]

With no report, the bundled real H200 trace is analyzed. Errors are one line on stderr with a
documented exit code (docs/bad_input.md).
"""
from __future__ import annotations

import argparse
import atexit
import importlib
import os
import sys
import warnings

from analyze import memory
from analyze import output_policy
from analyze.atomic import atomic_write
from analyze.errors import (ArgumentParser, MissingInput, NvtxOnly, OutputError, SchemaWarning, TraceError, UsageError,
                            positive_int)
from analyze.processes import EXIT_TERMINATED, Terminated, single_threaded_blas, terminate_as_interrupt

# the subcommands: name -> (module, its entry point)
SUBCOMMANDS = {"scrub": ("analyze.tools.scrub", "main_scrub"), "diff": ("analyze.tools.diff.command", "main_diff"),
               "whatif": ("analyze.tools.whatif.command", "main_whatif"),
               "advise": ("analyze.tools.advise.command", "main_advise")}


def default_trace() -> str:
    """The bundled demo trace (unpacked into the user's cache on first use)."""
    from analyze.demo import demo_trace

    return demo_trace()


def package_version() -> str:
    """specprof's installed version (the source tree's pyproject version when not installed)."""
    try:
        from importlib.metadata import version

        return version("specprof")
    except Exception:  # noqa: BLE001 - run from a source tree
        return "0.1.0 (source tree)"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="analyze-trace",
        description="Attribute GPU time per phase (draft, verify, allreduce, ...), kernel and rank from "
                    "Nsight Systems SQLite exports. Subcommands: scrub, diff, whatif, advise (see `analyze-trace "
                    "SUBCOMMAND --help`).")
    p.add_argument("reports", nargs="*", help="nsys SQLite exports (or .nsys-rep, exported on the way; nsys "
                                              "parquetdir exports), directories of them (one per rank), or a "
                                              "specprof live timing log (*.parquet or its directory); default: "
                                              "the bundled real H200 trace")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    p.add_argument("--json", metavar="PATH", help="write every table as one JSON document ('-': standard output, "
                                                  "the text report then goes to standard error)")
    p.add_argument("--csv", metavar="DIR", help="write one CSV per table into DIR")
    p.add_argument("--parquet", metavar="DIR", help="write one Parquet file per table into DIR")
    p.add_argument("--plots", metavar="DIR", help="write the figures (PNG and SVG) into DIR")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML report")
    p.add_argument("--perfetto", metavar="PATH",
                   help="write the analyzed timeline (a track per rank: phases, decode cycles, all-reduce wait and "
                        "transfer, tokens) as a Perfetto protobuf trace that ui.perfetto.dev opens")
    p.add_argument("--config", metavar="FILE", help="phase definitions (TOML or JSON): docs/reference.md, section Phases")
    p.add_argument("--phase", action="append", default=[], metavar="NAME=ranges:A,B;kernels:PAT",
                   help="define or replace a phase (repeatable)")
    p.add_argument("--top", type=positive_int, default=5, help="kernels shown per phase (default 5)")
    p.add_argument("--jobs", type=positive_int, default=None, metavar="N",
                   help="reports analyzed in parallel processes (default, and at most: the number of CPU "
                        "cores, and of reports)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the per-report work on a Dask cluster (tcp://host:8786; needs specprof[dask])")
    p.add_argument("--memory-budget", metavar="SIZE", type=parse_budget, default="auto",
                   help="analyse each report in time-ordered chunks of GPU ops sized to SIZE (e.g. 1GB, "
                        "512MB): the same tables, the GPU ops kept in a file on disk instead of the per-op table "
                        "(timeline, Perfetto, advice and whatif read it; the kernel-per-cycle plots need the "
                        "table); the "
                        "API calls and NVTX ranges are held whole (about 150 bytes per call, 200 per range). "
                        "Default 'auto': whole, unless a report would not fit in the available memory "
                        "(then chunked, with a note); 'none': always whole")
    p.add_argument("--cache", action="store_true",
                   help="cache the extracted tables as Parquet next to the report (else ~/.cache/specprof) "
                        "so a re-open is instant; the report itself is never written")
    p.add_argument("--no-advice", action="store_true",
                   help="leave out the Advice section (terminal, HTML) and the JSON key `advice`")
    p.add_argument("--force", action="store_true",
                   help="let an output replace an existing Nsight Systems report (never an input of this run)")
    p.add_argument("--allow-mixed", action="store_true",
                   help="combine reports that do not look like one run (other hosts, sessions that never "
                        "overlapped; the same report twice is then analysed once)")
    p.add_argument("--strict", action="store_true",
                   help="stop at a report of a directory that cannot be analysed (default: leave it out, "
                        "with a note)")
    p.add_argument("-q", "--quiet", action="store_true", help="no terminal report, no progress")
    p.add_argument("--debug", action="store_true", help="show a traceback on internal errors")
    return p


def parse_budget(text: str) -> int | str | None:
    """``--memory-budget``: a size (:func:`parse_size`), ``auto`` or ``none``."""
    word = text.strip().lower()
    if word == "auto":
        return "auto"
    if word in ("none", "off", "whole"):
        return None
    return parse_size(text)


def parse_size(text: str) -> int:
    """``1GB``, ``512MB``, ``1.5GiB``, ``2000000000`` -> bytes (decimal units; ``iB`` binary)."""
    t = text.strip().upper().replace(" ", "")
    units = {"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
             "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9, "TB": 10 ** 12, "K": 10 ** 3, "M": 10 ** 6,
             "G": 10 ** 9, "T": 10 ** 12, "B": 1}
    for unit, factor in units.items():
        if t.endswith(unit):
            t, mult = t[: -len(unit)], factor
            break
    else:
        mult = 1
    try:
        value = float(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 1GB, 512MB)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the budget must be positive")
    return int(value)


def _refuse_a_misspelt_subcommand(reports) -> None:
    """A first argument that is no file but close to a subcommand's name (``dif``, ``help``): the
    missing-input error (exit 2) says which subcommand it may have meant."""
    import difflib

    first = str(reports[0]) if reports else ""
    if not first or os.path.exists(first) or os.sep in first or "." in first:
        return                          # a path, or a file name with a suffix: no subcommand meant
    near = difflib.get_close_matches(first.lower(), [*SUBCOMMANDS, "help"], n=1, cutoff=0.6)
    if near:
        meant = "`analyze-trace --help`" if near[0] == "help" else f"the subcommand `analyze-trace {near[0]}`"
        raise MissingInput(f"{first}: no such file or directory (did you mean {meant}? subcommands: "
                           f"{', '.join(SUBCOMMANDS)})", first)


def run_analyze(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    return _run_analyze(args)


def _run_analyze(args) -> int:
    with memory.modules_load_without_gc():     # pandas and the rest: no collections while they load
        from analyze import command_inputs
        from analyze.render import outputs, text as render
        from analyze.run import api
        from analyze.views.analysis_notes import with_view_notes

    config = command_inputs.phase_config(args.config, args.phase)
    blank = [r for r in args.reports if not str(r).strip()]
    if blank:       # "" is not the current directory, nor a reason to run the demo
        raise MissingInput("an empty path was given as a report (an unset shell variable?): give a report, a "
                           "directory of reports, or no argument at all for the bundled demo")
    _refuse_a_misspelt_subcommand(args.reports)
    demo = not args.reports
    reports = args.reports or [default_trace()]
    jobs = command_inputs.worker_count(args.jobs)
    files, protected = command_inputs.report_inputs(reports, args.config)
    with output_policy.protect(protected, force=args.force):
        output_policy.check_outputs({"--json": args.json, "--html": args.html, "--perfetto": args.perfetto},
                                    {"--csv": args.csv, "--parquet": args.parquet, "--plots": args.plots})
        try:
            result = api.load(reports, config, jobs=jobs, progress=not args.quiet and sys.stderr.isatty(),
                              cache=args.cache, memory_budget=args.memory_budget, scheduler=args.scheduler,
                              allow_mixed=args.allow_mixed, strict=args.strict)
        except NvtxOnly:
            if len(files) == 1:
                show_nvtx_only(files[0], args)
            raise
        from analyze import notes as N

        with_view_notes(result, config)           # what analyze.load adds: the CLI writes the same
        if args.perfetto:
            from analyze.run.live import is_live

            if is_live(result):             # before any output is written
                raise UsageError("--perfetto: a live timing log has no GPU timeline (no ops, no GPU window per "
                                 "cycle) to draw; the other outputs work")
        for note in result.notes:
            if note.code == N.PHASE_UNMATCHED:       # a warning on stderr too: -q shows it
                print(f"analyze-trace: {note.message}", file=sys.stderr)
        advice = None if args.no_advice or not (args.json or args.html or not args.quiet) else \
            report_advice(result, debug=args.debug)
        written: list[str] = []
        if args.json:
            outputs.write_json(result, args.json, advice=advice)
            written.append(args.json)
        if args.csv:
            written += [os.path.join(args.csv, n) for n in outputs.write_csv(result, args.csv)]
        if args.parquet:
            written += [os.path.join(args.parquet, n) for n in outputs.write_parquet(result, args.parquet)]
        if args.plots or args.html:
            try:
                from analyze.render import plots
            except ImportError as exc:  # pragma: no cover
                raise UsageError(f"plots unavailable: {exc}") from exc
            if args.plots:
                written += [os.path.join(args.plots, n) for n in plots.write_all(result, args.plots)]
            if args.html:
                from analyze.render import html
                html.write_html(result, args.html, advice=advice)
                written.append(args.html)
        if args.perfetto:
            from analyze.render import perfetto
            if not perfetto.has_phase_track(result):
                print("analyze-trace: warning: --perfetto: this analysis has no GPU ops: the trace has no phases "
                      "track", file=sys.stderr)
            perfetto.write_perfetto(result, args.perfetto)
            written.append(args.perfetto)
    if not args.quiet:
        output_policy.text_stream(args.json).write(render.render(result, top=args.top, demo=demo, written=written,
                                                                 advice=advice))
    return 0


def report_advice(result, debug: bool = False) -> dict | None:
    """The Advice section's data (analyze-trace advise's rules over ``result``); a failure of the
    rules costs the report nothing but the section (its error is shown in place of the findings)."""
    from analyze.tools.advise.model import advise

    try:
        return advise(result).to_dict()
    except Exception as exc:  # noqa: BLE001
        if debug:
            raise
        return {"findings": [], "checks": [], "cycle_ns": 0.0, "cycles": 0, "ranks": 0,
                "error": f"advice not computed: {type(exc).__name__}: {exc}"}


def show_nvtx_only(path: str, args) -> None:
    """What an NVTX-only export holds (ranks, CPU range statistics), before the exit-7 error line."""
    import json

    from analyze.tools import nvtx_only

    ov = nvtx_only.overview(path)
    if args.json:
        with atomic_write(args.json) as f:
            json.dump(nvtx_only.to_json_dict(ov), f, indent=1)
            f.write("\n")
    if not args.quiet:
        sys.stdout.write(nvtx_only.render(ov))
        sys.stdout.flush()


def dispatch(argv: list[str]) -> int:
    if not argv or argv[0] not in SUBCOMMANDS:
        return run_analyze(argv)
    module, entry = SUBCOMMANDS[argv[0]]
    with memory.modules_load_without_gc():
        tool_main = getattr(importlib.import_module(module), entry)
    return tool_main(argv[1:]) or 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    warnings.simplefilter("ignore", RuntimeWarning)   # numpy's empty-slice chatter is not for users
    warnings.simplefilter("default", SchemaWarning)
    warnings.formatwarning = lambda msg, cat, *a, **k: f"analyze-trace: warning: {msg}\n"
    single_threaded_blas()           # before NumPy loads
    memory.one_heap()
    memory.small_pages()
    try:
        with terminate_as_interrupt():
            return dispatch(argv)
    except TraceError as exc:
        print(f"analyze-trace: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("analyze-trace: interrupted (no output file was left half-written)", file=sys.stderr)
        return 130
    except Terminated:
        print("analyze-trace: terminated (no output file was left half-written)", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug of ours: say so in one line, traceback on request
        if debug:
            raise
        print(f"analyze-trace: internal error: {type(exc).__name__}: {exc} (rerun with --debug and "
              "report it)", file=sys.stderr)
        return 1


def console_main() -> None:
    """The ``analyze-trace`` command (and ``python -m analyze.cli``): :func:`main`, then the process
    ends without the interpreter freeing every object one by one (an analysis holds its tables until
    the end: at 10M kernels about 2 GB of arrays; the teardown cost 5-7% of the run, measured paired
    on the benchmark's 1M and 10M files). The output streams are flushed and the ``atexit`` handlers
    run first, so nothing written is lost; the exit status is :func:`main`'s."""
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):     # a closed reader: what was written is gone
            pass
    atexit._run_exitfuncs()
    os._exit(rc if isinstance(rc, int) else 1)


if __name__ == "__main__":  # pragma: no cover
    console_main()
