"""NVTX ranges projected onto the GPU ops their API calls launched (projection.py)."""
