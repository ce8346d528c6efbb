"""Views of the all-reduce decomposition: per-rank wait and transfer, stragglers."""
from __future__ import annotations

import pandas as pd

from analyze.timeline import collectives as coll_mod
from analyze.views.registry import view


@view("skew")
def skew(a) -> pd.DataFrame:
    """Per rank: collectives, wait and transfer time, how often it arrived last in a significantly
    skewed collective (collectives.skew_summary)."""
    return coll_mod.skew_summary(a.collectives)


@view("stragglers")
def stragglers(a) -> list[int]:
    """The ranks that arrived last in the most significantly skewed collectives."""
    return coll_mod.stragglers(a.collectives)
