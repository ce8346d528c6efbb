"""Which process is which rank (identify.py), and the clocks of several reports aligned (alignment.py)."""
