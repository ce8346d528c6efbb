"""Views: every table derived from an :class:`~analyze.results.Analysis`, computed once.

Renderers (render/text.py, render/html.py, render/outputs.py, render/plots.py, the notebooks) do
not derive tables themselves: they ask for a view by name, ``views.get(analysis, name, **params)``,
and only format it. A view is a pure function of the analysis, in the module of its concept:

==================== ==================== ==========================================================
name                 module               holds
==================== ==================== ==========================================================
phase_by_rank        phases.py            exclusive ns per phase (rows, then ``busy``) and rank, share
cross_rank           phases.py            per phase: min/median/max/spread over ranks
phase_across_ranks   phases.py            per phase: ranges, CPU, projected, kernel ns + cross_rank
kernel_totals        kernels.py           per (phase, kernel): instances, ns, mean, share of phase
top_kernels          kernels.py           the ``top`` kernels of every phase
cycle_distribution   cycles.py            pooled percentiles of the per-cycle figures
cycle_counts         cycles.py            cycles with GPU data, ranks, cycles without, warm-up cycles
tokens               cycles.py            tokens per cycle and tokens/s (lowest rank)
skew                 collectives.py       per rank: wait, transfer, times late (steady state, skew.py)
stragglers           collectives.py       the ranks that arrived last in skewed steady-state collectives
nvtx_sum             nvtx.py              ``nsys stats -r nvtx_sum`` rows
decode_breakdown     decode.py            per rank and component: mean/median ns per steady cycle, share
decode_summary       decode.py            per rank: steady/warm-up cycles, period, tokens, GPU-ms/token
outside_cycles       decode.py            per rank and component: GPU busy outside every cycle period
headline             decode.py            the one sentence on top of every report
==================== ==================== ==========================================================

Adding a view (the pattern the decode breakdown follows): write a function
``fn(analysis, **params)`` in ``views/<concept>.py`` that returns a DataFrame (or a small dict),
decorate it with ``@view("name")`` (registry.py) and import the module below so that it registers.
``@view("name", file=N)`` writes it with ``--csv``/``--parquet``/``--json`` (N: its position among
those tables); ``@view("name", title="...")`` gives it a section of its own in the terminal report
and the HTML page (drawn as a table by render/text.py and render/html.py): a new figure is one
function in one module.
"""
from __future__ import annotations

from analyze.views import collectives, cycles, decode, kernels, nvtx, phases  # noqa: F401  (they register)
from analyze.views.registry import INFO, VIEWS, file_views, get, section_views, view

# the views written as files by --csv / --parquet and as tables of --json, in order (``@view(file=N)``)
FILE_VIEWS = file_views()

__all__ = ["VIEWS", "INFO", "FILE_VIEWS", "get", "view", "section_views"]
