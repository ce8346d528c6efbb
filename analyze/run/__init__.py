"""Driving the analysis: the map step per report (api.py, chunked.py), on a Dask cluster, and the reducer."""
