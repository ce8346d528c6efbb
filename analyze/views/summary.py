"""The table functions of earlier releases, by their old names (the API keeps them): each is the
one implementation in its concept's module (phases.py, cycles.py, nvtx.py)."""
from __future__ import annotations

from analyze.views.cycles import cycle_distribution_table as cycle_distribution
from analyze.views.cycles import tokens_summary
from analyze.views.nvtx import nvtx_range_summary
from analyze.views.phases import cross_rank_table as cross_rank

__all__ = ["cross_rank", "cycle_distribution", "tokens_summary", "nvtx_range_summary"]
