"""Driving the analysis: the map step per report (mapstep.py, chunk by chunk: chunks.py), the map task
with its memory policy (api.py) inline, in a process pool or on Dask (executors.py, distributed.py),
and the reducer (multirank.py)."""
