"""Figures over time: decode cycles (cycles.py) and collectives (collectives.py)."""
