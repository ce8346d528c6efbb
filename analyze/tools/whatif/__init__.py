"""``analyze-trace whatif``: the acceptance model (acceptance.py), the cost and throughput model
(model.py), its text, JSON and figure (render.py) and the command line (command.py)."""
