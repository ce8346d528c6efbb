"""``analyze-trace diff BEFORE AFTER``: the comparison (model.py), its text, JSON and figure
(render.py) and the command line (command.py)."""
