"""Derived tables computed from an Analysis (cross-rank aggregates, cycle distributions, ...)."""
