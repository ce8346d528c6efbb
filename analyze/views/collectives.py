"""Views of the all-reduce decomposition: per-rank wait and transfer, stragglers (lateness counted
on steady-state evidence only: views/skew.py)."""
from __future__ import annotations

import pandas as pd

from analyze.views import skew as skew_mod
from analyze.views.registry import view


@view("skew", file=2)
def skew(a) -> pd.DataFrame:
    """Per rank: collectives, wait and transfer time, how often it arrived last in a significantly
    skewed steady-state collective (skew.skew_table)."""
    return skew_mod.skew_table(a)


@view("stragglers")
def stragglers(a) -> list[int]:
    """The ranks that arrived last in the most significantly skewed steady-state collectives."""
    return skew_mod.stragglers(a)
