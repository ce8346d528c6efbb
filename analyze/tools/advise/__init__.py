"""``analyze-trace advise``: ranked, quantified findings (model.py: rules over an Analysis; kinds.py:
all-reduce kinds from kernel names; settings.py: the settings to try; command.py)."""
